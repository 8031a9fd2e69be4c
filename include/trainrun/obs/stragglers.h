// Stragglers: given every rank's recent step time and phase times, name the ranks slower than
// the median by more than a margin, and the phase that made them slow.
#pragma once

#include <string>
#include <vector>

namespace trainrun {

inline constexpr int kPhaseCount = 5;
inline constexpr const char* kPhaseNames[kPhaseCount] = {"data", "forward", "backward", "comm",
                                                         "optimizer"};

struct RankTiming {
  int rank = 0;
  std::string host;
  double step = 0;                  // mean seconds per step over the window
  double phases[kPhaseCount] = {};  // mean seconds per phase
};

struct Straggler {
  int rank;
  std::string host;
  double step, median;  // seconds
  std::string phase;    // the phase furthest above its median
};

std::vector<Straggler> find_stragglers(const std::vector<RankTiming>& ranks, double margin);

}  // namespace trainrun
