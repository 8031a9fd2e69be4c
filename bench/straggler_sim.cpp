// build/bench/straggler_sim [RANKS] [STEPS] [SIGMA]: the straggler detector (find_stragglers, the
// function rank 0 runs every logging.every steps) fed the step-phase timings of RANKS simulated
// ranks (default 4096, 8 per host) for STEPS steps (default 10000) per scenario, at several
// margins. Per scenario: detection rate (checks after the onset that name every slow rank),
// false positives per 10,000 steps (healthy ranks named), latency (steps from the onset to the
// first check naming a slow rank), and what one check costs at this rank count; detection and
// false positives also for the median alone (stall_cost not reported: the detector before the
// stall test, bench/RESULTS.md 31). Figures only; bench/RESULTS.md sections 21 and 34 and
// docs/observability.md hold the numbers and the choice.
//
// Timing model (a GPT-2-size step on a GPU, per rank and step): data 0.5 ms, forward 100 ms,
// backward 200 ms, optimizer 10 ms, each scaled by the rank's own speed (lognormal, sigma 1%:
// chip-to-chip) and by per-step noise (lognormal, SIGMA, default 3.4%: what 8 ranks on this
// 2-core machine showed, bench/RESULTS.md 21), plus a hiccup on 0.5% of rank-steps (+5-50 ms,
// an OS or driver stall). Synchronous data parallelism: every rank's comm phase is the wait for
// the slowest rank's work plus the allreduce (20 ms). Each rank reports the medians of its last
// 10 steps (logging.every 10) and stall_cost over its last 20, as StepReporter does. A
// stalling rank (from the onset) adds a stall to its data phase on a share of its steps, at random.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "trainrun/obs/stragglers.h"

using namespace trainrun;

namespace {

constexpr int kPerHost = 8;
constexpr int kWindow = 10;
constexpr double kBase[kPhaseCount] = {0.0005, 0.100, 0.200, 0.0, 0.010};
constexpr double kAllreduce = 0.020;

struct Scenario {
  std::string name;
  std::set<int> slow;         // ranks that slow down at the onset
  double slow_factor = 1.0;   // their forward and backward
  double link_factor = 1.0;   // allreduce time on every rank (a degraded link between groups)
  double stall_share = 0;     // the slow ranks stall on this share of their steps...
  double stall_seconds = 0;   // ...this long (slow_factor stays 1)
  double oneoff_share = 0;    // every rank, from the start: a one-off stall this often...
  double oneoff_seconds = 0;  // ...this long
};

struct Result {
  double detection = 0;  // share of checks after the onset naming every slow rank
  double fp_per_10k = 0;
  double median_detection = 0, median_fp_per_10k = 0;  // the same, the median test alone
  double latency = -1;                                 // steps, -1: never
  double check_us = 0;                                 // mean cost of one find_stragglers call
  // The slow-collectives check (CollectiveWatch): share of checks after a link's onset that say
  // so, and how often it says so where no link slowed (per 10k steps).
  double link_detection = 0, link_fp_per_10k = 0;
};

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// One pass over the steps; every check is judged at each margin.
std::vector<Result> simulate(const Scenario& sc, int n, int steps, double sigma,
                             const std::vector<double>& margins, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> speed(static_cast<size_t>(n));
  for (double& s : speed) s = std::exp(0.01 * normal(rng));
  const int onset = steps / 2;
  // window[r][phase][k]: the last kWindow steps' phase times, then step and work times.
  std::vector<std::vector<std::vector<double>>> window(
      static_cast<size_t>(n), std::vector<std::vector<double>>(kPhaseCount + 2));
  std::vector<double> work(static_cast<size_t>(n));
  // pool[r]: the last 2 x kWindow steps' work, what stall_cost reads.
  std::vector<std::vector<double>> pool(static_cast<size_t>(n));
  std::vector<std::array<double, kPhaseCount>> phases(static_cast<size_t>(n));
  const size_t M = margins.size();
  std::vector<Result> res(M);
  std::vector<int> detected(M, 0), false_positives(M, 0), link_said(M, 0), link_false(M, 0);
  std::vector<int> median_detected(M, 0), median_false(M, 0);
  std::vector<CollectiveWatch> watches(M);
  const bool link = sc.link_factor != 1.0;
  std::vector<double> check_seconds(M, 0);
  int checks_after = 0, checks = 0;
  for (int step = 0; step < steps; ++step) {
    const bool degraded = step >= onset;
    for (int r = 0; r < n; ++r) {
      auto& ph = phases[size_t(r)];
      const double noise = std::exp(sigma * normal(rng)) * speed[size_t(r)];
      const double slow = degraded && sc.slow.count(r) ? sc.slow_factor : 1.0;
      for (int p = 0; p < kPhaseCount; ++p) ph[size_t(p)] = kBase[p] * noise;
      ph[1] *= slow;
      ph[2] *= slow;
      if (unit(rng) < 0.005) ph[1] += 0.005 + 0.045 * unit(rng);
      // Drawn only in the scenarios that stall, so the others' random streams (and figures) are
      // those of RESULTS 21, 25 and 31.
      if (sc.stall_share > 0 && degraded && sc.slow.count(r) && unit(rng) < sc.stall_share)
        ph[0] += sc.stall_seconds;
      if (sc.oneoff_share > 0 && unit(rng) < sc.oneoff_share) ph[0] += sc.oneoff_seconds;
      work[size_t(r)] = ph[0] + ph[1] + ph[2] + ph[4];
    }
    const double slowest = *std::max_element(work.begin(), work.end());
    const double allreduce = kAllreduce * (degraded ? sc.link_factor : 1.0);
    for (int r = 0; r < n; ++r) {
      auto& ph = phases[size_t(r)];
      ph[3] = slowest - work[size_t(r)] + allreduce;
      auto& w = window[size_t(r)];
      for (int p = 0; p < kPhaseCount; ++p) w[size_t(p)].push_back(ph[size_t(p)]);
      w[kPhaseCount].push_back(work[size_t(r)] + ph[3]);  // the step
      w[kPhaseCount + 1].push_back(work[size_t(r)]);
      if (w[0].size() > size_t(kWindow))
        for (auto& q : w) q.erase(q.begin());
      auto& p = pool[size_t(r)];
      p.push_back(work[size_t(r)]);
      if (p.size() > size_t(2 * kWindow)) p.erase(p.begin());
    }
    if ((step + 1) % kWindow != 0) continue;
    std::vector<RankTiming> ranks(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      RankTiming& t = ranks[size_t(r)];
      t.rank = r;
      t.host = fmt::format("node{}", r / kPerHost);
      t.step = median(window[size_t(r)][kPhaseCount]);
      t.work = median(window[size_t(r)][kPhaseCount + 1]);

      for (int p = 0; p < kPhaseCount; ++p) t.phases[p] = median(window[size_t(r)][size_t(p)]);
    }
    ++checks;
    const bool judged = step + 1 - kWindow >= onset && !sc.slow.empty();
    const bool link_judged = step + 1 - kWindow >= onset && link;
    checks_after += judged || link_judged;
    for (size_t m = 0; m < M; ++m) {
      // Each rank's stall cost at this margin (in a job every rank knows it).
      for (int r = 0; r < n; ++r)
        ranks[size_t(r)].stall_cost = stall_cost(pool[size_t(r)], margins[m]);
      const auto t0 = std::chrono::steady_clock::now();
      const auto named = find_stragglers(ranks, margins[m]);
      check_seconds[m] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::set<int> flagged;
      for (const auto& s : named) flagged.insert(s.rank);
      for (int r : flagged)
        if (!(degraded && sc.slow.count(r))) ++false_positives[m];
      bool all = !sc.slow.empty(), any = false;
      for (int r : sc.slow) {
        all = all && flagged.count(r);
        any = any || flagged.count(r);
      }
      // Checks whose whole window lies after the onset judge detection; latency counts from
      // the onset to the first check naming a slow rank.
      if (judged) detected[m] += all;
      // The median test alone: the same check with stall_cost not reported.
      std::vector<RankTiming> medians_only = ranks;
      for (RankTiming& t : medians_only) t.stall_cost = 0;
      std::set<int> by_median;
      for (const auto& s : find_stragglers(medians_only, margins[m])) by_median.insert(s.rank);
      for (int r : by_median)
        if (!(degraded && sc.slow.count(r))) ++median_false[m];
      bool all_by_median = !sc.slow.empty();
      for (int r : sc.slow) all_by_median = all_by_median && by_median.count(r);
      if (judged) median_detected[m] += all_by_median;
      const bool slow_link = watches[m].check(ranks, margins[m]).has_value();
      if (link_judged) link_said[m] += slow_link;
      if (slow_link && !(link && degraded)) ++link_false[m];
      if (res[m].latency < 0 && degraded && any) res[m].latency = step + 1 - onset;
    }
  }
  for (size_t m = 0; m < M; ++m) {
    res[m].detection = checks_after ? double(detected[m]) / checks_after : 0;
    res[m].fp_per_10k = 10000.0 * false_positives[m] / steps;
    res[m].median_detection = checks_after ? double(median_detected[m]) / checks_after : 0;
    res[m].median_fp_per_10k = 10000.0 * median_false[m] / steps;
    res[m].check_us = 1e6 * check_seconds[m] / checks;
    res[m].link_detection = checks_after ? double(link_said[m]) / checks_after : 0;
    res[m].link_fp_per_10k = 10000.0 * link_false[m] / steps;
  }
  return res;
}

// What one check cost before find_stragglers sorted once: each rank's leave-one-out median of
// the work by copying and sorting the others (quadratic in the rank count), work only.
double quadratic_check_seconds(int n) {
  std::mt19937_64 rng(1);
  std::vector<double> work(static_cast<size_t>(n));
  for (double& w : work) w = 0.3 + 1e-3 * double(rng() % 100);
  const auto t0 = std::chrono::steady_clock::now();
  double sink = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    std::vector<double> others;
    others.reserve(work.size());
    for (size_t j = 0; j < work.size(); ++j)
      if (j != i) others.push_back(work[j]);
    std::sort(others.begin(), others.end());
    sink += others[others.size() / 2];
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sink > 0 ? s : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10000;
  const double sigma = argc > 3 ? std::atof(argv[3]) : 0.034;
  const int one = n * 3 / 10;                       // a rank in no particular place
  const int first = (n / kPerHost / 2) * kPerHost;  // the first rank of a host mid-job
  std::set<int> node;
  for (int r = first; r < first + kPerHost && r < n; ++r) node.insert(r);
  const std::vector<Scenario> scenarios = {
      {"clean (noise and hiccups only)", {}, 1.0, 1.0},
      {"one rank 30% slower", {one}, 1.3, 1.0},
      {"one rank 10% slower", {one}, 1.1, 1.0},
      {"a node (8 ranks) 30% slower", node, 1.3, 1.0},
      {"slow link: allreduce 3x on every rank", {}, 1.0, 3.0},
      // Intermittent: a step's length on a third of the steps, or 1 s on a tenth (a SIGSTOP
      // duty cycle's stops, each many steps long): 100 ms a step on average, 32% of the job.
      {"one rank stalls 300 ms on 1/3 of its steps", {one}, 1.0, 1.0, 1.0 / 3, 0.300},
      {"one rank stalls 1 s on 1/10 of its steps", {one}, 1.0, 1.0, 0.1, 1.0},
      // The one-off: every rank stalls 1 s now and then (4 stalls a check across the job).
      {"one-off 1 s stalls on 0.01% of rank-steps", {}, 1.0, 1.0, 0, 0, 1e-4, 1.0},
  };
  fmt::print(
      "{} ranks ({} per host), {} steps per scenario, per-step noise sigma {:.3f}, "
      "checks every {} steps on {}-step medians\n\n",
      n, kPerHost, steps, sigma, kWindow, kWindow);
  fmt::print(
      "| scenario | margin | detection | false positives / 10k steps | latency (steps) | "
      "one check | slow collectives said | said wrongly / 10k steps | detection, median alone | "
      "false positives, median alone |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  const std::vector<double> margins = {0.05, 0.1, 0.2};
  for (const auto& sc : scenarios) {
    const auto results = simulate(sc, n, steps, sigma, margins, 42);
    for (size_t m = 0; m < margins.size(); ++m) {
      const double margin = margins[m];
      const Result& r = results[m];
      fmt::print(
          "| {} | {:.2f} | {} | {:.1f} | {} | {:.0f} us | {} | {:.1f} | {} | {:.1f} |\n", sc.name,
          margin, sc.slow.empty() ? std::string("-") : fmt::format("{:.1f}%", 100 * r.detection),
          r.fp_per_10k,
          r.latency < 0 ? std::string(sc.slow.empty() ? "-" : "never")
                        : fmt::format("{:.0f}", r.latency),
          r.check_us,
          sc.link_factor != 1.0 ? fmt::format("{:.1f}%", 100 * r.link_detection) : std::string("-"),
          r.link_fp_per_10k,
          sc.slow.empty() ? std::string("-") : fmt::format("{:.1f}%", 100 * r.median_detection),
          r.median_fp_per_10k);
    }
  }
  fmt::print("\nthe quadratic leave-one-out (before): {:.1f} ms per check at {} ranks\n",
             1e3 * quadratic_check_seconds(n), n);
  return 0;
}
