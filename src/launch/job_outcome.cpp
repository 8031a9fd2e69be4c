// How a job ended, decided from what the ranks recorded themselves; mpirun's words only fill in
// for ranks that could not write (see judge_job in supervisor.h for the order).
#include <fmt/format.h>

#include <algorithm>
#include <csignal>

#include "trainrun/core/errors.h"
#include "trainrun/launch/supervisor.h"

namespace trainrun {
namespace {

bool stopped_on_purpose(int code) {
  return code == kExitResumeMe || code == kExitInterrupted;
}

std::string rank_on(int rank, const std::string& host) {
  return host.empty() ? fmt::format("rank {}", rank) : fmt::format("rank {} on {}", rank, host);
}

std::string where(const FailureRecord& r) {
  if (r.phase.empty()) return "";
  return r.step >= 0 ? fmt::format(" in phase {} at step {}", r.phase, r.step)
                     : fmt::format(" in phase {}", r.phase);
}

JobOutcome from_record(const FailureRecord& r) {
  JobOutcome o;
  o.code = job_code(r.exit_code);
  o.rank = r.culprit_rank;
  o.host = r.culprit_host;
  o.from_record = true;
  const std::string culprit = rank_on(r.culprit_rank, r.culprit_host);
  if (r.culprit_rank == r.rank)
    o.cause = fmt::format("{} ended with code {} ({}){}: {}", culprit, r.exit_code, r.cause,
                          where(r), r.message);
  else
    o.cause = fmt::format("{} was named by {}'s {} (code {}){}: {}", culprit,
                          rank_on(r.rank, r.host), r.cause, r.exit_code, where(r), r.message);
  return o;
}

// The earliest record that `pick` accepts: the first rank to fail is the cause, the rest are
// usually its consequences.
template <typename Pick>
const FailureRecord* earliest(const std::vector<FailureRecord>& records, Pick pick) {
  const FailureRecord* best = nullptr;
  for (const FailureRecord& r : records)
    if (pick(r) && (!best || r.time < best->time)) best = &r;
  return best;
}

}  // namespace

JobOutcome judge_job(int launcher_code, const std::vector<FailureRecord>& records,
                     const MpirunFailure& launcher) {
  if (launcher_code == kExitOk) return {};
  if (const FailureRecord* r = earliest(records, [](const FailureRecord& x) {
        return x.exit_code != kExitOk && !stopped_on_purpose(x.exit_code);
      }))
    return from_record(*r);
  const std::string text = launcher.text.empty()
                               ? fmt::format("the job exited with code {}", launcher_code)
                               : launcher.text;
  // A job that never started has no rank's code: it is a launch failure (6), restartable. A
  // stop record here is a rank that was just starting, ended by the launch's teardown.
  if (launcher.not_launched) return {kExitLaunch, text, -1, launcher.host, false, true};
  const bool named_wrote_one =
      std::any_of(records.begin(), records.end(),
                  [&](const FailureRecord& x) { return x.rank == launcher.rank; });
  if (launcher.rank >= 0 && !named_wrote_one)
    return {job_code(launcher_code), launcher.text, launcher.rank, launcher.host, false};
  if (const FailureRecord* r =
          earliest(records, [](const FailureRecord& x) { return stopped_on_purpose(x.exit_code); }))
    return from_record(*r);
  return {job_code(launcher_code), text, launcher.rank, launcher.host, false};
}

int job_code(int code) {
  switch (code) {
    case kExitOk:
    case kExitFailure:
    case kExitUsage:
    case kExitData:
    case kExitCheckpoint:
    case kExitDevice:
    case kExitLaunch:
    case kExitGaveUp:
    case kExitHang:
    case kExitRunDir:
    case kExitWrite:
    case kExitResumeMe:
    case kExitInterrupted:
      return code;
    default:
      return code > 128 && code < 128 + NSIG ? code : int{kExitLaunch};
  }
}

bool restartable(int code) {
  switch (code) {
    case kExitOk:
    case kExitUsage:
    case kExitData:
    case kExitCheckpoint:
    case kExitDevice:
    case kExitGaveUp:
    case kExitRunDir:
    case kExitWrite:  // a full disk stays full: a relaunch would fail at the same checkpoint
    case kExitResumeMe:
    case kExitInterrupted:
      return false;
    default:
      return true;
  }
}

std::string exit_code_meaning(int code) {
  switch (code) {
    case kExitOk:
      return "finished";
    case kExitFailure:
      return "internal error";
    case kExitUsage:
      return "bad usage or config";
    case kExitData:
      return "bad data";
    case kExitCheckpoint:
      return "no usable checkpoint";
    case kExitDevice:
      return "device unavailable";
    case kExitLaunch:
      return "launch failure";
    case kExitGaveUp:
      return "gave up";
    case kExitHang:
      return "the watchdog aborted a hang";
    case kExitRunDir:
      return "run directory unusable";
    case kExitWrite:
      return "cannot write a checkpoint";
    case kExitResumeMe:
      return "stopped by SIGTERM or SIGUSR1 after a checkpoint";
    case kExitInterrupted:
      return "stopped by SIGINT";
    default:
      return code > 128 && code < 128 + NSIG ? fmt::format("killed by signal {}", code - 128)
                                             : fmt::format("exit code {}", code);
  }
}

}  // namespace trainrun
