// The meaning and unit of each metrics field: one table, for metrics.h5's attributes.
#include <array>

#include "trainrun/obs/metrics.h"

namespace trainrun {

namespace {

struct Entry {
  std::string_view field;
  FieldDoc doc;
};

constexpr std::array kFields = {
    Entry{"step", {"steps", "optimizer steps completed (1-based, as the console counts)"}},
    Entry{"loss",
          {"nats per token", "training cross-entropy, mean over the step's tokens and ranks"}},
    Entry{"val_loss", {"nats per token", "validation cross-entropy, mean over the eval batches"}},
    Entry{"lr", {"1", "learning rate of the step (after warmup, schedule and rollbacks)"}},
    Entry{"grad_norm", {"1", "L2 norm of the summed gradient, before clipping"}},
    Entry{"tokens_per_sec",
          {"tokens/s", "predicted tokens of the step over all ranks / step_time"}},
    Entry{"mfu", {"fraction", "model FLOPs of the step / (step_time x every rank's sgemm peak)"}},
    Entry{"step_time",
          {"s", "wall time of the step: data, forward, backward, comm wait, optimizer"}},
    Entry{"t_data", {"s", "waiting for the step's batches"}},
    Entry{"t_forward", {"s", "forward passes"}},
    Entry{"t_backward", {"s", "backward passes (overlapped gradient sync included)"}},
    Entry{"t_comm", {"s", "all collectives of the step, hidden behind backward or not"}},
    Entry{"t_comm_exposed", {"s", "collective time the step waited for"}},
    Entry{"comm_hidden", {"fraction", "share of t_comm hidden behind backward"}},
    Entry{"t_optimizer", {"s", "clipping, AdamW and the parameter refresh"}},
    Entry{"t_checkpoint", {"s", "checkpoint saves since the previous row (outside step_time)"}},
    Entry{"tokens_seen", {"tokens", "tokens trained on so far"}},
    Entry{"event", {"index", "the event's kind: its index in this column's names attribute"}},
};

}  // namespace

std::optional<FieldDoc> metric_field_doc(std::string_view field) {
  for (const Entry& e : kFields)
    if (e.field == field) return e.doc;
  return std::nullopt;
}

}  // namespace trainrun
