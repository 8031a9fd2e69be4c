// Communicator: the collectives data parallelism needs, behind one interface.
// local (1 rank), MPI (CPU tensors), NCCL (CUDA tensors; lives in the CUDA plugin).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainrun/core/shard.h"  // Shard, shard_of
#include "trainrun/core/tensor.h"

namespace trainrun {

// Data parallelism sends the gradients in buckets of this many elements, one collective each
// (train/data_parallel.cpp), overlapped with the backward; `trainrun plan` counts them.
inline constexpr int64_t kGradBucketElems = int64_t{1} << 20;

class Communicator {
 public:
  class Request {  // a started non-blocking collective
   public:
    virtual ~Request() = default;
    virtual void wait() = 0;
    virtual bool test() = 0;  // true when complete
  };

  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string host() const = 0;
  virtual std::string kind() const = 0;  // "local" | "mpi" | "nccl"

  // In place; f32, f64, and bf16 (as reduce_scatter_sum: tensor parallelism's activations).
  virtual void allreduce_sum(Tensor x) = 0;
  virtual void allreduce_avg(Tensor x) = 0;  // in place
  virtual std::unique_ptr<Request> iallreduce_sum(Tensor x) = 0;
  // x holds n elements; afterwards this rank's shard_of(n) range holds the sum over ranks
  // (other ranges are left unspecified). f32, f64, and bf16 (summed in f32, rounded to bf16 at
  // each step of the reduction).
  virtual void reduce_scatter_sum(Tensor x) = 0;
  virtual std::unique_ptr<Request> ireduce_scatter_sum(Tensor x) = 0;
  // x holds n elements; each rank contributes its shard_of(n) range, all ranks get all of it.
  virtual void all_gather(Tensor x) = 0;
  virtual void broadcast(Tensor x, int root) = 0;
  // The rooted counterpart of all_gather, for a sharded host buffer of n elements that only
  // root needs whole (a snapshot of ZeRO-1's optimizer state): every rank passes its shard_of(n)
  // range as `mine`; root passes all n elements as `all` (`mine` may be its own range of it) and
  // receives every range there; the other ranks pass an empty `all`.
  virtual void gather(Tensor mine, Tensor all, int root) = 0;
  virtual void barrier() = 0;
  // Host doubles: every rank's `in` (n values) into out[rank * n + i].
  virtual void all_gather_doubles(const double* in, int n, double* out) = 0;
  // Host bytes, for small records that are not numbers (host names, the NCCL unique id): every
  // rank's n bytes at `in` into out[rank * n, (rank + 1) * n); root's n bytes into every rank's.
  virtual void all_gather_bytes(const void* in, size_t n, void* out) = 0;
  virtual void broadcast_bytes(void* data, size_t n, int root) = 0;
  // Ends every rank of the job now (used by the watchdog and on fatal errors).
  [[noreturn]] virtual void abort(int code) = 0;
  // Collective: the ranks that pass the same `color` form a new communicator, ranked by `key`
  // (ties by rank): a device mesh's groups (device_mesh.h). Host communicators only (local,
  // MPI); a device communicator for a group is made from the group's host one, as the world's
  // is (NCCL: one unique id per group, broadcast over it). The new communicator is independent
  // of this one and may outlive it. (Inline: the CUDA plugin's communicator inherits it.)
  virtual std::unique_ptr<Communicator> split(int, int) {
    throw std::logic_error("Communicator::split: a " + kind() +
                           " communicator is not split; make a group's device communicator from "
                           "its host group");
  }
};

std::unique_ptr<Communicator> make_local_communicator();
// Initialises MPI (MPI_THREAD_MULTIPLE) on first use; finalises when the last one dies.
std::unique_ptr<Communicator> make_mpi_communicator();

}  // namespace trainrun
