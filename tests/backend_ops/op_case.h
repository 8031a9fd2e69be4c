// OpCase: one backend op at one shape and dtype, in the shape of ggml's test-backend-ops: the
// tensors it takes (how each starts, from the case's seed), the call, the tolerance chosen for
// the op, and its FLOPs and bytes for the timing line. The runner (runner.h) executes a case on
// the reference backend (CPU) and the backend under test on identical inputs and compares.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainrun/backend/backend.h"

namespace trainrun::backend_ops {

enum class Role : uint8_t {
  input,       // random in [lo, hi), read by the op
  output,      // overwritten: starts as NaN, so an element the op forgets fails; compared
  grad,        // accumulated (+=): starts random; compared, and a second call must add again
  inout,       // starts random, updated in place (AdamW state, scale, in-place ops); compared
  ids,         // i32 token ids, uniform in [0, id_limit), except the positions in bad_ids
  doc_starts,  // i32 [B,T] document starts (Backend::attention): each row packs documents, a new
               // one starting at each position with probability 4/T; row 0 holds at least three
               // (T >= 4), with boundaries inside the kernels' 32- and 64-row tiles and, for
               // T > 96, one at 63, the last key of a tile (runner.cpp)
  derived,     // computed by the case's prepare() on the reference, then given to both backends
               // (rounded to its dtype), so a backward starts from identical saved statistics
  scratch,     // written by prepare(), not compared
};

struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;    // on the backend under test; the CPU reference computes bf16 as
                               // f32 on the same bf16-rounded values
  std::vector<int64_t> shape;  // empty: an absent optional tensor (Tensor())
  Role role = Role::input;
  float lo = -1.0f, hi = 1.0f;  // random range
  int64_t id_limit = 0;
  std::vector<std::pair<int64_t, int32_t>> bad_ids;  // (position, value) forced out of range
  int64_t id_base = 0;                               // ids draw from [id_base, id_base + id_limit)
  // Columns [first, last) of every row (the last dimension) set to -inf: masked logits.
  std::pair<int64_t, int64_t> neg_inf_cols{0, 0};
};

// The tensors of one call on one backend, by name.
class Args {
 public:
  void add(std::string name, Tensor t) { items_.emplace_back(std::move(name), t); }
  Tensor operator[](std::string_view name) const;

 private:
  std::vector<std::pair<std::string, Tensor>> items_;
};

enum class Expect : uint8_t {
  match,             // both backends compute; outputs agree within tol
  data_error,        // both throw DataError with the same message
  invalid_argument,  // both refuse the call with the same message
};

// The call under test; returns the op's host result (sum, sum_squares), else 0.
using OpCall = std::function<double(Backend&, const Args&)>;
using Prepare = std::function<void(Backend&, const Args&)>;

struct OpCase {
  Op op = Op::copy;
  DType dtype = DType::f32;  // the activation dtype: what supports() is asked about
  std::string variant;       // "+bias", " in place", ...: distinguishes cases of one op
  std::string shape;         // the model shape's name and the op's sizes, for the report
  std::vector<TensorSpec> tensors;
  Prepare prepare;  // optional: fills the derived tensors (run before the call, not timed)
  OpCall call;
  double tol = 0;  // max over outputs of max_i |x_i - ref_i| / (|ref_i| + rms(ref))
  // > 0: the call's host result is compared too, as |x - ref| / (|ref| + result_scale).
  double result_scale = 0;
  double flops = 0;  // per call
  double bytes = 0;  // moved per call (reads + writes), for the bandwidth figure
  Expect expect = Expect::match;
  uint64_t seed = 0;

  std::string name() const { return op_name(op) + variant; }
};

// A model-like shape the cases are cut from: N = B*T rows of width C, NH heads, vocabulary V.
struct ModelShape {
  const char* name;
  int64_t B, T, C;
  int NH;
  int64_t V;
};

// Every op's cases at one shape and dtype (the ops the dtype does not apply to are left out).
std::vector<OpCase> cases_for(const ModelShape& s, DType dt);
// The contract cases that need no shape sweep: bad token ids and wrong shapes, which must fail
// identically on every backend.
std::vector<OpCase> error_cases();

}  // namespace trainrun::backend_ops
