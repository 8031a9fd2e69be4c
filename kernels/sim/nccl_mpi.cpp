// NCCL for trainrun's CPU-executed device, over MPI: each rank is one process whose "device"
// memory is host memory, so every NCCL collective is the matching MPI collective (MPI is already
// initialised by trainrun). Calls run synchronously when made; the stream is ignored. Groups nest a
// counter: every rank issues the same calls in the same order, which lines the MPI collectives up
// just as NCCL's grouping would. Two of NCCL's group rules are enforced, because a GPU would not
// say when they are broken: a group holds at most 2048 operations (NCCL's documented limit), and
// once an operation in a group has failed, every later call of the thread is refused until the
// group is ended (NCCL defers them into the failed group: a caller that forgot ncclGroupEnd on
// its error path would see its next collectives silently never run). ncclGroupEnd then returns
// the group's error.
//
// Reductions go through a work buffer in the type MPI reduces: that makes in-place and
// out-of-place calls, and NCCL's in-place layouts (ReduceScatter's result inside sendbuff), one
// path with no aliasing for MPI to see. MPI has no bf16: bf16 is widened to float, reduced in
// float and rounded back once (nearest even). NCCL's ring rounds to bf16 at every hop, so its bits
// may differ slightly from the sim's for more than two ranks. ncclAvg is the sum divided by nranks.
// fp16 moves (broadcast, all-gather) but is not reduced: the sim has no fp16 arithmetic.
//
// Memcheck: every buffer must lie inside one device allocation (trainrun::sim::is_device_range),
// as NCCL refuses pointers it cannot use with ncclInvalidArgument.
#include <cuda_bf16.h>
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "sim_memory.h"

struct ncclComm {
  MPI_Comm mpi;
  int rank;
  int size;
};

namespace {

// NCCL's group state is per thread.
struct GroupState {
  int depth = 0;
  int ops = 0;                        // operations in the outermost open group
  ncclResult_t failed = ncclSuccess;  // the first error of one of them
};
thread_local GroupState g_group;
constexpr int kMaxGroupOps = 2048;

// An operation's error: the open group's, if any.
ncclResult_t failing(ncclResult_t r) {
  if (r != ncclSuccess && g_group.depth > 0 && g_group.failed == ncclSuccess) g_group.failed = r;
  return r;
}

void report(const char* call, const std::string& message) {
  std::fprintf(stderr, "trainrun sim NCCL: %s: %s\n", call, message.c_str());
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// FNV-1a: the MPI_Comm_split colour of an id.
uint64_t hash_bytes(const void* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i)
    h = (h ^ static_cast<const unsigned char*>(data)[i]) * 0x100000001b3ull;
  return h;
}

bool mpi_usable(const char* call) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) return true;
  report(call, "MPI is not initialised (or already finalised); the sim's NCCL runs over MPI");
  return false;
}

ncclResult_t mpi_result(const char* call, int rc) {
  if (rc == MPI_SUCCESS) return ncclSuccess;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  report(call, std::string("MPI failed: ") + std::string(text, static_cast<size_t>(len)));
  return ncclSystemError;
}

// How an element is stored (moved as `storage`) and reduced (as `reduce`, after widening bf16).
struct TypeInfo {
  size_t size;
  MPI_Datatype storage;
  MPI_Datatype reduce;  // MPI_DATATYPE_NULL: not reducible here
};

bool type_info(ncclDataType_t dt, TypeInfo& out) {
  switch (dt) {
    case ncclInt8:
      out = {1, MPI_INT8_T, MPI_INT8_T};
      return true;
    case ncclUint8:
      out = {1, MPI_UINT8_T, MPI_UINT8_T};
      return true;
    case ncclInt32:
      out = {4, MPI_INT32_T, MPI_INT32_T};
      return true;
    case ncclUint32:
      out = {4, MPI_UINT32_T, MPI_UINT32_T};
      return true;
    case ncclInt64:
      out = {8, MPI_INT64_T, MPI_INT64_T};
      return true;
    case ncclUint64:
      out = {8, MPI_UINT64_T, MPI_UINT64_T};
      return true;
    case ncclFloat16:
      out = {2, MPI_UINT16_T, MPI_DATATYPE_NULL};
      return true;
    case ncclFloat32:
      out = {4, MPI_FLOAT, MPI_FLOAT};
      return true;
    case ncclFloat64:
      out = {8, MPI_DOUBLE, MPI_DOUBLE};
      return true;
    case ncclBfloat16:
      out = {2, MPI_UINT16_T, MPI_FLOAT};
      return true;
  }
  return false;
}

// Calls f(T{}) with T the C++ type of the reduction work buffer.
template <class F>
void with_work_type(ncclDataType_t dt, F&& f) {
  switch (dt) {
    case ncclInt8:
      return f(int8_t{});
    case ncclUint8:
      return f(uint8_t{});
    case ncclInt32:
      return f(int32_t{});
    case ncclUint32:
      return f(uint32_t{});
    case ncclInt64:
      return f(int64_t{});
    case ncclUint64:
      return f(uint64_t{});
    case ncclFloat32:
    case ncclBfloat16:
      return f(float{});
    case ncclFloat64:
      return f(double{});
    case ncclFloat16:
      return;  // not reducible: refused before any work buffer exists
  }
}

bool op_of(ncclRedOp_t op, MPI_Op& out) {
  switch (op) {
    case ncclSum:
    case ncclAvg:  // then divided by nranks
      out = MPI_SUM;
      return true;
    case ncclProd:
      out = MPI_PROD;
      return true;
    case ncclMax:
      out = MPI_MAX;
      return true;
    case ncclMin:
      out = MPI_MIN;
      return true;
  }
  return false;
}

// The checks every collective makes first; false after reporting why.
struct Call {
  const char* name;
  ncclComm_t comm;
  TypeInfo type{};

  ncclResult_t start(ncclDataType_t dt) {
    if (g_group.depth > 0) {
      if (g_group.failed != ncclSuccess) {
        report(name,
               "an earlier operation of this thread's open group failed, and the group was "
               "never ended (ncclGroupEnd): NCCL would defer this call into it");
        return ncclInvalidUsage;
      }
      if (++g_group.ops > kMaxGroupOps) {
        report(name, "more than " + std::to_string(kMaxGroupOps) +
                         " operations in one group (NCCL's limit)");
        return ncclInvalidUsage;
      }
    }
    if (comm == nullptr) {
      report(name, "the communicator is null");
      return ncclInvalidArgument;
    }
    if (!type_info(dt, type)) {
      report(name, "datatype " + std::to_string(dt) + " is not one NCCL defines");
      return ncclInvalidArgument;
    }
    return mpi_usable(name) ? ncclSuccess : ncclInvalidUsage;
  }

  ncclResult_t reducible(ncclDataType_t dt, ncclRedOp_t op, MPI_Op& mpi_op) const {
    if (type.reduce == MPI_DATATYPE_NULL) {
      report(name, "datatype " + std::to_string(dt) + " cannot be reduced by the sim (no fp16)");
      return ncclInvalidArgument;
    }
    if (!op_of(op, mpi_op)) {
      report(name, "reduction op " + std::to_string(op) + " is not one NCCL defines");
      return ncclInvalidArgument;
    }
    return ncclSuccess;
  }

  ncclResult_t root_ok(int root) const {
    if (root >= 0 && root < comm->size) return ncclSuccess;
    report(name,
           "root " + std::to_string(root) + " is not a rank of " + std::to_string(comm->size));
    return ncclInvalidArgument;
  }

  // MPI counts are int.
  ncclResult_t count_ok(size_t count) const {
    if (count <= static_cast<size_t>(INT_MAX)) return ncclSuccess;
    report(name, "count " + std::to_string(count) + " exceeds what one MPI call can carry");
    return ncclInvalidArgument;
  }

  ncclResult_t device(const char* what, const void* p, size_t elements) const {
    const size_t bytes = elements * type.size;
    if (bytes == 0 || trainrun::sim::is_device_range(p, bytes)) return ncclSuccess;
    report(name, std::string(what) + " [" + hex(p) + ", +" + std::to_string(bytes) +
                     " bytes) does not lie inside one device allocation");
    return ncclInvalidArgument;
  }
};

#define NCCL_SIM_TRY(expr)                                                     \
  do {                                                                         \
    if (const ncclResult_t r_ = (expr); r_ != ncclSuccess) return failing(r_); \
  } while (0)

// `count` elements of src in the work type (bf16 widened to float).
std::vector<unsigned char> widen(const void* src, size_t count, ncclDataType_t dt, size_t es) {
  if (dt != ncclBfloat16) {
    const auto* p = static_cast<const unsigned char*>(src);
    return std::vector<unsigned char>(p, p + count * es);
  }
  std::vector<unsigned char> work(count * sizeof(float));
  const auto* in = static_cast<const __nv_bfloat16*>(src);
  for (size_t i = 0; i < count; ++i) {
    const float f = __bfloat162float(in[i]);
    std::memcpy(work.data() + i * sizeof f, &f, sizeof f);
  }
  return work;
}

// Elements [first, first + count) of the work buffer, stored to dst in the NCCL type, divided by
// `divisor` first (ncclAvg; 1 otherwise).
void narrow(const std::vector<unsigned char>& work, size_t first, size_t count, ncclDataType_t dt,
            int divisor, void* dst) {
  with_work_type(dt, [&](auto zero) {
    using T = decltype(zero);
    for (size_t i = 0; i < count; ++i) {
      T v;
      std::memcpy(&v, work.data() + (first + i) * sizeof(T), sizeof v);
      if (divisor != 1) v = static_cast<T>(v / static_cast<T>(divisor));
      if constexpr (std::is_same_v<T, float>) {
        if (dt == ncclBfloat16) {
          static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(v);
          continue;
        }
      }
      std::memcpy(static_cast<unsigned char*>(dst) + i * sizeof(T), &v, sizeof v);
    }
  });
}

// The reductions: `in_count` elements of sendbuff into the work buffer, `collective` reduces it
// in place, and on ranks where `store` holds elements [first, first + out_count) go to recvbuff.
template <class Collective>
ncclResult_t reduce_via_work(const Call& c, const void* sendbuff, size_t in_count,
                             ncclDataType_t dt, ncclRedOp_t op, Collective&& collective, bool store,
                             size_t first, size_t out_count, void* recvbuff) {
  MPI_Op mpi_op;
  NCCL_SIM_TRY(c.reducible(dt, op, mpi_op));
  std::vector<unsigned char> work = widen(sendbuff, in_count, dt, c.type.size);
  NCCL_SIM_TRY(mpi_result(c.name, collective(work.data(), c.type.reduce, mpi_op)));
  if (store) narrow(work, first, out_count, dt, op == ncclAvg ? c.comm->size : 1, recvbuff);
  return ncclSuccess;
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    case ncclNumResults:
      break;
  }
  return "unknown result code";
}

// Unique per call: a readable tag, the process, a per-process counter, the time, the host.
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  static std::atomic<unsigned long long> counter{0};
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  const long long now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  *id = ncclUniqueId{};
  std::snprintf(id->internal, sizeof id->internal,
                "trainrun-sim-nccl pid=%ld n=%llu t=%lld host=%s", static_cast<long>(getpid()),
                counter.fetch_add(1), now, host);
  return ncclSuccess;
}

// MPI_Comm_split of MPI_COMM_WORLD, coloured by the id's hash and ordered by `rank`: collective
// over the whole world, so every world rank must call it (a rank with bad arguments still takes
// part, with MPI_UNDEFINED, so that the others fail instead of hanging).
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  const char* call = "ncclCommInitRank";
  if (!mpi_usable(call)) return ncclInvalidUsage;
  const bool args_ok = comm != nullptr && nranks >= 1 && rank >= 0 && rank < nranks;
  const int colour =
      args_ok ? static_cast<int>(hash_bytes(id.internal, sizeof id.internal) & 0x3fffffff)
              : MPI_UNDEFINED;
  MPI_Comm split = MPI_COMM_NULL;
  NCCL_SIM_TRY(mpi_result(call, MPI_Comm_split(MPI_COMM_WORLD, colour, rank, &split)));
  if (!args_ok) {
    report(call, "bad arguments: rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
                     (comm == nullptr ? ", comm is null" : ""));
    return ncclInvalidArgument;
  }
  MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN);
  int size = 0, position = -1;
  MPI_Comm_size(split, &size);
  MPI_Comm_rank(split, &position);
  // Ranks sharing a colour hold the same id unless two ids' hashes collide: compare with the
  // first rank's. Every rank learns whether all agree, so all fail together.
  ncclUniqueId first = id;
  NCCL_SIM_TRY(
      mpi_result(call, MPI_Bcast(first.internal, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, 0, split)));
  const int mine_ok = size == nranks && position == rank &&
                      std::memcmp(first.internal, id.internal, NCCL_UNIQUE_ID_BYTES) == 0;
  int all_ok = 0;
  NCCL_SIM_TRY(mpi_result(call, MPI_Allreduce(&mine_ok, &all_ok, 1, MPI_INT, MPI_LAND, split)));
  if (!all_ok) {
    report(call, "the ranks given this id do not form a communicator of " + std::to_string(nranks) +
                     ": " + std::to_string(size) + " MPI ranks share it and rank " +
                     std::to_string(rank) + " is number " + std::to_string(position) +
                     " among them (every rank must pass the same nranks and a distinct rank "
                     "0..nranks-1)");
    MPI_Comm_free(&split);
    return ncclInvalidArgument;
  }
  *comm = new ncclComm{split, rank, nranks};
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

// MPI_Comm_free is collective in the MPI standard and an abort must not wait for the other
// ranks, so the MPI communicator is left to MPI_Finalize or the process's exit.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t /*stream*/) {
  Call c{"ncclAllReduce", comm};
  NCCL_SIM_TRY(c.start(datatype));
  NCCL_SIM_TRY(c.count_ok(count));
  NCCL_SIM_TRY(c.device("sendbuff", sendbuff, count));
  NCCL_SIM_TRY(c.device("recvbuff", recvbuff, count));
  auto all_reduce = [&](void* work, MPI_Datatype t, MPI_Op o) {
    return MPI_Allreduce(MPI_IN_PLACE, work, static_cast<int>(count), t, o, comm->mpi);
  };
  return reduce_via_work(c, sendbuff, count, datatype, op, all_reduce, true, 0, count, recvbuff);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t /*stream*/) {
  Call c{"ncclReduceScatter", comm};
  NCCL_SIM_TRY(c.start(datatype));
  NCCL_SIM_TRY(c.count_ok(recvcount));
  const size_t total = recvcount * static_cast<size_t>(comm->size);
  NCCL_SIM_TRY(c.device("sendbuff", sendbuff, total));
  NCCL_SIM_TRY(c.device("recvbuff", recvbuff, recvcount));
  // In place, MPI leaves this rank's block at the front of the work buffer.
  auto reduce_scatter = [&](void* work, MPI_Datatype t, MPI_Op o) {
    return MPI_Reduce_scatter_block(MPI_IN_PLACE, work, static_cast<int>(recvcount), t, o,
                                    comm->mpi);
  };
  return reduce_via_work(c, sendbuff, total, datatype, op, reduce_scatter, true, 0, recvcount,
                         recvbuff);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t /*stream*/) {
  Call c{"ncclReduce", comm};
  NCCL_SIM_TRY(c.start(datatype));
  NCCL_SIM_TRY(c.root_ok(root));
  NCCL_SIM_TRY(c.count_ok(count));
  const bool at_root = comm->rank == root;
  NCCL_SIM_TRY(c.device("sendbuff", sendbuff, count));
  if (at_root) NCCL_SIM_TRY(c.device("recvbuff", recvbuff, count));
  auto reduce = [&](void* work, MPI_Datatype t, MPI_Op o) {
    return MPI_Reduce(at_root ? MPI_IN_PLACE : work, at_root ? work : nullptr,
                      static_cast<int>(count), t, o, root, comm->mpi);
  };
  return reduce_via_work(c, sendbuff, count, datatype, op, reduce, at_root, 0, count, recvbuff);
}

// This rank's block is moved into place first (memmove: in place it is a no-op, and an
// overlapping sendbuff is read before it is overwritten), then MPI fills in the others'.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t /*stream*/) {
  Call c{"ncclAllGather", comm};
  NCCL_SIM_TRY(c.start(datatype));
  NCCL_SIM_TRY(c.count_ok(sendcount));
  NCCL_SIM_TRY(c.device("sendbuff", sendbuff, sendcount));
  NCCL_SIM_TRY(c.device("recvbuff", recvbuff, sendcount * static_cast<size_t>(comm->size)));
  if (sendcount == 0) return ncclSuccess;
  std::memmove(
      static_cast<char*>(recvbuff) + static_cast<size_t>(comm->rank) * sendcount * c.type.size,
      sendbuff, sendcount * c.type.size);
  return mpi_result(c.name, MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recvbuff,
                                          static_cast<int>(sendcount), c.type.storage, comm->mpi));
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t /*stream*/) {
  Call c{"ncclBroadcast", comm};
  NCCL_SIM_TRY(c.start(datatype));
  NCCL_SIM_TRY(c.root_ok(root));
  NCCL_SIM_TRY(c.count_ok(count));
  const bool at_root = comm->rank == root;
  if (at_root) NCCL_SIM_TRY(c.device("sendbuff", sendbuff, count));
  NCCL_SIM_TRY(c.device("recvbuff", recvbuff, count));
  if (count == 0) return ncclSuccess;
  if (at_root) std::memmove(recvbuff, sendbuff, count * c.type.size);
  return mpi_result(c.name,
                    MPI_Bcast(recvbuff, static_cast<int>(count), c.type.storage, root, comm->mpi));
}

ncclResult_t ncclGroupStart() {
  ++g_group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (g_group.depth == 0) {
    report("ncclGroupEnd", "no group is open");
    return ncclInvalidUsage;
  }
  if (--g_group.depth > 0) return ncclSuccess;
  const ncclResult_t r = g_group.failed;
  g_group = GroupState{};
  return r;
}

}  // extern "C"
