// The sim's NCCL (kernels/sim/nccl_mpi.cpp) across real MPI ranks: run under `mpirun -np 2` (or
// more). Every collective is checked against values each rank can compute for itself, in place
// and out of place, with the even and the uneven (grouped Reduce / Broadcast) shard layouts that
// kernels/nccl_comm.cpp uses.
//
// Its own main: MPI_Init / MPI_Finalize around doctest's Context, and a failure on any rank fails
// every rank's exit status. Only CHECK, never REQUIRE: a REQUIRE failing on one rank would skip
// the rest of a test there, and the other ranks would then wait forever in a collective.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "plugin_api.h"
#include "trainrun/comm/comm.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/shard.h"
#include "trainrun/core/tensor.h"

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int w = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}

// A communicator over the whole world, made as trainrun makes it: rank 0's id sent over MPI.
class Comm {
 public:
  Comm() {
    ncclUniqueId id{};
    if (world_rank() == 0) CHECK(ncclGetUniqueId(&id) == ncclSuccess);
    MPI_Bcast(id.internal, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
    CHECK(ncclCommInitRank(&comm_, world_size(), id, world_rank()) == ncclSuccess);
  }
  ~Comm() { ncclCommDestroy(comm_); }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

// A device array of T (the sim runtime's cudaMalloc), with host copies in and out.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    CHECK(cudaMalloc(&p_, sizeof(T) * (n ? n : 1)) == cudaSuccess);
  }
  explicit DeviceArray(const std::vector<T>& v) : DeviceArray(v.size()) { set(v); }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get(size_t offset = 0) const { return static_cast<T*>(p_) + offset; }
  void set(const std::vector<T>& v) {
    cudaMemcpy(p_, v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice);
  }
  std::vector<T> host() const {
    std::vector<T> v(n_);
    cudaMemcpy(v.data(), p_, sizeof(T) * n_, cudaMemcpyDeviceToHost);
    return v;
  }

 private:
  void* p_ = nullptr;
  size_t n_;
};

// Values different on every rank whose sums are exact in f32 (and in bf16 for the small ones).
float value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 97));
}
float small_value(int rank, size_t i) {
  return static_cast<float>(rank + 1) + 0.25f * static_cast<float>(i % 5);
}

template <class F>
float sum_over_ranks(F f, size_t i) {
  float s = 0;
  for (int r = 0; r < world_size(); ++r) s += f(r, i);
  return s;
}

std::vector<float> fill(size_t n, float (*f)(int, size_t), int rank) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = f(rank, i);
  return v;
}

__nv_bfloat16 bf16(float f) {
  return __float2bfloat16_rn(f);
}
float f32(__nv_bfloat16 h) {
  return __bfloat162float(h);
}

}  // namespace

TEST_CASE("sim NCCL: unique ids differ from call to call") {
  ncclUniqueId a{}, b{};
  CHECK(ncclGetUniqueId(&a) == ncclSuccess);
  CHECK(ncclGetUniqueId(&b) == ncclSuccess);
  CHECK(std::memcmp(a.internal, b.internal, NCCL_UNIQUE_ID_BYTES) != 0);
  CHECK(sizeof(ncclUniqueId) == 128);
}

TEST_CASE("sim NCCL: all-reduce sum and avg, f32, in place and out of place") {
  Comm comm;
  const int r = world_rank(), w = world_size();
  const size_t n = 1001;
  DeviceArray<float> a(fill(n, value, r)), b(fill(n, value, r)), out(n);
  CHECK(ncclAllReduce(a.get(), a.get(), n, ncclFloat32, ncclSum, comm.get(), nullptr) ==
        ncclSuccess);
  CHECK(ncclAllReduce(b.get(), out.get(), n, ncclFloat32, ncclAvg, comm.get(), nullptr) ==
        ncclSuccess);
  const auto sum = a.host(), avg = out.host(), untouched = b.host();
  for (size_t i = 0; i < n; ++i) {
    CHECK(sum[i] == sum_over_ranks(value, i));
    CHECK(avg[i] == sum_over_ranks(value, i) / static_cast<float>(w));
    CHECK(untouched[i] == value(r, i));  // out of place leaves sendbuff alone
  }
}

TEST_CASE("sim NCCL: all-reduce sum and avg, bf16, reduced in float and rounded once") {
  Comm comm;
  const int r = world_rank(), w = world_size();
  const size_t n = 37;
  std::vector<__nv_bfloat16> mine(n);
  for (size_t i = 0; i < n; ++i) mine[i] = bf16(small_value(r, i));
  DeviceArray<__nv_bfloat16> s(mine), a(mine);
  CHECK(ncclAllReduce(s.get(), s.get(), n, ncclBfloat16, ncclSum, comm.get(), nullptr) ==
        ncclSuccess);
  CHECK(ncclAllReduce(a.get(), a.get(), n, ncclBfloat16, ncclAvg, comm.get(), nullptr) ==
        ncclSuccess);
  const auto sum = s.host(), avg = a.host();
  for (size_t i = 0; i < n; ++i) {
    const float exact = sum_over_ranks(small_value, i);
    CHECK(f32(sum[i]) == f32(bf16(exact)));
    CHECK(f32(avg[i]) == f32(bf16(exact / static_cast<float>(w))));
  }
}

TEST_CASE("sim NCCL: all-reduce of other types and ops") {
  Comm comm;
  const int r = world_rank(), w = world_size();
  DeviceArray<double> d(std::vector<double>{0.5 * (r + 1), -1.0 * r});
  CHECK(ncclAllReduce(d.get(), d.get(), 2, ncclFloat64, ncclMax, comm.get(), nullptr) ==
        ncclSuccess);
  CHECK(d.host() == std::vector<double>{0.5 * w, 0.0});
  DeviceArray<int32_t> i(std::vector<int32_t>{r + 1, 7});
  CHECK(ncclAllReduce(i.get(), i.get(), 2, ncclInt32, ncclMin, comm.get(), nullptr) == ncclSuccess);
  CHECK(i.host() == std::vector<int32_t>{1, 7});
  DeviceArray<int32_t> p(std::vector<int32_t>{2});
  CHECK(ncclAllReduce(p.get(), p.get(), 1, ncclInt32, ncclProd, comm.get(), nullptr) ==
        ncclSuccess);
  CHECK(p.host()[0] == (1 << w));
}

TEST_CASE("sim NCCL: reduce-scatter, even counts, in place (NCCL's layout) and out of place") {
  Comm comm;
  const int r = world_rank(), w = world_size();
  const size_t count = 5, n = count * static_cast<size_t>(w);
  DeviceArray<float> x(fill(n, value, r)), y(fill(n, value, r)), out(count);
  // In place: recvbuff = sendbuff + rank * recvcount.
  CHECK(ncclReduceScatter(x.get(), x.get(r * count), count, ncclFloat32, ncclSum, comm.get(),
                          nullptr) == ncclSuccess);
  CHECK(ncclReduceScatter(y.get(), out.get(), count, ncclFloat32, ncclSum, comm.get(), nullptr) ==
        ncclSuccess);
  const auto in_place = x.host(), separate = out.host();
  for (size_t i = 0; i < count; ++i) {
    const size_t g = r * count + i;
    CHECK(in_place[g] == sum_over_ranks(value, g));
    CHECK(separate[i] == sum_over_ranks(value, g));
  }
}

TEST_CASE("sim NCCL: reduce-scatter, uneven counts, as grouped ncclReduce calls") {
  Comm comm;
  const int r = world_rank(), w = world_size();
  const int64_t n = 2 * w + 1;  // w does not divide n
  DeviceArray<float> x(fill(static_cast<size_t>(n), value, r));
  CHECK(ncclGroupStart() == ncclSuccess);
  for (int root = 0; root < w; ++root) {
    const trainrun::Shard s = trainrun::shard_split(n, w, root);
    float* p = x.get(static_cast<size_t>(s.begin));
    CHECK(ncclReduce(p, p, static_cast<size_t>(s.end - s.begin), ncclFloat32, ncclSum, root,
                     comm.get(), nullptr) == ncclSuccess);
  }
  CHECK(ncclGroupEnd() == ncclSuccess);
  const auto got = x.host();
  const trainrun::Shard mine = trainrun::shard_split(n, w, r);
  for (int64_t i = 0; i < n; ++i) {
    const bool owned = i >= mine.begin && i < mine.end;
    // The owner holds the sum; elsewhere ncclReduce leaves recvbuff alone (here: sendbuff).
    CHECK(got[i] == (owned ? sum_over_ranks(value, i) : value(r, i)));
  }
}

TEST_CASE("sim NCCL: all-gather, even counts, in place (NCCL's layout) and out of place") {
  Comm comm;
  const int r = world_rank(), w = world_size();
  const size_t count = 3, n = count * static_cast<size_t>(w);
  DeviceArray<float> x(n), mine(fill(count, value, r)), out(n);
  std::vector<float> start(n, -1.0f);
  for (size_t i = 0; i < count; ++i) start[r * count + i] = value(r, i);
  x.set(start);
  // In place: sendbuff = recvbuff + rank * sendcount.
  CHECK(ncclAllGather(x.get(r * count), x.get(), count, ncclFloat32, comm.get(), nullptr) ==
        ncclSuccess);
  CHECK(ncclAllGather(mine.get(), out.get(), count, ncclFloat32, comm.get(), nullptr) ==
        ncclSuccess);
  const auto in_place = x.host(), separate = out.host();
  for (int q = 0; q < w; ++q)
    for (size_t i = 0; i < count; ++i) {
      CHECK(in_place[q * count + i] == value(q, i));
      CHECK(separate[q * count + i] == value(q, i));
    }
}

TEST_CASE("sim NCCL: all-gather, uneven counts, as grouped ncclBroadcast calls") {
  Comm comm;
  const int r = world_rank(), w = world_size();
  const int64_t n = 3 * w + 2;
  std::vector<float> start(static_cast<size_t>(n), -1.0f);
  const trainrun::Shard mine = trainrun::shard_split(n, w, r);
  for (int64_t i = mine.begin; i < mine.end; ++i) start[i] = value(r, static_cast<size_t>(i));
  DeviceArray<float> x(start);
  CHECK(ncclGroupStart() == ncclSuccess);
  for (int root = 0; root < w; ++root) {
    const trainrun::Shard s = trainrun::shard_split(n, w, root);
    float* p = x.get(static_cast<size_t>(s.begin));
    CHECK(ncclBroadcast(p, p, static_cast<size_t>(s.end - s.begin), ncclFloat32, root, comm.get(),
                        nullptr) == ncclSuccess);
  }
  CHECK(ncclGroupEnd() == ncclSuccess);
  const auto got = x.host();
  for (int root = 0; root < w; ++root) {
    const trainrun::Shard s = trainrun::shard_split(n, w, root);
    for (int64_t i = s.begin; i < s.end; ++i) CHECK(got[i] == value(root, static_cast<size_t>(i)));
  }
}

TEST_CASE("sim NCCL: broadcast from the first and the last rank") {
  Comm comm;
  const int r = world_rank(), w = world_size();
  for (int root : {0, w - 1}) {
    CAPTURE(root);
    const size_t n = 11;
    DeviceArray<float> src(fill(n, value, r)), dst(n);
    CHECK(ncclBroadcast(src.get(), dst.get(), n, ncclFloat32, root, comm.get(), nullptr) ==
          ncclSuccess);
    CHECK(dst.host() == fill(n, value, root));
    DeviceArray<uint8_t> bytes(std::vector<uint8_t>{static_cast<uint8_t>(r), 200});
    CHECK(ncclBroadcast(bytes.get(), bytes.get(), 2, ncclUint8, root, comm.get(), nullptr) ==
          ncclSuccess);
    CHECK(bytes.host() == std::vector<uint8_t>{static_cast<uint8_t>(root), 200});
  }
}

TEST_CASE("sim NCCL: the errors NCCL reports") {
  // Each is detected on every rank alike before any MPI call, so no rank is left waiting.
  Comm comm;
  const int w = world_size();
  DeviceArray<float> x(4);
  CHECK(ncclBroadcast(x.get(), x.get(), 4, ncclFloat32, w, comm.get(), nullptr) ==
        ncclInvalidArgument);
  std::vector<float> host(4);
  CHECK(ncclAllReduce(host.data(), host.data(), 4, ncclFloat32, ncclSum, comm.get(), nullptr) ==
        ncclInvalidArgument);
  CHECK(ncclAllReduce(x.get(), x.get(), 4, ncclFloat16, ncclSum, comm.get(), nullptr) ==
        ncclInvalidArgument);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
  CHECK(std::strlen(ncclGetErrorString(ncclInvalidArgument)) > 0);
}

TEST_CASE("sim NCCL: a failed operation's open group refuses later calls until it is ended") {
  // What a GPU's NCCL does silently (defers every later call into the failed group), the sim
  // refuses, so a caller's missing ncclGroupEnd on an error path fails a test. Every rank fails
  // alike before any MPI call.
  Comm comm;
  DeviceArray<float> x(fill(4, value, world_rank()));
  std::vector<float> host(4);
  CHECK(ncclGroupStart() == ncclSuccess);
  CHECK(ncclReduce(host.data(), host.data(), 4, ncclFloat32, ncclSum, 0, comm.get(), nullptr) ==
        ncclInvalidArgument);
  CHECK(ncclAllReduce(x.get(), x.get(), 4, ncclFloat32, ncclSum, comm.get(), nullptr) ==
        ncclInvalidUsage);
  CHECK(ncclGroupEnd() == ncclInvalidArgument);  // the group's error
  // Ended, the thread's calls run again.
  CHECK(ncclAllReduce(x.get(), x.get(), 4, ncclFloat32, ncclSum, comm.get(), nullptr) ==
        ncclSuccess);
  CHECK(x.host()[1] == sum_over_ranks(value, 1));
}

TEST_CASE("sim NCCL: a group holds at most 2048 operations") {
  Comm comm;
  DeviceArray<float> x(1);
  CHECK(ncclGroupStart() == ncclSuccess);
  int refused_at = -1;
  for (int i = 0; i < 2049 && refused_at < 0; ++i)
    if (ncclBroadcast(x.get(), x.get(), 0, ncclFloat32, 0, comm.get(), nullptr) != ncclSuccess)
      refused_at = i;
  CHECK(refused_at == 2048);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
}

TEST_CASE("NCCL communicator: an uneven collective that fails leaves no group open") {
  // kernels/nccl_comm.cpp as the plugin builds it: an uneven reduce-scatter is one ncclReduce per
  // rank in a group. Its first ncclReduce fails (host memory); the next collective must still
  // run, which it did not while the error path left the group open.
  char id[kTrainrunNcclIdBytes] = {};
  char err[512] = {};
  if (world_rank() == 0) CHECK(trainrun_nccl_unique_id(id, err, sizeof err) == 0);
  MPI_Bcast(id, kTrainrunNcclIdBytes, MPI_BYTE, 0, MPI_COMM_WORLD);
  std::unique_ptr<trainrun::Communicator> comm(
      trainrun_nccl_create(id, world_rank(), world_size(), world_rank(), err, sizeof err));
  CHECK(comm != nullptr);
  if (!comm) return;
  const int64_t n = 2 * world_size() + 1;  // not a multiple of the ranks: the grouped path
  std::vector<float> host(static_cast<size_t>(n));
  using trainrun::DType, trainrun::Device, trainrun::Tensor;
  CHECK_THROWS_AS(comm->reduce_scatter_sum(Tensor(host.data(), DType::f32, Device::cuda, {n})),
                  trainrun::DeviceError);
  DeviceArray<float> x(fill(static_cast<size_t>(n), value, world_rank()));
  CHECK_NOTHROW(comm->allreduce_sum(Tensor(x.get(), DType::f32, Device::cuda, {n})));
  CHECK(x.host()[2] == sum_over_ranks(value, 2));
}

TEST_CASE("sim NCCL: ncclCommInitRank refuses an nranks that is not the ranks' count") {
  ncclUniqueId id{};
  if (world_rank() == 0) CHECK(ncclGetUniqueId(&id) == ncclSuccess);
  MPI_Bcast(id.internal, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t c = nullptr;
  CHECK(ncclCommInitRank(&c, world_size() + 1, id, world_rank()) == ncclInvalidArgument);
  CHECK(c == nullptr);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  doctest::Context context(argc, argv);
  const int failed = context.run();
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
