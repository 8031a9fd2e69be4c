// The CPU backend's test kit, shared by the op tests (test_cpu_ops.cpp, test_llama_ops.cpp):
// host views over std::vector, a seeded Rng, and the finite-difference gradient check in double
// that proves every backward op (and that it accumulates). Header-only; one CPU backend per test
// binary (be()).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "trainrun/backend/backend.h"

namespace trainrun::testing {

inline Backend& be() {
  static std::unique_ptr<Backend> b = make_cpu_backend();
  return *b;
}

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::f64;
  else
    return DType::i32;
}

template <class T>
Tensor view(std::vector<T>& v, std::initializer_list<int64_t> shape) {
  Tensor t(v.data(), dtype_of<T>(), Device::cpu, shape);
  REQUIRE(t.numel() <= static_cast<int64_t>(v.size()));
  return t;
}

struct Rng {
  std::mt19937_64 g{12345};
  std::vector<double> vec(size_t n, double lo = -1, double hi = 1) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<double> v(n);
    for (double& x : v) x = u(g);
    return v;
  }
  std::vector<int32_t> ids(size_t n, int32_t limit) {
    std::uniform_int_distribution<int32_t> u(0, limit - 1);
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = u(g);
    return v;
  }
};

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}
template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---------------------------------------------------------------------------------------------
// Finite-difference gradient check, in double.
// L = sum(out * R) with random R (or R = const for ops whose backward takes a scalar scale).
// Central differences with eps = 1e-6 have truncation error ~eps^2 and rounding error
// ~1e-16 |L| / eps ~ 1e-9 here, so the analytic and numeric gradients must agree to
//   |analytic - numeric| <= 1e-6 * max(1, |analytic|, |numeric|)
// (relative for large gradients, absolute 1e-6 for small ones): ~1000x above the expected noise
// and far below any real bug.
// Grads start from random values G0, so the check also proves the backward ACCUMULATES:
// one call must give G0 + g and a second call G0 + 2g.
struct GradCase {
  std::vector<std::vector<double>*> inputs;  // perturbed one element at a time
  std::vector<std::vector<double>*> grads;   // grads[k] is dL/d inputs[k]
  std::vector<double>* out = nullptr;
  std::function<void()> forward;
  std::function<void(std::vector<double>& dout)> backward;
  double uniform_dout = 0;  // nonzero: R is this constant (cross-entropy's scale)
  bool accumulates = true;  // false: backward overwrites its gradient (cross-entropy)
};

inline constexpr double kFdEps = 1e-6;
inline constexpr double kFdTol = 1e-6;

inline double check_gradients(GradCase& c, Rng& rng) {
  REQUIRE(c.inputs.size() == c.grads.size());
  c.forward();
  std::vector<double> R = c.uniform_dout != 0 ? std::vector<double>(c.out->size(), c.uniform_dout)
                                              : rng.vec(c.out->size());
  std::vector<std::vector<double>> g0;
  for (auto* g : c.grads) {
    *g = rng.vec(g->size());
    g0.push_back(*g);
  }
  c.backward(R);
  std::vector<std::vector<double>> analytic;
  for (size_t k = 0; k < c.grads.size(); ++k) {
    std::vector<double> a = *c.grads[k];
    if (c.accumulates)
      for (size_t i = 0; i < a.size(); ++i) a[i] -= g0[k][i];
    analytic.push_back(a);
  }
  c.backward(R);
  for (size_t k = 0; k < c.grads.size(); ++k)
    for (size_t i = 0; i < analytic[k].size(); ++i) {
      const double expect = c.accumulates ? g0[k][i] + 2 * analytic[k][i] : analytic[k][i];
      REQUIRE((*c.grads[k])[i] == doctest::Approx(expect).epsilon(1e-12));
    }

  double worst = 0;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    std::vector<double>& x = *c.inputs[k];
    for (size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i];
      x[i] = x0 + kFdEps;
      c.forward();
      const double lp = dot(*c.out, R);
      x[i] = x0 - kFdEps;
      c.forward();
      const double lm = dot(*c.out, R);
      x[i] = x0;
      const double num = (lp - lm) / (2 * kFdEps), ana = analytic[k][i];
      const double err = std::abs(num - ana) / std::max({1.0, std::abs(num), std::abs(ana)});
      worst = std::max(worst, err);
      if (err > kFdTol) {
        INFO("input " << k << " element " << i << ": analytic " << ana << " numeric " << num);
        CHECK(err <= kFdTol);
      }
    }
  }
  c.forward();
  return worst;
}

// Pushes values away from a kink (relu at 0) so central differences never straddle it.
inline void away_from_zero(std::vector<double>& v) {
  for (double& x : v) x = x < 0 ? x - 0.05 : x + 0.05;
}

}  // namespace trainrun::testing
