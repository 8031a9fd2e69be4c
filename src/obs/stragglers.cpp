// find_stragglers. In synchronous data-parallel training every rank's wall-clock step is the
// same: the fast ranks wait in the gradient allreduce for the slow one. So ranks are compared
// on their own work, each step's time minus its time blocked in collectives (t_comm_exposed), and
// each rank is compared with the median of the OTHER ranks. That
// leave-one-out median is the plain median for a lone straggler among 3 or more ranks, and with
// 2 ranks it is the other rank, where the median of both (their mean) would hide half the gap.
//
// Two statistics of a rank's per-step work, each with its own test; either names the rank:
//  - every step: the median over the window (RankTiming::work). It ignores whatever hits fewer
//    than half the steps, so a one-off hiccup, and the ecfd662 window (a link slowed mid-window
//    and one step stalled 200 ms outside collectives) names no one. It must also be kMinExcess
//    slower: below that, who is slower is decided by the OS scheduler's time slices (4 ms at
//    Linux's usual HZ=250) on busy or shared cores.
//  - frequent stalls: the time the rank lost in stalls over the last two windows, spread over
//    the steps (stall_cost), on top of its median. A rank stopped 30 ms of every 60 ms
//    (SIGSTOP) while its steps take 2-3 ms stalls one step in several: the median never sees
//    it, yet the job runs 2-3x slower. A mean is what the job pays, but a plain mean is fooled
//    by one hiccup (the ecfd662 window's 200 ms step in 5 would read 58 ms against the other
//    rank's 23 ms), and on busy cores by the scheduler: 2 ranks of a 2 ms-step model beside a
//    busy process on 2 cores take turns being held back 4-8 ms a time slice, and a trimmed mean
//    over two windows named one of them at 7-35% of the checks (bench/RESULTS.md 34). So only
//    steps above the median by the margin and by kMinExcess count as stalls (counting every
//    step 10 ms above, the per-step noise's tail named 2 ranks per 10,000 steps at margin 0.1
//    in straggler_sim), and the single longest is left out: one stall, however long, is a
//    hiccup, a second within 2 x logging.every steps a pattern. The rank is named when its
//    median plus its stall cost exceeds the others' by the margin and its stall cost exceeds
//    theirs by kMinStallExcess a step: the stalls must make the difference, not a median that a
//    time slice raised (against a 2 ms floor on median plus stalls, the scheduler's ranks were
//    named at a quarter to half of the checks). Slowness on every step raises the median (the
//    first test names it). A link that slows on every rank lengthens the waits, not the work:
//    neither figure moves.
//    Rejected besides: stalls within one window (misses a pattern that hits one step a window:
//    1 in 10 steps costs a 3 ms-step job 2x); a streak of checks on rank 0 (state per rank, and
//    a later first warning for what two windows already show).
#include "trainrun/obs/stragglers.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace trainrun {

namespace {

constexpr int kComm = 3;                   // kPhaseNames[3] == "comm"
constexpr double kMinExcess = 0.010;       // seconds per step, the median test
constexpr double kMinStallExcess = 0.001;  // seconds per step, the stall test

double work(const RankTiming& r) {
  return r.work;
}

double stalls(const RankTiming& r) {
  return r.stall_cost;
}

double with_stalls(const RankTiming& r) {
  return r.work + r.stall_cost;
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
  const auto ref_with_stalls = medians_of_others(ranks, with_stalls);
  const auto ref_stalls = medians_of_others(ranks, stalls);
  auto above = [margin](double x, double ref, double floor) {
    return x > ref * (1 + margin) && x - ref > floor;
  };
  std::vector<size_t> slow;
  std::vector<bool> stalled(ranks.size(), false);
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (above(work(ranks[i]), ref[i], kMinExcess)) {
      slow.push_back(i);
    } else if (above(with_stalls(ranks[i]), ref_with_stalls[i], 0) &&
               stalls(ranks[i]) - ref_stalls[i] > kMinStallExcess) {
      slow.push_back(i);
      stalled[i] = true;
    }
  }
  if (slow.empty()) return out;
  // The phase furthest above its own median; time outside every phase counts as "other". A rank
  // named for stalls says where its stall time went (its medians do not show the stalls).
  const auto other = medians_of_others(ranks, unattributed);
  std::vector<std::vector<double>> phase_ref(kPhaseCount);
  for (int p = 0; p < kPhaseCount; ++p)
    if (p != kComm)  // a slow rank waits less in collectives, never more
      phase_ref[size_t(p)] =
          medians_of_others(ranks, [p](const RankTiming& x) { return x.phases[p]; });
  for (size_t i : slow) {
    const RankTiming& r = ranks[i];
    if (stalled[i]) {
      const int p = r.stall_phase;
      const std::string phase = p >= 0 && p < kPhaseCount && p != kComm ? kPhaseNames[p] : "other";
      out.push_back({r.rank, r.host, with_stalls(r), ref_with_stalls[i], phase, true});
      continue;
    }
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
    out.push_back({r.rank, r.host, work(r), ref[i], phase, false});
  }
  return out;
}

namespace {

// The upper median, as StragglerWindow takes every median.
double upper_median(std::vector<double> v) {
  const auto mid = v.begin() + std::ptrdiff_t(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace

std::vector<bool> stalled_steps(const std::vector<double>& work, double margin) {
  std::vector<bool> out(work.size(), false);
  if (work.size() < 2) return out;
  const double median = upper_median(work);
  size_t longest = work.size();
  for (size_t i = 0; i < work.size(); ++i) {
    if (work[i] <= median * (1 + margin) || work[i] - median <= kMinExcess) continue;
    out[i] = true;
    if (longest == work.size() || work[i] > work[longest]) longest = i;
  }
  if (longest < work.size()) out[longest] = false;
  return out;
}

double stall_cost(const std::vector<double>& work, double margin) {
  if (work.size() < 2) return 0;
  const double median = upper_median(work);
  const std::vector<bool> stalled = stalled_steps(work, margin);
  double lost = 0;
  for (size_t i = 0; i < work.size(); ++i)
    if (stalled[i]) lost += work[i] - median;
  return lost / double(work.size() - 1);
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
