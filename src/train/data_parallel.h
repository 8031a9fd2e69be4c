// DataParallel: how the ranks share one optimizer step over the flat buffers (params.h).
//   DDP:    every rank sums all gradients (GradSync buckets, overlapping the last backward),
//           keeps all of AdamW's moments and updates every parameter identically.
//   ZeRO-1: gradients are reduce-scattered; each rank keeps moments for, and updates, only its
//           shard_of(n) range of the buffers; then the parameters are all-gathered.
//   ZeRO-2, ZeRO-3: the gradients, and with ZeRO-3 the parameters too, live sharded unit by
//           unit (sharded_data_parallel.h).
// Each rank's optimizer updates its pieces: ascending flat ranges (the whole buffer, one shard,
// or a shard of every unit), whose weights, gradients and moments it holds packed in order.
// Over a device mesh (device_mesh.h) ZeRO-1 shards over the dp_shard axis: the reduce-scatter
// and the all-gather stay inside a dp_shard group, and with dp_replicate > 1 (hybrid sharding)
// each shard's gradients are then summed across the replica groups, one allreduce of a shard.
// DDP replicates everything, so the mesh changes nothing for it.
// Everything that differs between the two lives behind this interface, and the trainer makes
// the same calls for both: grad_ready_hook (backward) -> reduce_grads -> reduce_stats -> update.
// The strategy owns the optimizer, so it is also the optimizer's checkpointed state (Stateful):
// AdamW's moments as optimizer/m/NAME and optimizer/v/NAME, of which each rank writes and reads
// only what its layout needs, whichever layout wrote the checkpoint.
//
// Collectives: the methods marked so must be called by every rank, in the same order. Device
// tensors (gradients, parameters) go over the mesh's device communicators (NCCL on CUDA, else
// the host ones); host values over the world's host communicator. Thread safety: the step loop's
// thread only (DDP's communication thread runs between the hook's first call and
// reduce_grads()). Borrows the mesh, the parameter store and the tracer (which may be null);
// they must outlive it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "step_times.h"
#include "trainrun/checkpoint/state_dict.h"
#include "trainrun/comm/comm.h"
#include "trainrun/comm/device_mesh.h"
#include "trainrun/core/clock.h"
#include "trainrun/core/experiment.h"
#include "trainrun/model/model.h"
#include "trainrun/model/params.h"
#include "trainrun/obs/trace.h"
#include "trainrun/optim/optimizer.h"

namespace trainrun {

// A step's values every rank agrees on.
struct StepStats {
  double loss = 0;       // mean over ranks (of each rank's mean over its micro-batches)
  double grad_norm = 0;  // L2 norm of the summed gradient, before clipping
  bool stop = false;     // some rank had a stop request when the stats were reduced
};

// The buffers of a rank's training state that fault injection (TRAINRUN_FAULTS nan, inf)
// overwrites: its master weights, its gradients and the compute copy of its weights.
struct StateBuffers {
  Tensor masters, grads, compute;
};

// Flat ranges a rank holds (ascending, disjoint), packed in order in `local`, and the ranks that
// hold the same ranges: `copies` of them, this one the copy_index'th.
struct HeldPieces {
  std::vector<Shard> pieces;
  Tensor local;
  int copies = 1, copy_index = 0;
  // The ranges this rank writes to a checkpoint: each piece split among its copies, so the
  // world writes every element once, in parallel, and nothing is gathered.
  std::vector<Shard> written() const;
  // Where flat element `at` (inside a piece) is in `local`.
  int64_t packed(int64_t at) const;
};

class DataParallel : public Stateful {
 public:
  // distributed.zero: 0 DDP, 1 ZeRO-1, 2 and 3 sharded_data_parallel.h. ps must have been built
  // with storage_for(zero). reshard_after_forward: distributed.reshard_after_forward (ZeRO-3);
  // reduce_bf16: distributed.reduce_dtype bf16 (ZeRO-2/3).
  static std::unique_ptr<DataParallel> make(int zero, const DeviceMesh& mesh, ParamStore& ps,
                                            const OptimizerConfig& cfg, Tracer* tracer,
                                            bool reshard_after_forward = true,
                                            bool reduce_bf16 = false);
  static ParamStorage storage_for(int zero) {
    return zero >= 2 ? ParamStorage::external : ParamStorage::flat;
  }
  virtual ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  const AdamW& optimizer() const { return opt_; }

  // The master weights this rank holds: all of them under DDP and ZeRO-1, its pieces under
  // ZeRO-2 and 3 (whose optimizer keeps the masters sharded).
  virtual HeldPieces weights() const = 0;
  // After the masters were written other than by update() (a restore): brings what is computed
  // from them up to date (the bf16 compute copy; ZeRO-2's gathered weights). Collective.
  virtual void weights_changed() = 0;
  // Collective: a fresh run's initial weights (ParamStore::initialize's values whatever the
  // layout).
  void initialize_weights(uint64_t seed);
  // Collective: every rank passes the whole model's master weights (host, numel() floats); each
  // keeps what it holds.
  void load_weights(const float* all);
  // Collective: ParamStore::checksum of the master weights, whatever the layout.
  virtual uint64_t checksum();
  // Before a step's first micro-batch.
  virtual void begin_step() {}
  // Told when the step loop starts (true) and stops (false) waiting for a collective inside a
  // model pass (ZeRO-2/3's): the watchdog's wait_in_collective.
  void on_collective_wait(std::function<void(bool waiting)> f) { wait_fn_ = std::move(f); }
  virtual StateBuffers buffers() const { return {ps_.params(), ps_.grads(), ps_.compute_params()}; }
  // For the backward pass of a step's last micro-batch, which reports every range of the
  // gradient buffer as it becomes final: starts reducing them at once. Empty when the reduction
  // waits for reduce_grads(). The same hook serves every step.
  virtual GradReadyFn grad_ready_hook() = 0;
  // Collective: completes the sum over ranks of the gradients this rank's optimizer reads.
  virtual void reduce_grads(StepTimes& t) = 0;
  // Collective, one small host allreduce (the step's only one): this rank's mean loss, its share
  // of the squared gradient norm and its stop request, summed into values every rank agrees on.
  StepStats reduce_stats(double local_loss, bool stop_requested, StepTimes& t);
  // Clips this rank's gradients to optimizer.grad_clip by `grad_norm`, applies AdamW step
  // `step` (1-based) to its pieces and (collective unless DDP) brings every rank's parameters
  // up to date.
  void update(double lr, int64_t step, double grad_norm, StepTimes& t);

  // Not collective. The ranks that hold the same moments each write their share of them
  // (HeldPieces::written). The layout is recorded as values parallel/zero, parallel/dp_replicate
  // parallel/dp_shard and parallel/tp, for `trainrun inspect`; a restore does not need them (any
  // layout reads any other's).
  void state_dict(StateDict& out) override;
  // Not collective: reads the moments of this rank's pieces (whatever layout wrote them).
  void load_state_dict(StateSource& in) override;

 protected:
  DataParallel(const DeviceMesh& mesh, ParamStore& ps, const OptimizerConfig& cfg,
               std::vector<Shard> pieces, Tracer* tracer);
  // How many ranks hold the same pieces (their gradients when the squared norms are summed,
  // their moments when they are saved), and which of them this rank is: the world under DDP
  // (identical full copies), the replica groups otherwise.
  virtual int copies() const = 0;
  virtual int copy_index() const = 0;
  virtual int stage() const = 0;  // distributed.zero
  // The optimizer's pieces' weights and gradients, packed.
  virtual Tensor local_params() const = 0;
  virtual Tensor local_grads() const = 0;
  // After the optimizer step: every rank's parameters up to date.
  virtual void gather_params(StepTimes& t) = 0;
  // This rank's share of the squared gradient norm: its local gradients, those of parameters
  // whole on every tensor-parallel rank counted 1/tp.
  double local_sum_squares() const;
  // HeldPieces for the whole flat buffers, which every rank holds (DDP, ZeRO-1's weights).
  HeldPieces replicated(Tensor all) const;
  // Runs a blocking collective, charging it to the step's communication times and the trace.
  template <class F>
  void timed(const char* span, StepTimes& t, F&& collective);
  void trace(const char* span, double t0, double t1);
  std::vector<std::pair<std::string, Tensor>> moment_tensors() const;

  const DeviceMesh& mesh_;
  Communicator& host_;    // the data-parallel ranks (the world without tp), host values
  Communicator& device_;  // the same, device tensors
  ParamStore& ps_;
  Tracer* tracer_;
  std::function<void(bool)> wait_fn_;  // may be empty
  double grad_clip_;
  AdamW opt_;
};

template <class F>
void DataParallel::timed(const char* span, StepTimes& t, F&& collective) {
  const double t0 = now();
  collective();
  const double t1 = now();
  trace(span, t0, t1);
  t.comm_wait += t1 - t0;
  t.comm_total += t1 - t0;
}

}  // namespace trainrun
