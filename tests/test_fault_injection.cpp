// Fault injection from outside the step loop (src/train/fault_injection.h, faulty_backend.h):
// without TRAINRUN_FAULTS the trainer gets the real backend itself; with it, nan poisons the
// gradients of exactly the step it names, at their norm, and inf sets every weight to +inf at the
// synchronize that ends its step, once.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "../src/train/fault_injection.h"
#include "../src/train/faulty_backend.h"
#include "trainrun/backend/backend.h"
#include "trainrun/model/params.h"

using namespace trainrun;

namespace {

// TRAINRUN_FAULTS for one test case.
struct FaultsEnv {
  explicit FaultsEnv(const char* spec) { ::setenv("TRAINRUN_FAULTS", spec, 1); }
  ~FaultsEnv() { ::unsetenv("TRAINRUN_FAULTS"); }
};

void declare(ParamStore& ps) {
  ps.declare("w", {3, 4}, Init::normal, 0.5f, true);
  ps.declare("b", {4}, Init::zeros, 0.0f, false);
  ps.allocate();
  ps.initialize(7);
}

bool all(const Tensor& t, bool (*pred)(float)) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::bf16) {
    const auto* p = t.as<uint16_t>();
    for (size_t i = 0; i < v.size(); ++i) {
      const uint32_t bits = uint32_t{p[i]} << 16;
      std::memcpy(&v[i], &bits, 4);
    }
  } else {
    const float* p = t.as<float>();
    v.assign(p, p + t.numel());
  }
  for (const float x : v)
    if (!pred(x)) return false;
  return true;
}
bool finite(float x) {
  return std::isfinite(x);
}
bool is_nan(float x) {
  return std::isnan(x);
}
bool plus_inf(float x) {
  return std::isinf(x) && x > 0;
}

struct OpLog : OpObserver {
  std::vector<Op> ops;
  void op_done(Op op, double, double, OpClock) override { ops.push_back(op); }
};

}  // namespace

TEST_CASE("without a fault for this rank the trainer gets the real backend, unwrapped") {
  ::unsetenv("TRAINRUN_FAULTS");
  for (const char* spec : {"", "nan:rank=1:step=2", "kill:step=2:attempt=1"}) {
    const FaultsEnv env(spec);
    FaultInjector f;
    f.load(0, 0);
    CHECK_FALSE(f.active());
    auto be = make_cpu_backend();
    Backend* real = be.get();
    auto got = f.wrap(std::move(be));
    CHECK(got.get() == real);
    f.on_step(2);  // nothing to do, and nothing done
  }
  const FaultsEnv env("nan:step=2");
  FaultInjector f;
  f.load(0, 0);
  CHECK(f.active());
  CHECK(dynamic_cast<FaultyBackend*>(f.wrap(make_cpu_backend()).get()) != nullptr);
}

TEST_CASE("nan poisons the gradients of exactly the step it names, at their norm") {
  const FaultsEnv env("nan:step=3");
  FaultInjector f;
  f.load(0, 0);
  auto be = f.wrap(make_cpu_backend());
  ParamStore ps{*be};
  declare(ps);
  f.watch({ps.params(), ps.grads(), ps.compute_params()});
  std::vector<float> other_data(5, 2.0f);
  const Tensor other(other_data.data(), DType::f32, Device::cpu, {5});
  for (int64_t nth = 1; nth <= 5; ++nth) {
    CAPTURE(nth);
    f.on_step(nth);
    be->fill(ps.grads(), 0.5);
    CHECK(be->sum(ps.grads()) == doctest::Approx(0.5 * static_cast<double>(ps.numel())));
    CHECK(all(ps.grads(), finite));         // a plain sum is not the norm
    CHECK(be->sum_squares(other) == 20.0);  // nor is a norm of anything but the gradients
    const double norm2 = be->sum_squares(ps.grads().slice(4, {8}));  // a rank's shard of them
    if (nth == 3) {
      CHECK(std::isnan(norm2));
      CHECK(all(ps.grads(), is_nan));  // every gradient, not only the shard the norm read
    } else {
      CHECK(norm2 == 8 * 0.25);
      CHECK(all(ps.grads(), finite));
    }
    CHECK(all(ps.params(), finite));
  }
}

TEST_CASE("inf sets every weight to +inf at the synchronize that ends its step, once") {
  const FaultsEnv env("inf:step=2");
  FaultInjector f;
  f.load(0, 0);
  auto be = f.wrap(make_cpu_backend());
  ParamStore ps{*be, DType::bf16};  // the compute copy goes +inf with the masters
  declare(ps);
  f.watch({ps.params(), ps.grads(), ps.compute_params()});
  f.on_step(1);
  be->synchronize();
  CHECK(all(ps.params(), finite));
  f.on_step(2);
  be->fill(ps.grads(), 1.0);  // the step's ops run as usual until its end
  CHECK(all(ps.params(), finite));
  be->synchronize();
  CHECK(all(ps.params(), plus_inf));
  CHECK(all(ps.compute_params(), plus_inf));
  CHECK(all(ps.grads(), finite));
  // A rollback that replays step 2 gets past it.
  ps.initialize(7);
  f.on_step(2);
  be->synchronize();
  CHECK(all(ps.params(), finite));
}

TEST_CASE("a wrapped backend's ops still reach the profiler") {
  const FaultsEnv env("nan:step=9");
  FaultInjector f;
  f.load(0, 0);
  auto be = f.wrap(make_cpu_backend());
  std::vector<float> x(4, 1.0f);
  OpLog log;
  be->set_op_observer(&log);
  be->fill(Tensor(x.data(), DType::f32, Device::cpu, {4}), 3.0);
  CHECK(be->sum(Tensor(x.data(), DType::f32, Device::cpu, {4})) == 12.0);
  be->set_op_observer(nullptr);  // tells the observer what it has not been told
  CHECK(log.ops == std::vector<Op>{Op::fill, Op::sum});
}
