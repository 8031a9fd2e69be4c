// How a run's step loop ends, told to the user (how to go on) and to the launcher (the exit
// code, errors.h). Every rank reaches the same conclusion from the same agreed values, so every
// rank exits alike.
#pragma once

#include <cstdint>
#include <string>

namespace trainrun {

// A stop request (signal `sig`; 0 counts as SIGTERM) at `step`, its checkpoint written when
// `saved`, else the run goes on from `newest` ("" for none): 130 for SIGINT, 75 (resume me) for
// the others. Logs how to resume.
int stop_exit_code(int sig, int64_t step, bool saved, const std::string& run_dir,
                   const std::string& newest);

// A run that trained to its last step: 0 only when the final loss is finite and the final
// checkpoint was written (`unsaved` says why not, "" when it was), so a diverged run never
// passes for a finished one. Otherwise logs it, sets *why (for the gave_up event) and returns 7.
int end_exit_code(int64_t step, double loss, const std::string& unsaved, const std::string& newest,
                  std::string* why);

}  // namespace trainrun
