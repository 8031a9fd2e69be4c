#include "run_end.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <csignal>

#include "trainrun/core/errors.h"

namespace trainrun {

int stop_exit_code(int sig, int64_t step, bool saved, const std::string& run_dir,
                   const std::string& newest) {
  if (sig == 0) sig = SIGTERM;
  if (saved)
    spdlog::warn(
        "stop requested (signal {}): checkpoint saved at step {}; resume with "
        "`trainrun --resume {}`",
        sig, step, run_dir);
  else
    spdlog::warn(
        "stop requested (signal {}) at step {}, where the state was not fit for a checkpoint; "
        "`trainrun --resume {}` goes on from {}",
        sig, step, run_dir, newest.empty() ? "nothing (no checkpoint was written)" : newest);
  return sig == SIGINT ? kExitInterrupted : kExitResumeMe;
}

int end_exit_code(int64_t step, double loss, const std::string& unsaved, const std::string& newest,
                  std::string* why) {
  if (std::isfinite(loss) && unsaved.empty()) return kExitOk;
  *why = std::isfinite(loss) ? "no final checkpoint (" + unsaved + ")"
                             : fmt::format("a non-finite loss ({})", loss);
  spdlog::error(
      "the run ended at step {} with {}: its final state is not usable; {} (exit {}, gave up)",
      step, *why,
      newest.empty() ? "no checkpoint was written" : "the newest good checkpoint is " + newest,
      int(kExitGaveUp));
  return kExitGaveUp;
}

}  // namespace trainrun
