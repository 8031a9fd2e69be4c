// The trainer's components, each on its own: the health monitor's decisions and the checkpoint
// policy.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "../src/train/checkpoint_policy.h"
#include "../src/train/health_monitor.h"

using namespace trainrun;
using Action = HealthMonitor::Action;

namespace {

FaultToleranceConfig fault_config(int max_bad_steps, int max_rollbacks, double spike_zscore) {
  FaultToleranceConfig c;
  c.max_bad_steps = max_bad_steps;
  c.max_rollbacks = max_rollbacks;
  c.spike_zscore = spike_zscore;
  return c;
}

}  // namespace

TEST_CASE("health monitor: bad steps are skipped, then rolled back, then given up") {
  HealthMonitor h(fault_config(3, 1, 0));
  CHECK(HealthMonitor::finite(2.0, 1.0));
  CHECK_FALSE(HealthMonitor::finite(NAN, 1.0));
  CHECK_FALSE(HealthMonitor::finite(2.0, INFINITY));

  CHECK(h.observe(2.0, 1.0).action == Action::proceed);
  auto v = h.observe(NAN, 1.0);
  CHECK(v.action == Action::skip);
  CHECK(v.bad_in_row == 1);
  CHECK(h.observe(2.0, NAN).bad_in_row == 2);
  v = h.observe(NAN, NAN);
  CHECK(v.action == Action::roll_back);
  CHECK(v.bad_in_row == 3);

  h.rolled_back();
  CHECK(h.rollbacks() == 1);
  // The count starts afresh after a rollback, and a good step resets it.
  CHECK(h.observe(NAN, 1.0).bad_in_row == 1);
  CHECK(h.observe(2.0, 1.0).action == Action::proceed);
  CHECK(h.observe(NAN, 1.0).bad_in_row == 1);
  CHECK(h.observe(NAN, 1.0).action == Action::skip);
  CHECK(h.observe(NAN, 1.0).action == Action::give_up);  // the one rollback is used up
}

TEST_CASE("health monitor: a loss spike is judged against the last 50 good losses") {
  HealthMonitor h(fault_config(5, 2, 6));
  for (int i = 0; i < 9; ++i) CHECK_FALSE(h.observe(1.0 + 0.1 * (i % 2), 1.0).spike.has_value());
  CHECK_FALSE(h.observe(100.0, 1.0).spike.has_value());  // too few losses (9) to judge yet

  HealthMonitor g(fault_config(5, 2, 6));
  for (int i = 0; i < 10; ++i) g.observe(100.0, 1.0);  // dropped once 50 newer ones are in
  for (int i = 0; i < 50; ++i) g.observe(1.0 + 0.1 * (i % 2), 1.0);
  g.observe(NAN, 1.0);  // a bad step does not enter the window
  const auto v = g.observe(1.5, 1.0);
  REQUIRE(v.spike.has_value());
  CHECK(v.action == Action::proceed);  // a warning only
  CHECK(v.spike->window == 50);
  CHECK(v.spike->mean == doctest::Approx(1.05));
  CHECK(v.spike->zscore == doctest::Approx(9.0));
  CHECK_FALSE(g.observe(1.1, 1.0).spike.has_value());

  HealthMonitor off(fault_config(5, 2, 0));  // spike_zscore 0: never
  for (int i = 0; i < 20; ++i) off.observe(1.0 + 0.1 * (i % 2), 1.0);
  CHECK_FALSE(off.observe(1000.0, 1.0).spike.has_value());
}

TEST_CASE("checkpoint policy: every N, the last step, and a stop request") {
  const CheckpointPolicy p(3, 10);
  std::vector<int64_t> saved;
  for (int64_t s = 1; s <= 10; ++s)
    if (p.save_after(s, false)) saved.push_back(s);
  CHECK(saved == std::vector<int64_t>{3, 6, 9, 10});
  CHECK(p.save_after(4, true));

  const CheckpointPolicy end_only(0, 10);
  CHECK_FALSE(end_only.save_after(3, false));
  CHECK(end_only.save_after(10, false));
  CHECK(end_only.save_after(7, true));
}
