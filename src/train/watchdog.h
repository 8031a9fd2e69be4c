// Watchdog: every rank runs one. The step loop marks each phase it enters; a thread notices
// when no phase has changed for longer than the timeout (a hung collective or a stalled rank),
// names the ranks that did not arrive from every rank's heartbeat file, writes the last-known
// phase of every rank to RUN_DIR/logs/watchdog-rank-N.txt, leaves this rank's failure record
// (failure_record.h) naming the first rank that did not arrive, and aborts the job (exit 8) so
// the supervisor can restart it from the last checkpoint. Every phase entered is also noted for
// the failure record of a rank that fails otherwise.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "step_phase.h"
#include "trainrun/comm/comm.h"
#include "trainrun/core/thread_annotations.h"

namespace trainrun {

class Watchdog {
 public:
  // timeout > 0: fixed seconds; 0: sized from the measured step time (20x, at least 30 s).
  Watchdog(Communicator& comm, std::string run_dir, double timeout);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The step loop enters `phase` of `step` (collective(phase): waiting for the other ranks).
  void enter(Phase phase, int64_t step);
  // A collective inside a phase (ZeRO-3's all-gathers in the forward and backward): while the
  // rank waits in it, its heartbeat says it is waiting in a collective (Phase::comm), so a stall
  // names the ranks that never arrived; when the wait ends, the phase it was in resumes.
  void wait_in_collective(bool waiting);
  void step_done(double seconds);
  // The phase last entered: what this rank's heartbeat says.
  Phase phase() const { return phase_.load(std::memory_order_relaxed); }
  double timeout() const;

 private:
  void loop();
  void fire(double stuck_for);
  void write_heartbeat();

  Communicator& comm_;
  std::string run_dir_;
  double fixed_timeout_;
  std::atomic<Phase> phase_{Phase::startup};
  Phase resume_ = Phase::startup;  // the step loop's: the phase a collective's wait interrupted
  std::atomic<int64_t> step_{0};
  std::atomic<double> since_{0};
  std::atomic<double> step_ema_{0};
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainrun
