// The device mesh and the data-parallel strategies across real MPI ranks: run under `mpirun -np
// 4` (tests/meson.build does; any even count works). The mesh's groups must hold the ranks its
// coordinates say; DDP and ZeRO-1, flat and hybrid-sharded (dp_replicate 2), must train alike
// (to rounding: ZeRO-1 sums the norm and runs AdamW's loop over other ranges), every rank must
// end with the same parameters, and each rank must save exactly its share of the moments it
// holds. A plain main, as tests/test_comm_mpi.cpp, so every rank takes part in every collective
// and agrees on the verdict.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../src/train/data_parallel.h"
#include "state_support.h"
#include "trainrun/backend/backend.h"
#include "trainrun/comm/comm.h"
#include "trainrun/comm/device_mesh.h"

using namespace trainrun;

namespace {

int g_failed = 0, g_passed = 0;

void check(bool ok, int rank, const std::string& what) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  std::fprintf(stderr, "train-mpi: rank %d FAILED: %s\n", rank, what.c_str());
}

std::vector<float> host(const Tensor& t) {
  const float* p = t.as<float>();
  return std::vector<float>(p, p + t.numel());
}

struct Result {
  std::vector<float> params;
  std::vector<float> saved_m, saved_v;  // the moments this rank writes into a checkpoint
  Shard write{0, 0};                    // which flat range they are
  std::vector<float> m, v;              // the moments, all-gathered independently of the strategy
  StepStats stats;
};

std::vector<float> all_gathered(Communicator& comm, const Tensor& mine, Shard s, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), 0.0f);
  const std::vector<float> shard = host(mine);
  std::copy(shard.begin(), shard.end(), out.begin() + s.begin);
  comm.all_gather(Tensor(out.data(), DType::f32, Device::cpu, {n}));
  return out;
}

// Element-wise equality of any two float sequences (a checkpoint's StateBuffer, a vector).
template <typename A, typename B>
bool same(const A& a, const B& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

template <typename A, typename B>
bool close(const A& a, const B& b) {
  bool ok = a.size() == b.size();
  for (size_t i = 0; ok && i < a.size(); ++i)
    ok = std::fabs(a[i] - b[i]) <= 1e-6f * (1.0f + std::fabs(a[i]));
  return ok;
}

// Two steps of one strategy from rank 0's initial weights; gradients differ by rank.
Result train(bool zero, const DeviceMesh& mesh) {
  Communicator& comm = mesh.host();
  auto be = make_cpu_backend();
  ParamStore ps(*be);
  ps.declare("w", {5, 7}, Init::normal, 0.5f, true);  // 37 elements: uneven shards
  ps.declare("b", {2}, Init::zeros, 0.0f, false);
  ps.allocate();
  ps.initialize(comm.rank() == 0 ? 11 : 99);  // only rank 0's weights may survive
  OptimizerConfig cfg;
  cfg.grad_clip = 0;
  auto dp = DataParallel::make(zero ? 1 : 0, mesh, ps, cfg, nullptr);
  dp->initialize_weights(11);  // rank 0's draw, broadcast
  Result r;
  for (int64_t step = 1; step <= 2; ++step) {
    float* g = ps.grads().as<float>();
    for (int64_t i = 0; i < ps.numel(); ++i)
      g[i] = 0.01f * static_cast<float>((i % 5) - 2 + comm.rank() + step);
    StepTimes t;
    if (auto ready = dp->grad_ready_hook()) ready(0, ps.numel());  // as backward reports ranges
    dp->reduce_grads(t);
    r.stats = dp->reduce_stats(1.0 + comm.rank(), comm.rank() == 1, t);
    dp->update(1e-2, step, r.stats.grad_norm, t);
  }
  r.params = host(ps.params());
  r.saved_m = testing::saved_flat(*dp, "optimizer/m");
  r.saved_v = testing::saved_flat(*dp, "optimizer/v");
  // The ranks holding the same moments each write their share: every rank under DDP, a shard's
  // replicas under ZeRO-1.
  const Shard held = dp->optimizer().pieces().front();
  const int copies = zero ? mesh.shape().dp_replicate : comm.size();
  const int index = zero ? mesh.coord(MeshAxis::dp_replicate) : comm.rank();
  const Shard part = shard_of(held.size(), copies, index);
  r.write = Shard{held.begin + part.begin, held.begin + part.end};
  Communicator& holders = zero ? mesh.host_group(MeshAxis::dp_shard) : comm;
  r.m = all_gathered(holders, dp->optimizer().m(), held, ps.numel());
  r.v = all_gathered(holders, dp->optimizer().v(), held, ps.numel());
  return r;
}

// The same two steps under ZeRO-2 or ZeRO-3: the same parameters in two units ("w" and "b"),
// held by the strategy (ParamStorage::external); each step's backward is the model's brackets:
// a unit acquired, its gradients written (the same values as train() writes), released.
Result train_sharded(int zero, const DeviceMesh& mesh) {
  Communicator& comm = mesh.host();
  auto be = make_cpu_backend();
  ParamStore ps(*be, DType::f32, ParamStorage::external);
  ps.begin_unit("w");
  ps.declare("w", {5, 7}, Init::normal, 0.5f, true);
  ps.begin_unit("b");
  ps.declare("b", {2}, Init::zeros, 0.0f, false);
  ps.allocate();
  OptimizerConfig cfg;
  cfg.grad_clip = 0;
  auto dp = DataParallel::make(zero, mesh, ps, cfg, nullptr);
  dp->initialize_weights(11);
  Result r;
  for (int64_t step = 1; step <= 2; ++step) {
    StepTimes t;
    dp->begin_step();
    ps.begin_grads();
    for (int u = 1; u >= 0; --u) {
      ps.acquire(u, Pass::backward);
      for (int i = ps.units()[u].first; i < ps.units()[u].last; ++i) {
        const ParamInfo& p = ps.infos()[static_cast<size_t>(i)];
        float* g = ps.grad(i).as<float>();
        ps.grad_write(i);  // written here, as an op would
        for (int64_t k = 0; k < p.numel; ++k)
          g[k] = 0.01f * static_cast<float>(((p.offset + k) % 5) - 2 + comm.rank() + step);
      }
      ps.release(u, Pass::backward);
    }
    dp->reduce_grads(t);
    r.stats = dp->reduce_stats(1.0 + comm.rank(), comm.rank() == 1, t);
    dp->update(1e-2, step, r.stats.grad_norm, t);
  }
  // The weights as a forward sees them, unit by unit.
  for (int u = 0; u < 2; ++u) {
    ps.acquire(u, Pass::forward);
    for (int i = ps.units()[u].first; i < ps.units()[u].last; ++i) {
      const std::vector<float> w = host(ps.param(i));
      r.params.insert(r.params.end(), w.begin(), w.end());
    }
    ps.release(u, Pass::forward);
  }
  r.saved_m = testing::saved_flat(*dp, "optimizer/m");
  return r;
}

// Every group holds the ranks its coordinates say, and its collectives reach them alone.
void check_mesh(Communicator& world, int dp_replicate) {
  const int rank = world.rank();
  const DeviceMesh mesh(world, nullptr, MeshShape::of(world.size(), dp_replicate));
  const int S = world.size() / dp_replicate;
  const std::string shape = mesh.shape().describe();
  check(
      mesh.coord(MeshAxis::dp_replicate) == rank / S && mesh.coord(MeshAxis::dp_shard) == rank % S,
      rank, shape + ": coordinates");
  for (MeshAxis a : {MeshAxis::dp_replicate, MeshAxis::dp_shard}) {
    Communicator& g = mesh.host_group(a);
    check(g.size() == mesh.shape().size(a) && g.rank() == mesh.coord(a), rank,
          shape + ": " + axis_name(a) + " group's size and this rank's place in it");
    // The sum of the world ranks in the group: a dp_shard group is S consecutive ranks, a
    // dp_replicate group the ranks S apart.
    double sum = rank;
    g.allreduce_sum(Tensor(&sum, DType::f64, Device::cpu, {1}));
    double want = 0;
    for (int r = 0; r < world.size(); ++r)
      if (a == MeshAxis::dp_shard ? r / S == rank / S : r % S == rank % S) want += r;
    check(sum == want, rank, shape + ": " + axis_name(a) + " group's allreduce reaches its ranks");
  }
}

}  // namespace

int main() {
  auto comm = make_mpi_communicator();
  const int rank = comm->rank();
  for (int replicas = 1; replicas <= comm->size(); ++replicas)
    if (comm->size() % replicas == 0) check_mesh(*comm, replicas);
  const DeviceMesh flat = DeviceMesh::flat(*comm);
  const Result ddp = train(false, flat), zero = train(true, flat);
  // Hybrid sharding: ZeRO-1 inside groups of world / 2 ranks, replicated across 2 groups.
  const DeviceMesh hybrid(*comm, nullptr, MeshShape::of(comm->size(), 2));
  const Result hsdp = train(true, hybrid);
  const double mean_loss = 1.0 + (comm->size() - 1) / 2.0;  // rank r's loss is 1 + r
  check(ddp.stats.loss == mean_loss && zero.stats.loss == mean_loss, rank,
        "loss is the mean over ranks");
  check(ddp.stats.stop && zero.stats.stop, rank, "rank 1's stop request reaches every rank");
  // The last step's gradients, summed over the ranks as the strategies must.
  double sq = 0;
  for (int64_t i = 0; i < 37; ++i) {
    float g = 0;
    for (int r = 0; r < comm->size(); ++r) g += 0.01f * static_cast<float>((i % 5) - 2 + r + 2);
    sq += double(g) * g;
  }
  for (const Result* x : {&ddp, &zero, &hsdp})
    check(std::fabs(x->stats.grad_norm - std::sqrt(sq)) <= 1e-6 * std::sqrt(sq), rank,
          "the global gradient norm counts every element once");
  check(close(ddp.params, zero.params), rank, "ZeRO-1 parameters equal DDP's (to rounding)");
  check(close(ddp.params, hsdp.params), rank, "hybrid ZeRO-1 parameters equal DDP's");
  check(hsdp.stats.loss == ddp.stats.loss && hsdp.stats.stop, rank, "hybrid: loss and stop");
  // Each rank saves its shard_of share of the moments, nothing gathered: under ZeRO-1 the ones it
  // holds, under DDP (every rank holds all) the same range, so the world writes each once.
  for (const Result* x : {&ddp, &zero, &hsdp}) {
    const auto part = [x](const std::vector<float>& all) {
      return std::vector<float>(all.begin() + x->write.begin, all.begin() + x->write.end);
    };
    check(same(x->saved_m, part(x->m)) && same(x->saved_v, part(x->v)), rank,
          x == &ddp    ? "DDP snapshot: this rank's share of the moments"
          : x == &zero ? "ZeRO-1 snapshot: this rank's shard of the moments"
                       : "hybrid snapshot: this replica's share of its shard's moments");
  }
  // The world writes every element once: the ranks' write ranges tile the buffer.
  for (const Result* x : {&ddp, &zero, &hsdp}) {
    std::vector<double> ranges(2 * static_cast<size_t>(comm->size()));
    const double mine[2] = {double(x->write.begin), double(x->write.end)};
    comm->all_gather_doubles(mine, 2, ranges.data());
    std::vector<int> covered(37, 0);
    for (size_t r = 0; r < ranges.size(); r += 2)
      for (auto i = int64_t(ranges[r]); i < int64_t(ranges[r + 1]); ++i) ++covered[size_t(i)];
    check(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }), rank,
          "the ranks' snapshots hold every moment once");
  }
  check(close(zero.saved_m, ddp.saved_m) && close(zero.saved_v, ddp.saved_v), rank,
        "ZeRO-1 moments equal DDP's (to rounding)");
  std::vector<float> all(ddp.params.size() * static_cast<size_t>(comm->size()));
  comm->all_gather_bytes(ddp.params.data(), ddp.params.size() * sizeof(float), all.data());
  bool same = true;
  for (size_t i = 0; i < all.size(); ++i) same &= all[i] == ddp.params[i % ddp.params.size()];
  check(same, rank, "every rank ends with the same parameters");

  // ZeRO-2 and ZeRO-3 over the same meshes: the same parameters as ZeRO-1 (the same sums of the
  // same gradients, reduce-scattered unit by unit), every rank alike.
  for (int z : {2, 3}) {
    const std::string name = "ZeRO-" + std::to_string(z);
    const Result flat_z = train_sharded(z, flat), hybrid_z = train_sharded(z, hybrid);
    check(close(flat_z.params, zero.params), rank, name + " parameters equal ZeRO-1's");
    check(close(hybrid_z.params, zero.params), rank,
          "hybrid " + name + " parameters equal ZeRO-1's");
    check(std::fabs(flat_z.stats.grad_norm - std::sqrt(sq)) <= 1e-6 * std::sqrt(sq) &&
              std::fabs(hybrid_z.stats.grad_norm - std::sqrt(sq)) <= 1e-6 * std::sqrt(sq),
          rank, name + ": the global gradient norm counts every element once");
    check(flat_z.stats.loss == mean_loss && flat_z.stats.stop, rank, name + ": loss and stop");
    std::vector<float> every(flat_z.params.size() * static_cast<size_t>(comm->size()));
    comm->all_gather_bytes(flat_z.params.data(), flat_z.params.size() * sizeof(float),
                           every.data());
    bool alike = true;
    for (size_t i = 0; i < every.size(); ++i)
      alike &= every[i] == flat_z.params[i % flat_z.params.size()];
    check(alike, rank, name + ": every rank sees the same weights");
  }

  double counts[2] = {static_cast<double>(g_passed), static_cast<double>(g_failed)};
  comm->allreduce_sum(Tensor(counts, DType::f64, Device::cpu, {2}));
  if (rank == 0)
    std::printf("train-mpi: %d ranks, %.0f passed, %.0f failed\n", comm->size(), counts[0],
                counts[1]);
  return counts[1] == 0 ? 0 : 1;
}
