#include "sample_order.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "trainrun/core/rng.h"

namespace trainrun {

int64_t window_start(uint64_t key, int64_t k, int64_t starts) {
  return static_cast<int64_t>(hash_combine(key, static_cast<uint64_t>(k)) %
                              static_cast<uint64_t>(starts));
}

uint64_t permute(uint64_t key, uint64_t x, uint64_t n) {
  if (n <= 1) return x;
  int half = 1;  // bits in each half of the Feistel block
  while (half < 32 && (uint64_t{1} << (2 * half)) < n) ++half;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  do {
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = hash_combine(key + round, right) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= n);  // cycle-walking: the walk from a value in range ends in range
  return x;
}

EpochOrder::EpochOrder(uint64_t key, int64_t n_windows, int64_t block)
    : key_(key),
      n_(n_windows),
      block_(std::clamp<int64_t>(block, 1, std::max<int64_t>(n_windows, 1))) {
  if (n_ < 1) throw std::invalid_argument("EpochOrder: a source needs at least one window");
  blocks_ = n_ / block_;
}

int64_t EpochOrder::window(int64_t k) const {
  const int64_t epoch = k / n_, i = k % n_;
  if (i >= blocks_ * block_) return i;  // the windows that fill no block
  const uint64_t epoch_key = hash_combine(key_, static_cast<uint64_t>(epoch));
  const auto b = static_cast<int64_t>(
      permute(epoch_key, static_cast<uint64_t>(i / block_), static_cast<uint64_t>(blocks_)));
  return b * block_ + i % block_;
}

Blend::Blend(const std::vector<double>& weights) {
  const size_t n = weights.size();
  if (n == 0 || n > kMaxSources)
    throw std::invalid_argument(fmt::format("Blend: {} sources (1 to {})", n, kMaxSources));
  double total = 0;
  for (double w : weights) {
    if (!(w > 0) || !std::isfinite(w)) throw std::invalid_argument("Blend: a weight is not > 0");
    total += w;
  }
  // Config validation refuses such weights; a sum of inf would make every share 0.
  if (!std::isfinite(total)) throw std::invalid_argument("Blend: the weights' sum is not finite");
  // Shares of the period by largest remainder, each at least one sample.
  share_.assign(n, 1);
  int64_t left = kPeriod - static_cast<int64_t>(n);
  std::vector<double> exact(n), remainder(n);
  for (size_t s = 0; s < n; ++s) {
    exact[s] = weights[s] / total * static_cast<double>(kPeriod - static_cast<int64_t>(n));
    const auto whole = static_cast<int64_t>(std::floor(exact[s]));
    share_[s] += whole;
    left -= whole;
    remainder[s] = exact[s] - static_cast<double>(whole);
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t i = 0; left > 0; i = (i + 1) % n, --left) ++share_[order[i]];

  // Deal the period: each position goes to the source furthest behind share * (i + 1) / period.
  // In integers: deficit_s = share_s * (i + 1) - taken_s * period.
  slot_.resize(kPeriod);
  rank_.resize(kPeriod);
  std::vector<int64_t> taken(n, 0);
  for (int64_t i = 0; i < kPeriod; ++i) {
    size_t best = 0;
    int64_t best_deficit = INT64_MIN;
    for (size_t s = 0; s < n; ++s) {
      const int64_t deficit = share_[s] * (i + 1) - taken[s] * kPeriod;
      if (deficit > best_deficit) best_deficit = deficit, best = s;
    }
    slot_[static_cast<size_t>(i)] = static_cast<uint32_t>(best);
    rank_[static_cast<size_t>(i)] = static_cast<uint32_t>(taken[best]++);
  }
  for (size_t s = 0; s < n; ++s)
    if (taken[s] != share_[s]) throw std::logic_error("Blend: a period missed its shares");
}

Blend::Pick Blend::pick(int64_t j) const {
  const int64_t period = j / kPeriod;
  const auto i = static_cast<size_t>(j % kPeriod);
  const uint32_t s = slot_[i];
  return {s, period * share_[s] + rank_[i]};
}

std::vector<int64_t> Blend::counts(int64_t n) const {
  std::vector<int64_t> out(share_.size());
  const int64_t periods = n / kPeriod;
  for (size_t s = 0; s < out.size(); ++s) out[s] = periods * share_[s];
  for (int64_t i = 0; i < n % kPeriod; ++i) ++out[slot_[static_cast<size_t>(i)]];
  return out;
}

}  // namespace trainrun
