// Runner: executes an OpCase on the reference backend (the CPU) and on the backend under test,
// from the same seeded inputs, and judges it:
//  - outputs are poisoned with NaN first, so an element an op forgets to write fails;
//  - every written tensor is compared with the reference (rounded to the tensor's dtype first);
//  - gradients start random, and a second call must add the same contribution again
//    (accumulate, never overwrite);
//  - error cases must throw the same exception type with the same message on both backends;
//  - optionally the op is timed on the backend under test (FLOPs and bytes per second).
// Not thread-safe; one runner per pair of backends.
#pragma once

#include <cstdint>
#include <string>

#include "op_case.h"

namespace trainrun::backend_ops {

struct Outcome {
  enum Status : uint8_t { pass, fail, unsupported } status = pass;
  double err = 0;      // worst comparison against the reference
  double acc_err = 0;  // worst error of the accumulate check (gradients only)
  double ms = 0;       // mean time per call on the backend under test (0: not timed)
  std::string note;    // why it failed, or the shared error message of an error case
};

class Runner {
 public:
  Runner(Backend& ref, Backend& test, bool timing) : ref_(ref), test_(test), timing_(timing) {}
  Outcome run(const OpCase& c);

 private:
  bool supported(const OpCase& c) const;
  Outcome run_error_case(const OpCase& c);
  double time_call(const OpCase& c, const Args& args);

  Backend& ref_;
  Backend& test_;
  bool timing_;
};

}  // namespace trainrun::backend_ops
