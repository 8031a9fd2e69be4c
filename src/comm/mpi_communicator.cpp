// The MPI communicator: collectives over CPU tensors (CUDA tensors go through NCCL instead).
// Errors stay MPI_ERRORS_ARE_FATAL on purpose: a dead peer then ends the whole job instead of
// leaving the survivors blocked in a collective.
#include <mpi.h>
#include <spdlog/spdlog.h>

#include <fmt/format.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <stdexcept>
#include <thread>

#include "trainrun/comm/comm.h"
#include "trainrun/core/bf16.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/thread_annotations.h"

namespace trainrun {
namespace {

// How long a rank waits in MPI_Abort before ending itself.
constexpr int kAbortGraceSeconds = 10;

// MPI can be initialised once per process, so every communicator shares one reference count.
// When someone else (a test harness, a library) initialised MPI first, finalising is theirs.
Mutex g_mpi_mutex;
int g_mpi_refs GUARDED_BY(g_mpi_mutex) = 0;
bool g_mpi_ours GUARDED_BY(g_mpi_mutex) = false;

void mpi_acquire() {
  MutexLock lock(g_mpi_mutex);
  if (g_mpi_refs == 0) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
      throw std::logic_error(
          "make_mpi_communicator: MPI was already finalised in this process (it is finalised "
          "when the last MPI communicator is destroyed and cannot be initialised again); keep "
          "one communicator alive for the life of the process");
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = 0;
    if (!initialized) {
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      g_mpi_ours = true;
    } else {
      MPI_Query_thread(&provided);
      g_mpi_ours = false;
    }
    if (provided < MPI_THREAD_MULTIPLE) {
      if (g_mpi_ours) MPI_Finalize();
      throw LaunchError(fmt::format(
          "MPI provides thread level {} but trainrun needs MPI_THREAD_MULTIPLE ({}): use an MPI "
          "built with thread support (Debian's openmpi-bin is)",
          provided, static_cast<int>(MPI_THREAD_MULTIPLE)));
    }
  }
  ++g_mpi_refs;
}

void mpi_release() {
  MutexLock lock(g_mpi_mutex);
  if (--g_mpi_refs == 0 && g_mpi_ours) MPI_Finalize();
}

// Collectives that only move data (all-gathers, broadcasts) also take bf16, as 16-bit words:
// ZeRO-3 gathers a bf16 run's compute weights; so do sums, with bf16_sum as their operation
// (ZeRO-2/3's bf16 gradients, tensor parallelism's bf16 activations). Averages need a type MPI
// can add.
enum class Moves : bool { values, bits };

MPI_Datatype mpi_type(const Tensor& x, const char* op, Moves moves = Moves::values) {
  if (x.device != Device::cpu)
    throw std::invalid_argument(fmt::format(
        "MPI {}: tensor is on {}; the MPI communicator takes CPU tensors (CUDA tensors use the "
        "NCCL communicator)",
        op, device_name(x.device)));
  switch (x.dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::bf16:
      if (moves == Moves::bits) return MPI_UINT16_T;
      [[fallthrough]];
    default:
      throw std::invalid_argument(fmt::format("MPI {}: dtype {} is not supported (f32 or f64{})",
                                              op, dtype_name(x.dtype),
                                              moves == Moves::bits ? ", or bf16" : ""));
  }
}

// bf16 sums for reduce-scatters of bf16 gradients (distributed.reduce_dtype): each pair widened
// to f32, added, rounded back (nearest even), as NCCL's ring rounds at every hop.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = bf16_from_f32(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

// The sum of x's dtype: MPI's own, or bf16_sum (created once, after MPI is initialised).
MPI_Op sum_op(const Tensor& x) {
  if (x.dtype != DType::bf16) return MPI_SUM;
  static const MPI_Op op = [] {
    MPI_Op o;
    MPI_Op_create(&bf16_sum, /*commute=*/1, &o);
    return o;
  }();
  return op;
}

int mpi_count(int64_t n, const char* op) {
  // MPI counts and displacements are int; one call moves at most INT_MAX elements.
  if (n > INT_MAX)
    throw std::length_error(fmt::format(
        "MPI {}: {} elements exceed MPI's int count limit ({}); split the buffer into buckets", op,
        n, INT_MAX));
  return static_cast<int>(n);
}

template <class T>
void divide(Tensor x, int by) {
  T* p = x.as<T>();
  const int64_t n = x.numel();
  const T d = static_cast<T>(by);
  for (int64_t i = 0; i < n; ++i) p[i] /= d;
}

// A started MPI collective; `finish` runs once, when the operation is known to be complete.
class MpiRequest final : public Communicator::Request {
 public:
  MpiRequest(MPI_Request r, std::function<void()> finish) : req_(r), finish_(std::move(finish)) {}
  ~MpiRequest() override {
    // The buffers belong to the caller: never leave an operation running past its handle.
    if (!done_) wait();
  }
  void wait() override {
    if (done_) return;
    MPI_Wait(&req_, MPI_STATUS_IGNORE);
    complete();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    MPI_Test(&req_, &flag, MPI_STATUS_IGNORE);
    if (flag) complete();
    return done_;
  }

 private:
  void complete() {
    done_ = true;
    if (finish_) finish_();
  }
  MPI_Request req_;
  std::function<void()> finish_;
  bool done_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    mpi_acquire();
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    init();
  }
  // Takes ownership of `comm` (a split's).
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    mpi_acquire();
    init();
  }
  void init() {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm node;
    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank_);
    MPI_Comm_size(node, &local_size_);
    MPI_Comm_free(&node);
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    host_.assign(name, static_cast<size_t>(len));
  }
  ~MpiCommunicator() override {
    // Torn down by an error of this rank's (other ranks may be waiting for it in a collective,
    // as in a set-up step that failed here only): freeing the communicator and MPI_Finalize are
    // collective and would wait for them for ever. MPI is left as it is; the rank exits with its
    // error recorded, and mpirun ends the job because a rank exited without finalising.
    if (std::uncaught_exceptions() > 0 && size_ > 1) return;
    MPI_Comm_free(&comm_);
    mpi_release();
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    if (color < 0) throw std::invalid_argument("MPI split: a colour is not negative");
    MPI_Comm part = MPI_COMM_NULL;
    MPI_Comm_split(comm_, color, key, &part);
    return std::make_unique<MpiCommunicator>(part);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string host() const override { return host_; }
  std::string kind() const override { return "mpi"; }

  void allreduce_sum(Tensor x) override {
    MPI_Datatype t = mpi_type(x, "allreduce", Moves::bits);
    MPI_Allreduce(MPI_IN_PLACE, x.data, mpi_count(x.numel(), "allreduce"), t, sum_op(x), comm_);
  }
  void allreduce_avg(Tensor x) override {
    mpi_type(x, "allreduce_avg");  // f32 or f64: the division below
    allreduce_sum(x);
    if (x.dtype == DType::f32)
      divide<float>(x, size_);
    else
      divide<double>(x, size_);
  }
  std::unique_ptr<Request> iallreduce_sum(Tensor x) override {
    MPI_Datatype t = mpi_type(x, "iallreduce", Moves::bits);
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, x.data, mpi_count(x.numel(), "iallreduce"), t, sum_op(x), comm_,
                   &r);
    return std::make_unique<MpiRequest>(r, nullptr);
  }

  // In place: MPI leaves this rank's summed block at the start of x; move it to its own range.
  // No scratch buffer, so any number of these may be in flight on distinct buffers at once.
  void reduce_scatter_sum(Tensor x) override {
    MPI_Datatype t = mpi_type(x, "reduce_scatter", Moves::bits);
    const Layout& l = layout(x.numel(), "reduce_scatter");
    MPI_Reduce_scatter(MPI_IN_PLACE, x.data, l.counts.data(), t, sum_op(x), comm_);
    move_block_home(x);
  }
  std::unique_ptr<Request> ireduce_scatter_sum(Tensor x) override {
    MPI_Datatype t = mpi_type(x, "ireduce_scatter", Moves::bits);
    const Layout& l = layout(x.numel(), "ireduce_scatter");
    MPI_Request r;
    MPI_Ireduce_scatter(MPI_IN_PLACE, x.data, l.counts.data(), t, sum_op(x), comm_, &r);
    return std::make_unique<MpiRequest>(r, [this, x] { move_block_home(x); });
  }
  void all_gather(Tensor x) override {
    MPI_Datatype t = mpi_type(x, "all_gather", Moves::bits);
    const Layout& l = layout(x.numel(), "all_gather");
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x.data, l.counts.data(), l.displs.data(), t,
                   comm_);
  }
  void broadcast(Tensor x, int root) override {
    check_root(root, "broadcast");
    MPI_Datatype t = mpi_type(x, "broadcast", Moves::bits);
    MPI_Bcast(x.data, mpi_count(x.numel(), "broadcast"), t, root, comm_);
  }
  // Root moves its own range home first, then receives the others' in place.
  void gather(Tensor mine, Tensor all, int root) override {
    check_root(root, "gather");
    MPI_Datatype t = mpi_type(mine, "gather");
    const int count = mpi_count(mine.numel(), "gather");
    if (rank_ != root) {
      MPI_Gatherv(mine.data, count, t, nullptr, nullptr, nullptr, t, root, comm_);
      return;
    }
    if (mpi_type(all, "gather") != t)
      throw std::invalid_argument("MPI gather: `mine` and `all` differ in dtype");
    const Layout& l = layout(all.numel(), "gather");
    const auto r = static_cast<size_t>(rank_);
    if (count != l.counts[r])
      throw std::invalid_argument(
          fmt::format("MPI gather: root passes {} elements but its shard of {} holds {}", count,
                      all.numel(), l.counts[r]));
    char* home =
        static_cast<char*>(all.data) + static_cast<size_t>(l.displs[r]) * dtype_size(all.dtype);
    if (count > 0 && mine.data != home) std::memmove(home, mine.data, mine.bytes());
    MPI_Gatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all.data, l.counts.data(), l.displs.data(), t,
                root, comm_);
  }
  void barrier() override { MPI_Barrier(comm_); }
  void all_gather_doubles(const double* in, int n, double* out) override {
    MPI_Allgather(in, n, MPI_DOUBLE, out, n, MPI_DOUBLE, comm_);
  }
  void all_gather_bytes(const void* in, size_t n, void* out) override {
    const int count = mpi_count(static_cast<int64_t>(n), "all_gather_bytes");
    MPI_Allgather(in, count, MPI_BYTE, out, count, MPI_BYTE, comm_);
  }
  void broadcast_bytes(void* data, size_t n, int root) override {
    check_root(root, "broadcast_bytes");
    MPI_Bcast(data, mpi_count(static_cast<int64_t>(n), "broadcast_bytes"), MPI_BYTE, root, comm_);
  }
  [[noreturn]] void abort(int code) override {
    spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
    std::fflush(nullptr);
    // MPI_Abort asks mpirun, through the daemons, to kill the job; when a host went silent
    // that request can wait forever. This rank's part ends regardless (the launcher bounds the
    // rest: fault_tolerance.teardown_timeout).
    std::thread([code] {
      std::this_thread::sleep_for(std::chrono::seconds(kAbortGraceSeconds));
      std::_Exit(code);
    }).detach();
    MPI_Abort(comm_, code);
    std::_Exit(code);  // MPI_Abort does not return; this keeps the promise if it ever did.
  }

 private:
  void check_root(int root, const char* op) const {
    if (root < 0 || root >= size_)
      throw std::invalid_argument(
          fmt::format("{}: root {} is not a rank (world size {})", op, root, size_));
  }
  // Per-rank counts and offsets for a buffer of n elements. Kept for the life of the
  // communicator: a non-blocking collective reads them until it completes, and the step loop
  // reuses a handful of bucket sizes, so nothing is allocated per step.
  struct Layout {
    std::vector<int> counts, displs;
  };
  const Layout& layout(int64_t n, const char* op) {
    mpi_count(n, op);
    MutexLock lock(layout_mutex_);
    auto [it, inserted] = layouts_.try_emplace(n);
    if (inserted) {
      for (int r = 0; r < size_; ++r) {
        Shard s = shard_of(n, size_, r);
        it->second.counts.push_back(static_cast<int>(s.size()));
        it->second.displs.push_back(static_cast<int>(s.begin));
      }
    }
    return it->second;
  }
  void move_block_home(Tensor x) const {
    Shard s = shard_of(x.numel(), size_, rank_);
    const size_t es = dtype_size(x.dtype);
    char* base = static_cast<char*>(x.data);
    if (s.begin != 0 && s.size() > 0)
      std::memmove(base + s.begin * es, base, static_cast<size_t>(s.size()) * es);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
  Mutex layout_mutex_;
  std::map<int64_t, Layout> layouts_ GUARDED_BY(layout_mutex_);
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace trainrun
