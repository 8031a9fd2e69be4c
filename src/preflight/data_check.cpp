// The data check the run's owner, `validate` and --dry-run make before anything is written:
// the same open_sample_stream calls a rank makes, so they refuse exactly what a rank would.
#include "trainrun/data/sample_stream.h"
#include "trainrun/preflight/preflight.h"

namespace trainrun {

void check_data(const Experiment& exp) {
  for (Split split : {Split::train, Split::val})
    open_sample_stream(exp.data, split, exp.model.vocab_size, exp.seed, exp.model.seq_len);
}

}  // namespace trainrun
