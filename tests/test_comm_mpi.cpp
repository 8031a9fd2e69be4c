// Collectives across real MPI ranks: run under `mpirun -np 2` (tests/meson.build does).
// A plain main, not doctest: every rank must take part in every collective, and every rank
// must agree on the verdict so mpirun's exit status reflects a failure on any rank.
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainrun/comm/comm.h"
#include "trainrun/core/bf16.h"

using namespace trainrun;

namespace {

int g_passed = 0, g_failed = 0;
int g_rank = 0;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::fprintf(stderr, "comm-mpi: rank %d FAILED: %s\n", g_rank, what.c_str());
  }
}

// Values with an exact sum in f32 and f64 alike, different on each rank.
double value(int rank, int64_t i) {
  return static_cast<double>((rank + 1) * 1000 + (i % 997));
}
double sum_over_ranks(int world, int64_t i) {
  double s = 0;
  for (int r = 0; r < world; ++r) s += value(r, i);
  return s;
}

template <class T>
DType dtype_of();
template <>
DType dtype_of<float>() {
  return DType::f32;
}
template <>
DType dtype_of<double>() {
  return DType::f64;
}

template <class T>
void test_allreduce(Communicator& c, const char* name) {
  const int64_t n = 1001;
  const int w = c.size(), r = c.rank();
  std::vector<T> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] = static_cast<T>(value(r, i));
  c.allreduce_sum(Tensor(a.data(), dtype_of<T>(), Device::cpu, {n}));
  c.allreduce_avg(Tensor(b.data(), dtype_of<T>(), Device::cpu, {n}));
  bool sum_ok = true, avg_ok = true;
  for (int64_t i = 0; i < n; ++i) {
    sum_ok &= a[i] == static_cast<T>(sum_over_ranks(w, i));
    avg_ok &= b[i] == static_cast<T>(sum_over_ranks(w, i) / w);
  }
  check(sum_ok, std::string("allreduce_sum ") + name);
  check(avg_ok, std::string("allreduce_avg ") + name);
}

void test_iallreduce(Communicator& c) {
  const int64_t n = 4097;
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] = static_cast<float>(value(c.rank(), i));
  auto ra = c.iallreduce_sum(Tensor(a.data(), DType::f32, Device::cpu, {n}));
  auto rb = c.iallreduce_sum(Tensor(b.data(), DType::f32, Device::cpu, {n}));
  while (!ra->test()) {
  }
  rb->wait();
  check(ra->test() && rb->test(), "iallreduce: test() true after completion");
  bool ok = true;
  for (int64_t i = 0; i < n; ++i)
    ok &= a[i] == static_cast<float>(sum_over_ranks(c.size(), i)) && b[i] == a[i];
  check(ok, "iallreduce_sum values (two in flight)");
}

void test_reduce_scatter(Communicator& c) {
  for (int64_t n : {int64_t{1001}, int64_t{7}, int64_t{1}}) {
    Shard s = shard_of(n, c.size(), c.rank());
    std::vector<double> a(n), b(n);
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] = value(c.rank(), i);
    c.reduce_scatter_sum(Tensor(a.data(), DType::f64, Device::cpu, {n}));
    auto req = c.ireduce_scatter_sum(Tensor(b.data(), DType::f64, Device::cpu, {n}));
    req->wait();
    bool ok = true, iok = true;
    for (int64_t i = s.begin; i < s.end; ++i) {
      ok &= a[i] == sum_over_ranks(c.size(), i);
      iok &= b[i] == sum_over_ranks(c.size(), i);
    }
    check(ok, "reduce_scatter_sum n=" + std::to_string(n));
    check(iok, "ireduce_scatter_sum n=" + std::to_string(n));
  }
}

// bf16 (ZeRO-2/3's distributed.reduce_dtype): small integers, exact in bf16, sum exactly; a
// sum that bf16 cannot hold comes back rounded to nearest even; and a bf16 all-gather moves bits.
void test_bf16(Communicator& c) {
  const int64_t n = 37;
  const Shard s = shard_of(n, c.size(), c.rank());
  std::vector<uint16_t> a(n);
  for (int64_t i = 0; i < n; ++i) a[i] = bf16_from_f32(static_cast<float>(i % 5 + c.rank()));
  c.reduce_scatter_sum(Tensor(a.data(), DType::bf16, Device::cpu, {n}));
  bool ok = true;
  for (int64_t i = s.begin; i < s.end; ++i) {
    float want = 0;
    for (int r = 0; r < c.size(); ++r) want += static_cast<float>(i % 5 + r);
    ok &= bf16_to_f32(a[i]) == want;
  }
  check(ok, "bf16 reduce_scatter_sum of exact values");
  // 256 + 1 per rank: 256 + 1 rounds to 256 in bf16 (8 bits of mantissa), at every step.
  std::vector<uint16_t> r(static_cast<size_t>(c.size()),
                          bf16_from_f32(c.rank() == 0 ? 256.0f : 1.0f));
  c.reduce_scatter_sum(Tensor(r.data(), DType::bf16, Device::cpu, {c.size()}));
  check(bf16_to_f32(r[static_cast<size_t>(c.rank())]) == 256.0f,
        "bf16 reduce_scatter_sum rounds to bf16 as it sums");
  std::vector<uint16_t> g(static_cast<size_t>(n), 0);
  for (int64_t i = s.begin; i < s.end; ++i) g[i] = static_cast<uint16_t>(0x3f80 + i);
  c.all_gather(Tensor(g.data(), DType::bf16, Device::cpu, {n}));
  bool moved = true;
  for (int64_t i = 0; i < n; ++i) moved &= g[i] == static_cast<uint16_t>(0x3f80 + i);
  check(moved, "bf16 all_gather moves every rank's bits");
}

void test_all_gather(Communicator& c) {
  const int64_t n = 1001;
  Shard s = shard_of(n, c.size(), c.rank());
  std::vector<float> a(n, -1.0f);
  for (int64_t i = s.begin; i < s.end; ++i) a[i] = static_cast<float>(i * 3 + 1);
  c.all_gather(Tensor(a.data(), DType::f32, Device::cpu, {n}));
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= a[i] == static_cast<float>(i * 3 + 1);
  check(ok, "all_gather uneven (n=1001)");
}

void test_broadcast(Communicator& c) {
  const int root = c.size() - 1;
  std::vector<double> a(100);
  for (int i = 0; i < 100; ++i) a[i] = c.rank() == root ? i * 0.5 : -7.0;
  c.broadcast(Tensor(a.data(), DType::f64, Device::cpu, {100}), root);
  bool ok = true;
  for (int i = 0; i < 100; ++i) ok &= a[i] == i * 0.5;
  check(ok, "broadcast from last rank");
}

void test_all_gather_doubles(Communicator& c) {
  const double in[3] = {c.rank() + 0.25, c.rank() * 10.0, -1.0 * c.rank()};
  std::vector<double> out(3 * c.size(), 99.0);
  c.all_gather_doubles(in, 3, out.data());
  bool ok = true;
  for (int r = 0; r < c.size(); ++r)
    ok &= out[r * 3] == r + 0.25 && out[r * 3 + 1] == r * 10.0 && out[r * 3 + 2] == -1.0 * r;
  check(ok, "all_gather_doubles");
}

void test_gather(Communicator& c) {
  for (int64_t n : {int64_t{1001}, int64_t{1}}) {  // n=1: some ranks contribute nothing
    for (int root : {0, c.size() - 1}) {
      const Shard s = shard_of(n, c.size(), c.rank());
      std::vector<float> mine(static_cast<size_t>(s.size()));
      for (int64_t i = s.begin; i < s.end; ++i) mine[i - s.begin] = static_cast<float>(i * 3 + 1);
      std::vector<float> all(c.rank() == root ? n : 0, -1.0f);
      c.gather(Tensor(mine.data(), DType::f32, Device::cpu, {s.size()}),
               c.rank() == root ? Tensor(all.data(), DType::f32, Device::cpu, {n}) : Tensor(),
               root);
      bool ok = true;
      for (size_t i = 0; i < all.size(); ++i) ok &= all[i] == static_cast<float>(i * 3 + 1);
      check(ok, "gather to root " + std::to_string(root) + " n=" + std::to_string(n));
    }
  }
  // In place: root's own range already sits in `all`.
  const int64_t n = 10;
  const Shard s = shard_of(n, c.size(), c.rank());
  std::vector<double> all(n, -1.0);
  for (int64_t i = s.begin; i < s.end; ++i) all[i] = i + 0.5;
  c.gather(Tensor(all.data() + s.begin, DType::f64, Device::cpu, {s.size()}),
           c.rank() == 0 ? Tensor(all.data(), DType::f64, Device::cpu, {n}) : Tensor(), 0);
  bool ok = true;
  for (int64_t i = 0; i < n && c.rank() == 0; ++i) ok &= all[i] == i + 0.5;
  check(ok, "gather in place");
}

void test_byte_collectives(Communicator& c) {
  const std::string mine = "host-" + std::to_string(c.rank());
  char in[16] = {};
  mine.copy(in, sizeof in - 1);
  std::vector<char> out(sizeof in * static_cast<size_t>(c.size()), 'x');
  c.all_gather_bytes(in, sizeof in, out.data());
  bool ok = true;
  for (int r = 0; r < c.size(); ++r)
    ok &=
        std::string(out.data() + sizeof in * static_cast<size_t>(r)) == "host-" + std::to_string(r);
  check(ok, "all_gather_bytes");

  const int root = c.size() - 1;
  unsigned char id[128];
  for (int i = 0; i < 128; ++i)
    id[i] = static_cast<unsigned char>(c.rank() == root ? (i * 7 + 3) & 0xff : 0);
  c.broadcast_bytes(id, sizeof id, root);
  ok = true;
  for (int i = 0; i < 128; ++i) ok &= id[i] == static_cast<unsigned char>((i * 7 + 3) & 0xff);
  check(ok, "broadcast_bytes from last rank");
}

// The one-rank communicator keeps the same contracts as the identity.
void test_local_communicator() {
  auto c = make_local_communicator();
  float mine[3] = {1, 2, 3}, all[3] = {};
  c->gather(Tensor(mine, DType::f32, Device::cpu, {3}), Tensor(all, DType::f32, Device::cpu, {3}),
            0);
  check(all[0] == 1 && all[1] == 2 && all[2] == 3, "local gather copies");
  char in[4] = {'a', 'b', 'c', 0}, out[4] = {};
  c->all_gather_bytes(in, 4, out);
  check(std::string(out) == "abc", "local all_gather_bytes copies");
  bool threw = false;
  try {
    c->broadcast_bytes(in, 4, 1);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  check(threw, "local broadcast_bytes rejects root 1");
}

void test_shard_partition(Communicator& c) {
  bool ok = true;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1001}, int64_t{1} << 40}) {
    int64_t next = 0;
    for (int r = 0; r < c.size(); ++r) {
      Shard s = shard_of(n, c.size(), r);
      ok &= s.begin == next && s.size() >= 0;
      next = s.end;
    }
    ok &= next == n;
  }
  check(ok, "shard_of partitions [0, n)");
}

void test_identity(Communicator& c) {
  check(c.kind() == "mpi", "kind is mpi");
  check(c.size() >= 2, "size >= 2 (run me under mpirun -np 2)");
  check(c.local_size() >= 1 && c.local_size() <= c.size() && c.local_rank() >= 0 &&
            c.local_rank() < c.local_size(),
        "local rank/size sane");
  check(!c.host().empty(), "host named");
  bool bad_device = false;
  float f = 0;
  try {
    c.allreduce_sum(Tensor(&f, DType::f32, Device::cuda, {1}));
  } catch (const std::invalid_argument&) {
    bad_device = true;
  }
  check(bad_device, "cuda tensor rejected with invalid_argument");
}

}  // namespace

int main() {
  auto comm = make_mpi_communicator();
  g_rank = comm->rank();
  {
    // A second communicator shares MPI; destroying it must not finalise MPI under the first.
    auto second = make_mpi_communicator();
    check(second->size() == comm->size() && second->rank() == comm->rank(),
          "second communicator agrees");
    second->barrier();
  }
  test_identity(*comm);
  test_allreduce<float>(*comm, "f32");
  test_allreduce<double>(*comm, "f64");
  test_iallreduce(*comm);
  test_reduce_scatter(*comm);
  test_bf16(*comm);
  test_all_gather(*comm);
  test_broadcast(*comm);
  test_all_gather_doubles(*comm);
  test_gather(*comm);
  test_byte_collectives(*comm);
  test_local_communicator();
  test_shard_partition(*comm);
  comm->barrier();

  double counts[2] = {static_cast<double>(g_passed), static_cast<double>(g_failed)};
  comm->allreduce_sum(Tensor(counts, DType::f64, Device::cpu, {2}));
  if (comm->rank() == 0)
    std::printf("comm-mpi: %d ranks, %.0f passed, %.0f failed\n", comm->size(), counts[0],
                counts[1]);
  return counts[1] == 0 ? 0 : 1;
}
