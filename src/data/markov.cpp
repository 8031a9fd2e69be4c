// A sparse random Markov chain over bytes with an exactly known entropy rate.
#include "trainrun/data/markov.h"

#include <cmath>
#include <stdexcept>

#include "hash.h"

namespace trainrun {

namespace {

// Uniform double in [0, 1) from the top 53 bits.
double unit(uint64_t x) {
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

}  // namespace

MarkovChain::MarkovChain(int alphabet, int order, uint64_t seed)
    : alphabet_(alphabet), order_(order) {
  if (alphabet < 2 || alphabet > 256)
    throw std::invalid_argument("MarkovChain: alphabet not in [2, 256]");
  if (order != 1 && order != 2) throw std::invalid_argument("MarkovChain: order must be 1 or 2");
  const int A = alphabet;
  contexts_ = order == 1 ? A : int64_t{A} * A;
  succ_.assign(contexts_ * kMaxSucc, 0);
  cum_.assign(contexts_ * kMaxSucc, 1.0);
  std::vector<double> entropy(contexts_);

  SplitMix64 rng(seed ^ 0x6d61726b6f76ULL);  // "markov": keeps it apart from the loader's stream
  for (int64_t c = 0; c < contexts_; ++c) {
    const int last = static_cast<int>(c % A);
    const int older = static_cast<int>(c / A);
    // Guaranteed successors make the chain irreducible whatever the random draw: order 1 walks
    // the cycle s -> s+1; order 2 has (a,b)->(b,a) and (a,b)->(b,a+1), whose composition moves
    // (a,b) to (a+1,b), so every context reaches every other.
    int forced[2];
    int nforced = 0;
    if (order == 1) {
      forced[nforced++] = (last + 1) % A;
    } else {
      forced[nforced++] = older;
      if ((older + 1) % A != older) forced[nforced++] = (older + 1) % A;
    }
    const int want = std::min(A, 4 + static_cast<int>(rng.next() % 5));  // 4..8 successors
    uint8_t* s = &succ_[c * kMaxSucc];
    int k = 0;
    for (int i = 0; i < nforced; ++i) s[k++] = static_cast<uint8_t>(forced[i]);
    while (k < want) {
      const auto cand = static_cast<uint8_t>(rng.next() % A);
      bool dup = false;
      for (int i = 0; i < k; ++i) dup |= s[i] == cand;
      if (!dup) s[k++] = cand;
    }
    // Dirichlet(1) weights: uneven enough that the entropy sits well below log(k).
    double w[kMaxSucc];
    double total = 0;
    for (int i = 0; i < k; ++i) {
      w[i] = -std::log(1.0 - unit(rng.next()));
      total += w[i];
    }
    double acc = 0, h = 0;
    double* cum = &cum_[c * kMaxSucc];
    for (int i = 0; i < k; ++i) {
      const double p = w[i] / total;
      if (p > 0) h -= p * std::log(p);
      acc += p;
      cum[i] = acc;
    }
    cum[k - 1] = 1.0;                                 // rounding must not leave a gap at the top
    for (int i = k; i < kMaxSucc; ++i) cum[i] = 2.0;  // never selected
    entropy[c] = h;
  }

  // Stationary distribution by power iteration on the lazy chain (1-a) I + a P: the same
  // stationary distribution, and aperiodic even if P happens to be periodic.
  constexpr double kLazy = 0.75;
  std::vector<double> pi(contexts_, 1.0 / static_cast<double>(contexts_)), nxt(contexts_);
  for (int it = 0; it < 200000; ++it) {
    for (int64_t c = 0; c < contexts_; ++c) nxt[c] = (1 - kLazy) * pi[c];
    for (int64_t c = 0; c < contexts_; ++c) {
      const double mass = kLazy * pi[c];
      const uint8_t* s = &succ_[c * kMaxSucc];
      const double* cum = &cum_[c * kMaxSucc];
      const int64_t base = order == 1 ? 0 : (c % A) * A;
      double prev = 0;
      for (int i = 0; i < kMaxSucc && cum[i] <= 1.0; ++i) {
        nxt[base + s[i]] += mass * (cum[i] - prev);
        prev = cum[i];
      }
    }
    double diff = 0, sum = 0;
    for (int64_t c = 0; c < contexts_; ++c) {
      diff += std::fabs(nxt[c] - pi[c]);
      sum += nxt[c];
    }
    for (int64_t c = 0; c < contexts_; ++c) pi[c] = nxt[c] / sum;
    if (diff < 1e-13) break;
  }
  pi_ = std::move(pi);
  double rate = 0;
  for (int64_t c = 0; c < contexts_; ++c) rate += pi_[c] * entropy[c];
  entropy_rate_ = rate;
}

std::vector<uint8_t> MarkovChain::generate(int64_t n, uint64_t seed) const {
  std::vector<uint8_t> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  SplitMix64 rng(seed ^ 0x73747265616dULL);  // "stream"
  const int A = alphabet_;
  int64_t ctx = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(contexts_));
  for (int64_t t = 0; t < n; ++t) {
    const double u = unit(rng.next());
    const uint8_t* s = &succ_[ctx * kMaxSucc];
    const double* cum = &cum_[ctx * kMaxSucc];
    int i = 0;
    while (i < kMaxSucc - 1 && u >= cum[i]) ++i;
    const uint8_t sym = s[i];
    out[t] = sym;
    ctx = order_ == 1 ? sym : (ctx % A) * A + sym;
  }
  return out;
}

}  // namespace trainrun
