// ZeRO-2 and ZeRO-3 (FSDP): data parallelism whose gradients, and with ZeRO-3 whose parameters,
// live sharded, so a rank's memory for them falls with the dp_shard group's size.
//
// Layout: each unit of the model (params.h: the embeddings, every block, the head) is sharded on
// its own over the dp_shard group, shard_of(unit size) per rank, as FSDP shards each flat
// parameter. Every rank holds a slice of every unit (its pieces), so each unit's all-gather and
// reduce-scatter is balanced whatever the unit sizes, and nothing needs to divide: slices may
// differ by one element. A rank keeps, packed in unit order, the f32 master weights of its
// pieces, their gradients (summed over the group and the step's micro-batches) and AdamW's
// moments; with dp_replicate > 1 (hybrid sharding, HSDP) the replica groups hold the same pieces
// and sum their gradients once per step, one allreduce of the pieces.
//
// The model's acquire/release brackets (UnitResidency) drive the collectives:
//   forward acquire   ZeRO-3: all-gather the unit's weights (compute dtype) into a working buffer
//   forward release   ZeRO-3: free it (resharded after the forward)
//   backward acquire  ZeRO-3: gather it again; both: bind a gradient buffer for the unit
//   backward release  reduce-scatter the unit's gradients, add this rank's piece to its gradient
//                     shard, free the buffer: no whole gradient buffer ever exists
// ZeRO-2 keeps every weight gathered in one compute buffer, all-gathered unit by unit after each
// update. Working buffers come from a pool keyed by size (the blocks share theirs), so after the
// first step nothing is allocated: the pool holds the peak working set.
//
// Overlap: every collective runs on a CommStream (comm_stream.h), in the order the brackets
// queue them. Acquiring a unit queues the all-gather of the next one in the pass's order (the
// forward's next block, the backward's previous one), so it runs while this unit computes; a
// released unit's reduce-scatter runs while the next unit's backward computes, and its piece is
// added to the shard once done (at most two in flight, so gradient buffers do not build up).
// The working set is then three units in the forward (the block computing, the next one whose
// first norm its last residual add runs fused into, and the one after, being gathered) and two
// units' weights and up to three units' gradients in the backward.
//
// Collectives: as DataParallel; the brackets are collective over the dp_shard group (every rank
// runs the same model, so they come in the same order). The stream is idle whenever a forward
// pass, reduce_grads or update returns (the last unit a forward acquires has no next one to
// prefetch), so the step loop's own collectives (the stats and evaluation, on the world, which
// may be the dp_shard group itself) never run beside it. Thread safety: the step
// loop's thread, and the stream's.
#pragma once

#include <memory>

#include "data_parallel.h"

namespace trainrun {

// zero: 2 or 3; ps built with ParamStorage::external. reshard_after_forward false (ZeRO-3):
// a unit's weights gathered for its forward stay until its backward, which then gathers
// nothing; the forward's end holds every unit's weights. reduce_bf16: the gradients are
// rounded to bf16 for their reduce-scatter (distributed.reduce_dtype), half the traffic.
std::unique_ptr<DataParallel> make_sharded(int zero, const DeviceMesh& mesh, ParamStore& ps,
                                           const OptimizerConfig& cfg, Tracer* tracer,
                                           bool reshard_after_forward, bool reduce_bf16);

}  // namespace trainrun
