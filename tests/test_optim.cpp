// AdamW over the flat buffer and the learning-rate schedule.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "trainrun/backend/backend.h"
#include "trainrun/model/params.h"
#include "trainrun/optim/optimizer.h"

using namespace trainrun;

TEST_CASE("learning rate: warmup, cosine, linear, constant") {
  OptimizerConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup_steps = 10;
  c.schedule = LrSchedule::cosine;
  CHECK(learning_rate(c, 0, 110) == doctest::Approx(0.1));
  CHECK(learning_rate(c, 9, 110) == doctest::Approx(1.0));
  CHECK(learning_rate(c, 10, 110) == doctest::Approx(1.0));
  CHECK(learning_rate(c, 60, 110) == doctest::Approx(0.55));  // halfway: mean of lr and min_lr
  CHECK(learning_rate(c, 110, 110) == doctest::Approx(0.1));
  c.schedule = LrSchedule::linear;
  CHECK(learning_rate(c, 60, 110) == doctest::Approx(0.55));
  CHECK(learning_rate(c, 35, 110) == doctest::Approx(1.0 - 0.25 * 0.9));
  c.schedule = LrSchedule::constant;
  CHECK(learning_rate(c, 100, 110) == doctest::Approx(1.0));
}

namespace {
// One AdamW step for one element, written out from the paper (Loshchilov & Hutter).
double reference_step(double p, double g, double lr, double wd, double b1, double b2, double eps) {
  const double m = (1 - b1) * g, v = (1 - b2) * g * g;
  const double mhat = m / (1 - b1), vhat = v / (1 - b2);
  return p - lr * (mhat / (std::sqrt(vhat) + eps) + wd * p);
}
}  // namespace

TEST_CASE("AdamW: decay only where declared, and a ZeRO shard updates only its range") {
  auto be = make_cpu_backend();
  ParamStore ps(*be, DType::f64);
  ps.declare("w", {2, 3}, Init::normal, 1.0f, true);
  ps.declare("b", {3}, Init::zeros, 0.0f, false);
  ps.declare("w2", {4}, Init::normal, 1.0f, true);
  ps.allocate();
  ps.initialize(3);
  double* p = ps.params().as<double>();
  double* g = ps.grads().as<double>();
  for (int i = 0; i < 13; ++i) {
    p[i] = 0.1 * (i + 1);
    g[i] = 0.05 * (i - 6);
  }
  const std::vector<double> p0(p, p + 13);
  OptimizerConfig c;
  c.betas = {0.9, 0.95};
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  // The whole buffer, one shard (ZeRO-1), and two pieces packed together (ZeRO-2/3's slices of
  // two units), whose weights and gradients the caller packs as the moments are.
  using Pieces = std::vector<Shard>;
  for (const Pieces& pieces : {Pieces{{0, 13}}, Pieces{{4, 11}}, Pieces{{1, 3}, {7, 12}}}) {
    std::vector<double> pp, gg;
    for (const Shard& s : pieces)
      for (int64_t i = s.begin; i < s.end; ++i) {
        pp.push_back(p0[static_cast<size_t>(i)]);
        gg.push_back(g[i]);
      }
    const auto n = static_cast<int64_t>(pp.size());
    AdamW opt(ps, c, pieces);
    opt.step(Tensor(pp.data(), DType::f64, Device::cpu, {n}),
             Tensor(gg.data(), DType::f64, Device::cpu, {n}), 0.01, 1);
    CHECK(opt.numel() == n);
    CHECK(opt.m().numel() == n);
    size_t k = 0;
    for (const Shard& s : pieces)
      for (int64_t i = s.begin; i < s.end; ++i, ++k) {
        const bool decay = i < 6 || i >= 9;
        CHECK(pp[k] == doctest::Approx(reference_step(p0[static_cast<size_t>(i)], g[i], 0.01,
                                                      decay ? 0.1 : 0.0, 0.9, 0.95, 1e-8))
                           .epsilon(1e-6));
      }
  }
}

TEST_CASE("ParamStore checksum: equal for bit-identical weights, different after one bit") {
  auto be = make_cpu_backend();
  auto store = [&](uint64_t seed) {
    auto ps = std::make_unique<ParamStore>(*be);
    ps->declare("w", {5, 3}, Init::normal, 0.02f, true);
    ps->allocate();
    ps->initialize(seed);
    return ps;
  };
  auto a = store(1), b = store(1), c = store(2);
  CHECK(a->checksum() == b->checksum());
  CHECK(a->checksum() != c->checksum());
  uint32_t bits;
  float* w = b->params().as<float>();
  std::memcpy(&bits, &w[7], 4);
  bits ^= 1u;  // the last bit of one weight
  std::memcpy(&w[7], &bits, 4);
  CHECK(a->checksum() != b->checksum());
}
