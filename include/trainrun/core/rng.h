// Counter-based randomness: every random draw is a pure function of (seed, index), so data
// order, dropout masks and initialisation never depend on world size, threads or resume point.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace trainrun {

inline constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

// splitmix64's finaliser (Steele et al.): a bijective mix of 64 bits.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One splitmix64 step from state x.
constexpr uint64_t splitmix64(uint64_t x) {
  return mix64(x + kGoldenGamma);
}

inline uint64_t hash_combine(uint64_t a, uint64_t b) {
  return splitmix64(a ^ splitmix64(b));
}

inline uint64_t hash_string(std::string_view s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, then mixed
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return splitmix64(h);
}

// A small sequential generator (for initialisation and sampling), seeded from a hash.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64(state_++); }
  // Skips n draws of next() (the stream is a counter): normal() takes two, so a rank that
  // initialises only its shard of a tensor skips 2 x the elements before it.
  void skip(uint64_t n) { state_ += n; }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {  // Box-Muller: portable, unlike std::normal_distribution
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace trainrun
