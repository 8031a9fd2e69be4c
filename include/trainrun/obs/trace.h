// Tracer: Chrome trace event JSON per rank (RUN_DIR/trace/rank-N.json, loadable in Perfetto)
// for a window of steps; every phase and every collective is a span. Outside the window a span
// costs one branch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace trainrun {

class Tracer {
 public:
  // steps "A:B" traces steps A to B-1 (numbered from 1, as the logs number them: set_step is
  // given the Nth); empty = off. Every span carries its step ("args":{"step":N}).
  Tracer(const std::string& run_dir, int rank, const std::string& steps);
  ~Tracer();  // writes the file when anything was recorded
  void set_step(int64_t step);
  bool active() const;
  // Whether the window traces any of the steps [from, to) (a run's remaining steps). False
  // when tracing is off.
  bool covers(int64_t from, int64_t to) const;
  std::string window() const;  // "A:B" as given
  // A complete event ("ph":"X") from t0 to t1 (seconds, steady clock); `cat` e.g. "phase", "comm".
  // It goes on the calling thread's row, or with `track` on a row of that name (e.g. "device":
  // times the GPU took, which do not nest inside the host's spans).
  void span(const char* name, const char* cat, double t0, double t1, const char* track = nullptr);
  void flush();                      // writes the file now
  std::string written_file() const;  // the trace file once written, else ""

  class Scope {  // RAII span
   public:
    Scope(Tracer* t, const char* name, const char* cat);
    ~Scope();

   private:
    Tracer* t_;
    const char* name_;
    const char* cat_;
    double t0_;
  };

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Steady-clock seconds, the time base of spans.
double trace_now();

// One Perfetto/Chrome trace of the whole job: the traceEvents of trace_dir's rank-0.json ..
// rank-(world-1).json (those that exist) in TRACE_DIR/all-ranks.json, each rank its own process
// (pid = rank). Returns the file written, "" when no rank wrote a trace. The ranks of one host
// share its monotonic clock, so their spans line up; ranks of other hosts are offset by the
// hosts' clock difference. Throws on an unreadable rank file.
std::string merge_rank_traces(const std::string& trace_dir, int world);

}  // namespace trainrun
