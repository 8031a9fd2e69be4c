// Test-only fault injection, from the TRAINRUN_FAULTS environment variable (documented in
// man/trainrun.1 and docs/fault-tolerance.md). Nothing happens unless it is set, and every rank
// warns loudly when it is, so it cannot slip silently into a normal run.
//
//   TRAINRUN_FAULTS="kind:key=value:...,kind:..."
//   kill:rank=R:step=S        rank R dies by SIGKILL when it reaches step S
//   exit:rank=R:step=S:code=C rank R exits with code C at step S
//   stall:rank=R:step=S       rank R sleeps forever at step S (the watchdog must catch it)
//   freeze:rank=R:step=S      rank R stops whole (SIGSTOP) at step S: no heartbeat, no answer,
//                             as when its host goes silent
//   slow:rank=R:ms=D          rank R sleeps D ms every step (a straggler)
//   nan:step=S | nan:from=S   poison the gradients with NaN at step S / every step >= S
//   inf:step=S                after step S's update every weight is +inf (a diverged update),
//                             once per process: a rollback that replays step S gets past it
// Steps are numbered from 1, as metrics rows and checkpoints are (the trainer passes the Nth).
// The step loop never asks these itself: FaultInjector (fault_injection.h) does, from outside it.
// rank defaults to every rank. A fault fires only on the first attempt of a job (so a restarted
// job gets past it) unless attempt=N (only the Nth relaunch) or attempts=all is given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainrun {

struct Fault {
  std::string kind;
  int rank = -1;  // -1: every rank
  int64_t step = -1, from = -1;
  int ms = 0, code = 1;
  bool every_attempt = false;
  int attempt = 0;
};

class Faults {
 public:
  // Parses TRAINRUN_FAULTS; throws ConfigError on a malformed spec.
  static Faults from_env(int rank, int restart_count);
  bool any() const { return !faults_.empty(); }
  // Called at the start of every step: kill, exit, stall, freeze, slow.
  void at_step_start(int64_t step) const;
  // True when this step's gradients should be poisoned with NaN.
  bool poison(int64_t step) const;
  // True when the weights should become +inf after this step's update (the first time only).
  bool diverge(int64_t step);
  std::string describe() const;

 private:
  std::vector<Fault> faults_;
  int rank_ = 0;
  bool diverged_ = false;
};

}  // namespace trainrun
