// NcclCommunicator: the Communicator collectives for CUDA tensors, over NCCL.
//
// Ordering: backend ops run on the legacy default stream; collectives run on a dedicated
// non-blocking stream so they can overlap compute. Each collective first makes its stream wait
// for everything already queued on the default stream (an event), so it reads finished
// gradients. A Request's wait() waits for the collective on the host (which surfaces NCCL errors
// where they happen) and only then makes the default stream wait for it (another event), so
// later ops see its result while kernels queued in between overlap with it; test() polls the
// event. Blocking calls are the i* calls followed by wait().
//
// Uneven shards: reduce_scatter_sum and all_gather use the ranges [r*n/w, (r+1)*n/w) of
// trainrun/core/shard.h, the formula every other communicator uses. When w divides n they are
// single in-place ncclReduceScatter / ncclAllGather calls; otherwise they are a group of one
// ncclReduce (resp. ncclBroadcast) per rank, each rooted at the rank that owns the range: same
// bytes on the wire up to the ring's efficiency, no padding copy.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu_binding.h"
#include "plugin_api.h"
#include "trainrun/comm/comm.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/shard.h"

namespace trainrun::cuda {
namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw DeviceError(std::string("NCCL communicator: ") + what + ": " + cudaGetErrorString(e));
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  // NCCL's own words already point at NCCL_DEBUG for some errors ("invalid usage (run with
  // NCCL_DEBUG=WARN for details)").
  const std::string words = ncclGetErrorString(r);
  throw DeviceError(
      std::string("NCCL: ") + what + " failed: " + words +
      (words.find("NCCL_DEBUG") == std::string::npos ? " (set NCCL_DEBUG=INFO for details)" : ""));
}

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
  }
  return ncclFloat32;
}

// NCCL's documented limit is 2048 operations between ncclGroupStart and ncclGroupEnd; an uneven
// reduce-scatter or all-gather issues one per rank, so past this many ranks it takes several
// groups (every rank splits at the same ranks, so the groups line up).
constexpr int kMaxGroupOps = 1024;

// `op(r)` for r in [0, n) in NCCL groups of at most kMaxGroupOps operations. A group is ended on
// every path: an operation that throws between ncclGroupStart and ncclGroupEnd used to leave the
// thread's group open, and NCCL then silently defers every later collective of the thread.
template <class Op>
void in_groups(int n, const char* what, Op&& op) {
  for (int first = 0; first < n; first += kMaxGroupOps) {
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    try {
      for (int r = first; r < std::min(n, first + kMaxGroupOps); ++r) op(r);
    } catch (...) {
      ncclGroupEnd();  // its result adds nothing to the error being thrown
      throw;
    }
    nccl_check(ncclGroupEnd(), what);
  }
}

class Event {
 public:
  Event() { cuda_check(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(ev_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return ev_; }

 private:
  cudaEvent_t ev_ = nullptr;
};

class NcclRequest final : public Communicator::Request {
 public:
  NcclRequest(std::unique_ptr<Event> done, int device) : done_(std::move(done)), device_(device) {}
  // The host waits for the collective first, and only then orders the default stream after it:
  // issued before, that stream wait would hold every kernel queued meanwhile behind the
  // collective (the gradient-sync thread calls this while backward kernels are being queued).
  void wait() override {
    cudaSetDevice(device_);
    cuda_check(cudaEventSynchronize(done_->get()), "cudaEventSynchronize (collective)");
    cuda_check(cudaStreamWaitEvent(cudaStreamLegacy, done_->get(), 0), "cudaStreamWaitEvent");
  }
  bool test() override {
    const cudaError_t e = cudaEventQuery(done_->get());
    if (e == cudaErrorNotReady) return false;
    cuda_check(e, "cudaEventQuery (collective)");
    return true;
  }

 private:
  std::unique_ptr<Event> done_;
  int device_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const ncclUniqueId& id, int rank, int size, int local_rank)
      : rank_(rank), size_(size), local_rank_(local_rank) {
    int count = 0;
    cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (count == 0) throw DeviceError("NCCL communicator: no CUDA devices are visible");
    device_ = gpu_for_local_rank(local_rank, count);  // the backend's GPU (gpu_binding.h)
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    nccl_check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    host_ = name;
    // local_size: how many ranks share this host name.
    const double mine = static_cast<double>(std::hash<std::string>{}(host_) & ((1ull << 52) - 1));
    std::vector<double> all(static_cast<size_t>(size));
    all_gather_doubles(&mine, 1, all.data());
    local_size_ = 0;
    for (double h : all) local_size_ += (h == mine);
  }

  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
    if (scratch_) cudaFree(scratch_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string host() const override { return host_; }
  std::string kind() const override { return "nccl"; }

  void allreduce_sum(Tensor x) override { iallreduce(x, ncclSum)->wait(); }
  void allreduce_avg(Tensor x) override { iallreduce(x, ncclAvg)->wait(); }
  std::unique_ptr<Request> iallreduce_sum(Tensor x) override { return iallreduce(x, ncclSum); }

  void reduce_scatter_sum(Tensor x) override { ireduce_scatter_sum(x)->wait(); }
  std::unique_ptr<Request> ireduce_scatter_sum(Tensor x) override {
    check(x, "reduce_scatter_sum");
    const int64_t n = x.numel();
    const ncclDataType_t t = nccl_type(x.dtype);
    const size_t es = dtype_size(x.dtype);
    char* base = static_cast<char*>(x.data);
    return launch([&] {
      if (n % size_ == 0) {
        const size_t count = static_cast<size_t>(n / size_);
        nccl_check(
            ncclReduceScatter(base, base + rank_ * count * es, count, t, ncclSum, comm_, stream_),
            "ncclReduceScatter");
        return;
      }
      in_groups(size_, "ncclGroupEnd (reduce-scatter)", [&](int r) {
        const Shard s = shard_split(n, size_, r);
        if (s.end == s.begin) return;
        char* p = base + s.begin * es;
        nccl_check(
            ncclReduce(p, p, static_cast<size_t>(s.end - s.begin), t, ncclSum, r, comm_, stream_),
            "ncclReduce");
      });
    });
  }

  void all_gather(Tensor x) override {
    check(x, "all_gather");
    const int64_t n = x.numel();
    const ncclDataType_t t = nccl_type(x.dtype);
    const size_t es = dtype_size(x.dtype);
    char* base = static_cast<char*>(x.data);
    launch([&] {
      if (n % size_ == 0) {
        const size_t count = static_cast<size_t>(n / size_);
        nccl_check(ncclAllGather(base + rank_ * count * es, base, count, t, comm_, stream_),
                   "ncclAllGather");
        return;
      }
      in_groups(size_, "ncclGroupEnd (all-gather)", [&](int r) {
        const Shard s = shard_split(n, size_, r);
        if (s.end == s.begin) return;
        char* p = base + s.begin * es;
        nccl_check(ncclBroadcast(p, p, static_cast<size_t>(s.end - s.begin), t, r, comm_, stream_),
                   "ncclBroadcast");
      });
    })->wait();
  }

  void broadcast(Tensor x, int root) override {
    check(x, "broadcast");
    if (root < 0 || root >= size_)
      throw std::invalid_argument("broadcast: root " + std::to_string(root) + " is not a rank");
    launch([&] {
      nccl_check(ncclBroadcast(x.data, x.data, static_cast<size_t>(x.numel()), nccl_type(x.dtype),
                               root, comm_, stream_),
                 "ncclBroadcast");
    })->wait();
  }

  void barrier() override {
    float* one = static_cast<float*>(device_scratch(sizeof(float)));
    launch([&] {
      nccl_check(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, stream_),
                 "ncclAllReduce (barrier)");
    })->wait();
  }

  void all_gather_doubles(const double* in, int n, double* out) override {
    if (n <= 0) return;
    const size_t bytes = sizeof(double) * static_cast<size_t>(n);
    double* buf = static_cast<double*>(device_scratch(bytes * static_cast<size_t>(size_)));
    cudaSetDevice(device_);
    cuda_check(cudaMemcpy(buf + static_cast<size_t>(rank_) * n, in, bytes, cudaMemcpyHostToDevice),
               "cudaMemcpy (all_gather_doubles in)");
    launch([&] {
      nccl_check(ncclAllGather(buf + static_cast<size_t>(rank_) * n, buf, static_cast<size_t>(n),
                               ncclFloat64, comm_, stream_),
                 "ncclAllGather (doubles)");
    })->wait();
    cuda_check(cudaMemcpy(out, buf, bytes * static_cast<size_t>(size_), cudaMemcpyDeviceToHost),
               "cudaMemcpy (all_gather_doubles out)");
  }

  // Host bytes through the device scratch, as all_gather_doubles (control data, not the hot path).
  void all_gather_bytes(const void* in, size_t n, void* out) override {
    if (n == 0) return;
    char* buf = static_cast<char*>(device_scratch(n * static_cast<size_t>(size_)));
    char* mine = buf + static_cast<size_t>(rank_) * n;
    cuda_check(cudaMemcpy(mine, in, n, cudaMemcpyHostToDevice), "cudaMemcpy (all_gather_bytes)");
    launch([&] {
      nccl_check(ncclAllGather(mine, buf, n, ncclUint8, comm_, stream_), "ncclAllGather (bytes)");
    })->wait();
    cuda_check(cudaMemcpy(out, buf, n * static_cast<size_t>(size_), cudaMemcpyDeviceToHost),
               "cudaMemcpy (all_gather_bytes)");
  }
  void broadcast_bytes(void* data, size_t n, int root) override {
    if (root < 0 || root >= size_)
      throw std::invalid_argument("broadcast_bytes: root " + std::to_string(root) +
                                  " is not a rank");
    if (n == 0) return;
    void* buf = device_scratch(n);
    cuda_check(cudaMemcpy(buf, data, n, cudaMemcpyHostToDevice), "cudaMemcpy (broadcast_bytes)");
    launch([&] {
      nccl_check(ncclBroadcast(buf, buf, n, ncclUint8, root, comm_, stream_),
                 "ncclBroadcast (bytes)");
    })->wait();
    cuda_check(cudaMemcpy(data, buf, n, cudaMemcpyDeviceToHost), "cudaMemcpy (broadcast_bytes)");
  }
  // Snapshots gather host buffers over MPI; NCCL has no rooted gather to offer device tensors.
  void gather(Tensor, Tensor, int) override {
    throw std::invalid_argument("gather: not offered by the NCCL communicator (gather over MPI)");
  }

  [[noreturn]] void abort(int code) override {
    std::fprintf(stderr, "trainrun: rank %d aborting the NCCL job (exit %d)\n", rank_, code);
    std::fflush(stderr);
    if (comm_) ncclCommAbort(comm_);
    std::_Exit(code);
  }

 private:
  static void check(const Tensor& x, const char* op) {
    if (x.empty() || x.device != Device::cuda)
      throw std::invalid_argument(std::string(op) +
                                  ": the NCCL communicator needs a device tensor");
  }

  std::unique_ptr<Request> iallreduce(Tensor x, ncclRedOp_t op) {
    check(x, "allreduce");
    return launch([&] {
      nccl_check(ncclAllReduce(x.data, x.data, static_cast<size_t>(x.numel()), nccl_type(x.dtype),
                               op, comm_, stream_),
                 "ncclAllReduce");
    });
  }

  // Runs `enqueue` on the NCCL stream between the two events described at the top.
  template <class F>
  std::unique_ptr<Request> launch(F&& enqueue) {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    Event ready;
    cuda_check(cudaEventRecord(ready.get(), cudaStreamLegacy), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, ready.get(), 0), "cudaStreamWaitEvent");
    enqueue();
    auto done = std::make_unique<Event>();
    cuda_check(cudaEventRecord(done->get(), stream_), "cudaEventRecord");
    // No stream wait here: the request's wait() orders the default stream after the collective,
    // so compute queued before that overlaps with it (as grad_sync intends).
    return std::make_unique<NcclRequest>(std::move(done), device_);
  }

  void* device_scratch(size_t bytes) {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    if (bytes > scratch_bytes_) {
      if (scratch_) cuda_check(cudaFree(scratch_), "cudaFree");
      scratch_ = nullptr;
      cuda_check(cudaMalloc(&scratch_, bytes), "cudaMalloc (NCCL scratch)");
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }

  int rank_, size_, local_rank_, local_size_ = 1, device_ = 0;
  std::string host_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

void set_err(char* err, size_t errlen, const std::string& msg) {
  if (err && errlen) std::snprintf(err, errlen, "%s", msg.c_str());
}

}  // namespace
}  // namespace trainrun::cuda

extern "C" {

int trainrun_nccl_unique_id(char out[kTrainrunNcclIdBytes], char* err, size_t errlen) {
  static_assert(sizeof(ncclUniqueId) == kTrainrunNcclIdBytes, "NCCL id size changed");
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    trainrun::cuda::set_err(err, errlen,
                            std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r));
    return 1;
  }
  std::memcpy(out, &id, sizeof id);
  return 0;
}

trainrun::Communicator* trainrun_nccl_create(const char id[kTrainrunNcclIdBytes], int rank,
                                             int size, int local_rank, char* err, size_t errlen) {
  if (size < 1 || rank < 0 || rank >= size || local_rank < 0) {
    trainrun::cuda::set_err(err, errlen,
                            "trainrun_nccl_create: bad rank " + std::to_string(rank) + " of " +
                                std::to_string(size) + " (local rank " +
                                std::to_string(local_rank) + ")");
    return nullptr;
  }
  try {
    ncclUniqueId uid;
    std::memcpy(&uid, id, sizeof uid);
    return new trainrun::cuda::NcclCommunicator(uid, rank, size, local_rank);
  } catch (const std::exception& ex) {
    trainrun::cuda::set_err(err, errlen, ex.what());
    return nullptr;
  }
}

}  // extern "C"
