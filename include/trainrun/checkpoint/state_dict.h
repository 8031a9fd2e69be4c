// The contract between the components that hold training state and the checkpoint that stores it
// (torchtitan's Stateful, PyTorch distributed checkpoint's planner items).
//
// A checkpoint speaks global tensors ("model/blocks.0.attn.qkv.weight", "optimizer/m/...") with
// their global shapes, never a rank's buffers, and named values ("train/step", "data/seed",
// "health/lr_scale": counters, cursors, seeds, scales), which are the same on every rank. On save,
// each component declares every tensor it has and adds the slices of them this rank writes: a Box
// (offsets and sizes per dimension) and a function that copies the slice's elements out when the
// snapshot is taken. On restore, a component asks a StateSource for the boxes its own layout needs,
// whatever layout wrote them; the source assembles them from the stored slices that overlap.
// Resharding (any world size, any data-parallel strategy, later any sharded or tensor-parallel
// split) is therefore one operation, and a new layout adds only its own declarations.
//
// Thread safety: a StateDict and a StateSource belong to one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "trainrun/core/box.h"
#include "trainrun/core/param_entry.h"
#include "trainrun/core/shard.h"

namespace trainrun {

// A named value of a component's state that is not a tensor. Stored exactly (a double bit for
// bit, a seed as all 64 bits); a reader asks for the type it wants (read_int and friends below).
using StateValue = std::variant<int64_t, uint64_t, double>;
struct NamedValue {
  std::string name;
  StateValue value;
  bool operator==(const NamedValue&) const = default;
};

// What one rank saves.
class StateDict {
 public:
  // Copies a slice's box_numel elements, row-major, to `out` (host memory).
  using Fill = std::function<void(float* out)>;
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
  };
  struct Slice {
    size_t tensor;  // index into tensors()
    Box box;
    Fill fill;
  };
  // Every tensor a component has, on every rank, whether or not this rank writes a slice of it:
  // the tables of all ranks must agree. Names are '/'-separated paths of [A-Za-z0-9_.-] parts.
  // Returns its index.
  size_t declare(std::string name, std::vector<int64_t> shape);
  // A slice of a declared tensor that this rank writes; empty boxes are dropped. The slices of
  // all ranks together must cover each tensor exactly once (the checkpoint refuses a gap or an
  // overlap when it commits).
  void add(size_t tensor, Box box, Fill fill);
  // A named value (same name rules as a tensor's). Every rank puts the same values: rank 0's are
  // the checkpoint's, the others' must agree (the checkpoint refuses a difference when it
  // commits). Throws std::invalid_argument for a name put twice.
  void put(std::string name, StateValue value);

  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<Slice>& slices() const { return slices_; }
  const std::vector<NamedValue>& values() const { return values_; }

 private:
  std::vector<Tensor> tensors_;
  std::vector<Slice> slices_;
  std::vector<NamedValue> values_;
};

// A restoring component's request: the box of a tensor, into `out` (box_numel floats, row-major).
struct SliceRequest {
  std::string tensor;
  Box box;
  float* out;
};

// A checkpoint, as a restoring component sees it.
class StateSource {
 public:
  virtual ~StateSource() = default;
  // The global shape of `tensor`; false when the checkpoint has no such tensor.
  virtual bool shape_of(const std::string& tensor, std::vector<int64_t>* shape) const = 0;
  // The names of every tensor, in the order they were declared.
  virtual std::vector<std::string> tensor_names() const = 0;
  // Fills every request, reading (and verifying: checksum, finiteness) only the stored slices
  // that overlap one. Throws CheckpointError naming the checkpoint and the tensor.
  virtual void read(const std::vector<SliceRequest>& requests) = 0;
  // Every named value, in the order they were put.
  virtual const std::vector<NamedValue>& values() const = 0;
  // The checkpoint's path, for messages.
  virtual const std::string& path() const = 0;
};

// The named value `name` of `values` as the type asked for: an integer that fits, a double from
// any number. Throws CheckpointError naming `where` and the value when there is none or it does
// not fit (a negative seed, a fraction for a counter).
int64_t read_int(const std::vector<NamedValue>& values, const std::string& name,
                 const std::string& where);
uint64_t read_uint(const std::vector<NamedValue>& values, const std::string& name,
                   const std::string& where);
double read_double(const std::vector<NamedValue>& values, const std::string& name,
                   const std::string& where);
// The same from a checkpoint being restored (`where`: its path).
inline int64_t read_int(const StateSource& in, const std::string& name) {
  return read_int(in.values(), name, "checkpoint " + in.path());
}
inline uint64_t read_uint(const StateSource& in, const std::string& name) {
  return read_uint(in.values(), name, "checkpoint " + in.path());
}
inline double read_double(const StateSource& in, const std::string& name) {
  return read_double(in.values(), name, "checkpoint " + in.path());
}

// A component with checkpointed state.
class Stateful {
 public:
  virtual ~Stateful() = default;
  // Declares this component's tensors and adds the slices this rank writes.
  virtual void state_dict(StateDict& out) = 0;
  // Restores this rank's part from `in`. Throws CheckpointError when `in` does not hold what
  // this component needs (another model, missing tensors).
  virtual void load_state_dict(StateSource& in) = 0;
};

// The state of a flat buffer of named tensors (ParamStore's layout: `params` at their offsets),
// under `prefix` ("model", "optimizer/m"): declares every tensor and adds the boxes of the flat
// elements `ranges` (ascending, disjoint), filled by copy(begin, n, out), which copies flat
// elements [begin, begin + n). A tensor-parallel part is added as the boxes of the global
// tensor it holds (ParamEntry::pieces); a tp_copy entry is declared and not added.
void add_flat_state(StateDict& out, const std::string& prefix,
                    const std::vector<ParamEntry>& params, const std::vector<Shard>& ranges,
                    const std::function<void(int64_t begin, int64_t n, float* out)>& copy);
// The inverse: reads the flat elements `ranges` (ascending, disjoint) of the tensors under
// `prefix` into `out`, packed in order (out[0] is element ranges[0].begin). Throws
// CheckpointError naming the tensor when the checkpoint lacks one or holds it with another
// shape, or holds a tensor under `prefix` that `params` does not have (a checkpoint of another
// model).
void read_flat_state(StateSource& in, const std::string& prefix,
                     const std::vector<ParamEntry>& params, const std::vector<Shard>& ranges,
                     float* out);
// The same for one range.
inline void add_flat_state(StateDict& out, const std::string& prefix,
                           const std::vector<ParamEntry>& params, Shard range,
                           const std::function<void(int64_t begin, int64_t n, float* out)>& copy) {
  add_flat_state(out, prefix, params, std::vector<Shard>{range}, copy);
}
inline void read_flat_state(StateSource& in, const std::string& prefix,
                            const std::vector<ParamEntry>& params, Shard range, float* out) {
  read_flat_state(in, prefix, params, std::vector<Shard>{range}, out);
}

}  // namespace trainrun
