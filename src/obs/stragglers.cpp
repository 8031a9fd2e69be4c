// find_stragglers. In synchronous data-parallel training every rank's wall-clock step is the
// same: the fast ranks wait in the gradient allreduce for the slow one. So ranks are compared
// on their own work, step - phases[comm] (phases[comm] must be the time blocked in collectives,
// t_comm_exposed), and each rank is compared with the median of the OTHER ranks. That
// leave-one-out median is the plain median for a lone straggler among 3 or more ranks, and with
// 2 ranks it is the other rank, where the median of both (their mean) would hide half the gap.
//
// A rank must also be at least kMinExcess slower: below that, who is slower is decided by the
// OS scheduler's time slices (4 ms at Linux's usual HZ=250) on busy or shared cores, and a few
// milliseconds per step are not worth a warning.
#include "trainrun/obs/stragglers.h"

#include <algorithm>

namespace trainrun {

namespace {

constexpr int kComm = 3;              // kPhaseNames[3] == "comm"
constexpr double kMinExcess = 0.010;  // seconds per step

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

double work(const RankTiming& r) {
  return r.step - r.phases[kComm];
}

// Time in the step outside every named phase (e.g. a stall before the step's first phase).
double unattributed(const RankTiming& r) {
  double s = r.step;
  for (double p : r.phases) s -= p;
  return s;
}

template <class F>
double median_of_others(const std::vector<RankTiming>& ranks, size_t skip, F f) {
  std::vector<double> v;
  v.reserve(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i)
    if (i != skip) v.push_back(f(ranks[i]));
  return median(std::move(v));
}

}  // namespace

std::vector<Straggler> find_stragglers(const std::vector<RankTiming>& ranks, double margin) {
  std::vector<Straggler> out;
  if (ranks.size() < 2) return out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankTiming& r = ranks[i];
    const double ref = median_of_others(ranks, i, work);
    if (!(work(r) > ref * (1 + margin) && work(r) - ref > kMinExcess)) continue;
    // The phase furthest above its own median; time outside every phase counts as "other".
    std::string phase = "other";
    double worst = unattributed(r) - median_of_others(ranks, i, unattributed);
    for (int p = 0; p < kPhaseCount; ++p) {
      if (p == kComm) continue;  // a slow rank waits less in collectives, never more
      const double excess = r.phases[p] - median_of_others(ranks, i, [p](const RankTiming& x) {
                              return x.phases[p];
                            });
      if (excess > worst) {
        worst = excess;
        phase = kPhaseNames[p];
      }
    }
    out.push_back({r.rank, r.host, work(r), ref, phase});
  }
  return out;
}

}  // namespace trainrun
