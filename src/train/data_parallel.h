// DataParallel: how the ranks share one optimizer step over the flat buffers (params.h).
//   DDP:    every rank sums all gradients (GradSync buckets, overlapping the last backward),
//           keeps all of AdamW's moments and updates every parameter identically.
//   ZeRO-1: gradients are reduce-scattered; each rank keeps moments for, and updates, only its
//           shard_of(n) range of the buffers; then the parameters are all-gathered.
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

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "step_times.h"
#include "trainrun/checkpoint/state_dict.h"
#include "trainrun/comm/comm.h"
#include "trainrun/comm/device_mesh.h"
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

class DataParallel : public Stateful {
 public:
  // ZeRO-1 when `zero`, else DDP.
  static std::unique_ptr<DataParallel> make(bool zero, const DeviceMesh& mesh, ParamStore& ps,
                                            const OptimizerConfig& cfg, Tracer* tracer);
  virtual ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // The range of the flat buffers this rank's optimizer updates.
  Shard shard() const { return opt_.shard(); }
  const AdamW& optimizer() const { return opt_; }

  // Collective: rank 0's parameters to every rank (a fresh run's initial weights).
  void broadcast_params();
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
  // `step` (1-based) to its shard and (collective under ZeRO-1) updates every rank's parameters.
  void update(double lr, int64_t step, double grad_norm, StepTimes& t);

  // Not collective. The ranks that hold the same moments (all of them under DDP, a shard's
  // replicas under ZeRO-1) each write their shard_of share of them, so the world writes each
  // once, in parallel, and nothing is gathered.
  void state_dict(StateDict& out) override;
  // Not collective: reads the moments of shard() (whatever layout wrote them).
  void load_state_dict(StateSource& in) override;

 protected:
  DataParallel(const DeviceMesh& mesh, ParamStore& ps, const OptimizerConfig& cfg, Shard shard,
               Tracer* tracer);
  // How many ranks hold the same shard() (its gradients when the squared norms are summed, its
  // moments when they are saved), and which of them this rank is: the world under DDP
  // (identical full copies), the replica groups under ZeRO-1.
  virtual int copies() const = 0;
  virtual int copy_index() const = 0;
  // After the optimizer step: every rank's parameters up to date.
  virtual void gather_params(StepTimes& t) = 0;
  // Runs a blocking collective, charging it to the step's communication times and the trace.
  template <class F>
  void timed(const char* span, StepTimes& t, F&& collective);
  void trace(const char* span, double t0, double t1);
  std::vector<std::pair<std::string, Tensor>> moment_tensors() const;

  const DeviceMesh& mesh_;
  Communicator& host_;    // the world, host values
  Communicator& device_;  // the world, device tensors
  ParamStore& ps_;
  Tracer* tracer_;
  double grad_clip_;
  AdamW opt_;
};

}  // namespace trainrun
