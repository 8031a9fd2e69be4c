// The built-in synthetic source (data.synthetic: markov): a seeded sparse Markov chain whose
// entropy rate is known exactly, so a run can print the lowest loss it could reach.
#pragma once

#include <cstdint>
#include <vector>

namespace trainrun {

class MarkovChain {
 public:
  // alphabet in [2, 256], order 1 or 2. Each context gets a few successors with random
  // probabilities, all drawn from seed; the chain is irreducible by construction.
  MarkovChain(int alphabet, int order, uint64_t seed);

  int alphabet() const { return alphabet_; }
  int order() const { return order_; }
  // sum over contexts c of pi(c) * H(next | c), in nats; pi is the stationary distribution.
  double entropy_rate() const { return entropy_rate_; }
  // pi over contexts (index = last symbol, or prev * alphabet + last for order 2).
  const std::vector<double>& stationary() const { return pi_; }
  // n symbols, a deterministic function of (chain, seed).
  std::vector<uint8_t> generate(int64_t n, uint64_t seed) const;

 private:
  static constexpr int kMaxSucc = 8;
  int alphabet_;
  int order_;
  int64_t contexts_;
  // Per context: kMaxSucc successor symbols and cumulative probabilities (unused slots have
  // cumulative 1 so the sampler never picks them).
  std::vector<uint8_t> succ_;
  std::vector<double> cum_;
  std::vector<double> pi_;
  double entropy_rate_ = 0;
};

}  // namespace trainrun
