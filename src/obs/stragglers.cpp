// find_stragglers. In synchronous data-parallel training every rank's wall-clock step is the
// same: the fast ranks wait in the gradient allreduce for the slow one. So ranks are compared
// on their own work, each step's time minus its time blocked in collectives (t_comm_exposed), and
// each rank is compared with the median of the OTHER ranks. That
// leave-one-out median is the plain median for a lone straggler among 3 or more ranks, and with
// 2 ranks it is the other rank, where the median of both (their mean) would hide half the gap.
//
// A rank must also be at least kMinExcess slower: below that, who is slower is decided by the
// OS scheduler's time slices (4 ms at Linux's usual HZ=250) on busy or shared cores, and a few
// milliseconds per step are not worth a warning.
#include "trainrun/obs/stragglers.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace trainrun {

namespace {

constexpr int kComm = 3;              // kPhaseNames[3] == "comm"
constexpr double kMinExcess = 0.010;  // seconds per step

double work(const RankTiming& r) {
  return r.work;
}

// Time in the step outside every named phase (e.g. a stall before the step's first phase).
double unattributed(const RankTiming& r) {
  double s = r.step;
  for (double p : r.phases) s -= p;
  return s;
}

// For every rank at once, the median of the OTHER ranks' values: one sort, then O(1) per rank
// (the sorted array with one element left out is read through an index shift). Rank 0 runs this
// for thousands of ranks every logging.every steps, so it must not be quadratic.
template <class F>
std::vector<double> medians_of_others(const std::vector<RankTiming>& ranks, F f) {
  const size_t n = ranks.size();
  std::vector<double> sorted(n), out(n);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  for (size_t i = 0; i < n; ++i) sorted[i] = f(ranks[i]);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sorted[a] < sorted[b]; });
  std::sort(sorted.begin(), sorted.end());
  const size_t m = n - 1;  // values left once one is out
  for (size_t k = 0; k < n; ++k) {
    auto at = [&](size_t i) { return sorted[i < k ? i : i + 1]; };  // without sorted[k]
    out[order[k]] = m == 0 ? 0 : m % 2 ? at(m / 2) : 0.5 * (at(m / 2 - 1) + at(m / 2));
  }
  return out;
}

}  // namespace

std::vector<Straggler> find_stragglers(const std::vector<RankTiming>& ranks, double margin) {
  std::vector<Straggler> out;
  if (ranks.size() < 2) return out;
  const auto ref = medians_of_others(ranks, work);
  std::vector<size_t> slow;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (work(ranks[i]) > ref[i] * (1 + margin) && work(ranks[i]) - ref[i] > kMinExcess)
      slow.push_back(i);
  if (slow.empty()) return out;
  // The phase furthest above its own median; time outside every phase counts as "other".
  const auto other = medians_of_others(ranks, unattributed);
  std::vector<std::vector<double>> phase_ref(kPhaseCount);
  for (int p = 0; p < kPhaseCount; ++p)
    if (p != kComm)  // a slow rank waits less in collectives, never more
      phase_ref[size_t(p)] =
          medians_of_others(ranks, [p](const RankTiming& x) { return x.phases[p]; });
  for (size_t i : slow) {
    const RankTiming& r = ranks[i];
    std::string phase = "other";
    double worst = unattributed(r) - other[i];
    for (int p = 0; p < kPhaseCount; ++p) {
      if (p == kComm) continue;
      const double excess = r.phases[p] - phase_ref[size_t(p)][i];
      if (excess > worst) {
        worst = excess;
        phase = kPhaseNames[p];
      }
    }
    out.push_back({r.rank, r.host, work(r), ref[i], phase});
  }
  return out;
}

std::optional<SlowCollectives> CollectiveWatch::check(const std::vector<RankTiming>& ranks,
                                                      double margin) {
  if (ranks.size() < 2) return std::nullopt;
  double least = ranks[0].phases[kComm];
  for (const RankTiming& r : ranks) least = std::min(least, r.phases[kComm]);
  if (!history_.empty()) {
    auto median = [](std::vector<double> v) {
      std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    const double usual = median(history_);
    // How much the least wait varies by itself (a robust standard deviation: 1.4826 x the
    // median absolute deviation): once a rank is slow the least waiter is that rank, whose
    // wait swings with the others' hiccups, and 3 of those deviations are no slower network.
    std::vector<double> dev;
    for (double x : history_) dev.push_back(std::abs(x - usual));
    const double spread = 3 * 1.4826 * median(dev);
    if (least > usual * (1 + margin) && least - usual > std::max(kMinExcess, spread))
      return SlowCollectives{least, usual};
  }
  history_.push_back(least);
  if (history_.size() > kHistory) history_.erase(history_.begin());
  return std::nullopt;
}

}  // namespace trainrun
