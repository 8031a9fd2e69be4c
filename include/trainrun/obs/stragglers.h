// Stragglers: given every rank's recent step time and phase times, name the ranks slower than
// the median by more than a margin, every step or in frequent stalls, and the phase that made
// them slow; and tell a slow network (every rank waits longer in the collectives) from a slow
// rank.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace trainrun {

inline constexpr int kPhaseCount = 5;
inline constexpr const char* kPhaseNames[kPhaseCount] = {"data", "forward", "backward", "comm",
                                                         "optimizer"};

struct RankTiming {
  int rank = 0;
  std::string host;
  double step = 0;  // median seconds per step over the window
  double work = 0;  // median of each step's seconds outside collectives
  // Seconds per step lost in stalls over the last two windows (stall_cost below); 0 when none,
  // or not reported (the median test alone).
  double stall_cost = 0;
  int stall_phase = kPhaseCount;    // where that stall time went: a kPhaseNames index, or
                                    // kPhaseCount for time outside every phase ("other")
  double phases[kPhaseCount] = {};  // median seconds per phase
};

struct Straggler {
  int rank;
  std::string host;
  double step, median;  // seconds outside collectives per step: this rank's, the others' median
  std::string phase;    // the phase furthest above its median
  bool stalls = false;  // named for frequent stalls (step: work + stall_cost), not its median
};

std::vector<Straggler> find_stragglers(const std::vector<RankTiming>& ranks, double margin);

// Which of a rank's steps (their seconds outside collectives, over its last two windows) count
// as stalls: above their median by the margin and by 10 ms (less is the per-step noise and the
// scheduler's time slices), the single longest of them left out (one stall is a hiccup).
std::vector<bool> stalled_steps(const std::vector<double>& work, double margin);

// RankTiming::stall_cost of those steps: the stalls' time above the median, spread over the
// steps (the longest step left out); 0 when there are fewer than 2.
double stall_cost(const std::vector<double>& work, double margin);

// The collectives slowed on every rank: the least time any rank waited in them per step, and
// what that least wait usually was at the earlier checks.
struct SlowCollectives {
  double least_wait, baseline;  // seconds per step; baseline: the usual least wait
};

// A slow link is not a slow rank. When the network between hosts slows, every rank waits longer
// in the collectives while its own work stays the same; when one rank is slow, the others wait for
// it, but it does not wait itself. So the least any rank waits (the minimum over ranks of
// phases[comm]) is watched from check to check: above its usual value (the median of the last
// kHistory checks that were not slow) by the margin and by 10 ms a step, the collectives
// themselves have slowed (one rank's slowness cannot raise it). A median, not the lowest value
// ever seen: at 4,096 simulated ranks the lowest drifted down with noise and a third of clean
// checks looked slow against it (bench/straggler_sim).
class CollectiveWatch {
 public:
  static constexpr size_t kHistory = 16;
  std::optional<SlowCollectives> check(const std::vector<RankTiming>& ranks, double margin);

 private:
  std::vector<double> history_;  // least waits of the last kHistory checks not judged slow
};

}  // namespace trainrun
