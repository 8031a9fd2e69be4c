// --profile's pieces on the train side: OpSpans, the bridge from the backend's op observer to
// the tracer, and the end of a profiled run.
#pragma once

#include <spdlog/spdlog.h>

#include <exception>
#include <filesystem>
#include <string>

#include "trainrun/backend/backend.h"
#include "trainrun/comm/comm.h"
#include "trainrun/obs/trace.h"

namespace trainrun {

// Under --profile, every backend op of a traced step becomes a span of category "op", which the
// tracer also sums per op (trace/ops-rank-N.txt): where the step's time goes, op by op. Ops timed
// on the device go on a "device" row of their own: the GPU runs them after the host queued them,
// so they do not nest inside the host's phases.
class OpSpans : public OpObserver {
 public:
  explicit OpSpans(Tracer& t) : t_(t) {}
  void op_done(Op op, double t0, double t1, OpClock clock) override {
    t_.span(op_name(op), "op", t0, t1, clock == OpClock::device ? "device" : nullptr);
  }

 private:
  Tracer& t_;
};

// Collective when `profiling`: every rank writes its trace; with several ranks rank 0 then merges
// them into all-ranks.json (a failed merge is a warning: the per-rank files are there); the
// console says where they are.
inline void finish_profile(Tracer& tracer, Communicator& comm, const std::string& run_dir,
                           bool profiling, bool console) {
  namespace fs = std::filesystem;
  tracer.flush();
  if (profiling && comm.size() > 1) {  // every rank traced the same window
    comm.barrier();
    if (comm.rank() == 0) try {
        merge_rank_traces((fs::path(run_dir) / "trace").string(), comm.size());
      } catch (const std::exception& e) {
        spdlog::warn("profile: the ranks' traces were not merged: {}", e.what());
      }
  }
  if (console && !tracer.written_file().empty())
    spdlog::info(
        "profile: steps {} traced into {}/ (rank-N.json, and all-ranks.json with every rank, "
        "for https://ui.perfetto.dev; ops-rank-N.txt: time per op)",
        tracer.window(), fs::path(tracer.written_file()).parent_path().string());
}

}  // namespace trainrun
