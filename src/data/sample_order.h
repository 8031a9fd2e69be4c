// The arithmetic of sample orders, each a pure function of its key and index (no state, no
// table that grows with the run): a window at a hashed position, an epoch's shuffle, and the
// blend that interleaves the sources of a mixture. docs/data-format.md ("Sampling") states them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainrun {

// data.order windows: the k-th window of a source starts at hash(key, k) mod `starts` (the
// number of valid starts, tokens - seq_len). Drawn with replacement.
int64_t window_start(uint64_t key, int64_t k, int64_t starts);

// A keyed bijection of [0, n): a 4-round Feistel network on the smallest even number of bits
// that holds n, cycle-walked back into range (under 4 rounds of walking on average).
uint64_t permute(uint64_t key, uint64_t x, uint64_t n);

// data.order epochs for one source of n_windows windows (window w is tokens [w T, w T + T + 1)).
// Epoch e reads every window once: blocks of `block` consecutive windows in an order shuffled
// by (key, e), each block read front to back; the n_windows % block windows that fill no block
// come last, in place.
class EpochOrder {
 public:
  EpochOrder(uint64_t key, int64_t n_windows, int64_t block);
  int64_t windows() const { return n_; }
  // The window that the k-th sample of the source reads (epoch k / windows()).
  int64_t window(int64_t k) const;

 private:
  uint64_t key_;
  int64_t n_, block_, blocks_;
};

// The blend of a mixture: which source global sample j reads, and which of that source's
// samples it is (k: how many samples of the source come before j). Periodic: one period of
// kPeriod samples is dealt by the error-minimising rule (each sample goes to the source furthest
// behind its weight), so every prefix of the stream is within about one sample per source of its
// weights, and each period gives source s exactly share(s) samples (the weights in units of
// 1 / kPeriod, by largest remainder, at least 1 each).
class Blend {
 public:
  static constexpr int64_t kPeriod = 1 << 16;
  static constexpr size_t kMaxSources = 4096;
  explicit Blend(const std::vector<double>& weights);  // positive; at most kMaxSources

  struct Pick {
    uint32_t source;
    int64_t k;
  };
  Pick pick(int64_t j) const;
  size_t sources() const { return share_.size(); }
  int64_t share(size_t s) const { return share_[s]; }
  // How many of the samples [0, n) each source gives.
  std::vector<int64_t> counts(int64_t n) const;

 private:
  std::vector<int64_t> share_;  // samples of each source per period
  std::vector<uint32_t> slot_;  // source of each position in the period
  std::vector<uint32_t> rank_;  // its samples of that source earlier in the period
};

}  // namespace trainrun
