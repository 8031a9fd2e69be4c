// NCCL as trainrun's CPU-executed device (the "sim") provides it: included instead of the
// toolkit's <nccl.h> when kernels/ is compiled by the host C++ compiler. The subset that
// kernels/nccl_comm.cpp calls, with NCCL's names, numeric values and in-place conventions, run
// over MPI by kernels/sim/nccl_mpi.cpp (each rank is one process, its "device" host memory).
//
// Collectives run synchronously, in call order, when called: the stream is accepted and ignored,
// and ncclGroupStart/End only nest (every rank issues the same sequence of calls, so the matching
// MPI collectives line up without NCCL's grouping).
#pragma once

#include <cstddef>

#include "cuda_runtime.h"

#define NCCL_UNIQUE_ID_BYTES 128

struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};

struct ncclComm;
using ncclComm_t = ncclComm*;

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8,
};

enum ncclDataType_t {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,  // accepted by broadcast and all-gather only: the sim has no fp16 arithmetic
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
};

enum ncclRedOp_t {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
};

extern "C" {

const char* ncclGetErrorString(ncclResult_t result);

// Rank 0 calls this; trainrun broadcasts the id to the other ranks over MPI.
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
// Collective over MPI_COMM_WORLD (see nccl_mpi.cpp): every world rank must call it, each with
// the id of the communicator it joins.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
// sendbuff holds nranks * recvcount elements; in place when recvbuff = sendbuff + rank*recvcount.
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
// recvbuff holds nranks * sendcount elements; in place when sendbuff = recvbuff + rank*sendcount.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
// sendbuff is read on the root only.
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
// recvbuff is written on the root only.
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);

ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

}  // extern "C"
