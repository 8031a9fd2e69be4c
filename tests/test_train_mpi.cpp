// The data-parallel strategies across real MPI ranks: run under `mpirun -np 2` (tests/meson.build
// does). DDP and ZeRO-1 must train alike (to rounding: ZeRO-1 sums the norm and runs AdamW's loop
// over other ranges), every rank must end with the same parameters, and the optimizer state
// gathered for a snapshot must reach the writing rank whole and nowhere else. A plain main, as
// tests/test_comm_mpi.cpp, so every rank takes part in every collective and agrees on the verdict.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../src/train/data_parallel.h"
#include "state_support.h"
#include "trainrun/backend/backend.h"
#include "trainrun/comm/comm.h"

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
Result train(bool zero, Communicator& comm) {
  auto be = make_cpu_backend();
  ParamStore ps(*be);
  ps.declare("w", {5, 7}, Init::normal, 0.5f, true);  // 37 elements: uneven shards
  ps.declare("b", {2}, Init::zeros, 0.0f, false);
  ps.allocate();
  ps.initialize(comm.rank() == 0 ? 11 : 99);  // only rank 0's weights may survive
  OptimizerConfig cfg;
  cfg.grad_clip = 0;
  auto dp = DataParallel::make(zero, comm, comm, ps, cfg, nullptr);
  dp->broadcast_params();
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
  r.write = shard_of(ps.numel(), comm.size(), comm.rank());
  r.m = all_gathered(comm, dp->optimizer().m(), dp->shard(), ps.numel());
  r.v = all_gathered(comm, dp->optimizer().v(), dp->shard(), ps.numel());
  return r;
}

}  // namespace

int main() {
  auto comm = make_mpi_communicator();
  const int rank = comm->rank();
  const Result ddp = train(false, *comm), zero = train(true, *comm);
  check(ddp.stats.loss == 1.5 && zero.stats.loss == 1.5, rank, "loss is the mean over ranks");
  check(ddp.stats.stop && zero.stats.stop, rank, "rank 1's stop request reaches every rank");
  // The last step's gradients, summed over the ranks as the strategies must.
  double sq = 0;
  for (int64_t i = 0; i < 37; ++i) {
    float g = 0;
    for (int r = 0; r < comm->size(); ++r) g += 0.01f * static_cast<float>((i % 5) - 2 + r + 2);
    sq += double(g) * g;
  }
  for (const Result* x : {&ddp, &zero})
    check(std::fabs(x->stats.grad_norm - std::sqrt(sq)) <= 1e-6 * std::sqrt(sq), rank,
          "the global gradient norm counts every element once");
  check(close(ddp.params, zero.params), rank, "ZeRO-1 parameters equal DDP's (to rounding)");
  // Each rank saves its shard_of share of the moments, nothing gathered: under ZeRO-1 the ones it
  // holds, under DDP (every rank holds all) the same range, so the world writes each once.
  for (const Result* x : {&ddp, &zero}) {
    const auto part = [x](const std::vector<float>& all) {
      return std::vector<float>(all.begin() + x->write.begin, all.begin() + x->write.end);
    };
    check(same(x->saved_m, part(x->m)) && same(x->saved_v, part(x->v)), rank,
          x == &ddp ? "DDP snapshot: this rank's share of the moments"
                    : "ZeRO-1 snapshot: this rank's shard of the moments");
  }
  check(close(zero.saved_m, ddp.saved_m) && close(zero.saved_v, ddp.saved_v), rank,
        "ZeRO-1 moments equal DDP's (to rounding)");
  std::vector<float> all(ddp.params.size() * static_cast<size_t>(comm->size()));
  comm->all_gather_bytes(ddp.params.data(), ddp.params.size() * sizeof(float), all.data());
  bool same = true;
  for (size_t i = 0; i < all.size(); ++i) same &= all[i] == ddp.params[i % ddp.params.size()];
  check(same, rank, "every rank ends with the same parameters");

  double counts[2] = {static_cast<double>(g_passed), static_cast<double>(g_failed)};
  comm->allreduce_sum(Tensor(counts, DType::f64, Device::cpu, {2}));
  if (rank == 0)
    std::printf("train-mpi: %d ranks, %.0f passed, %.0f failed\n", comm->size(), counts[0],
                counts[1]);
  return counts[1] == 0 ? 0 : 1;
}
