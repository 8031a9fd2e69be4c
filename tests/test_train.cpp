// The trainer's components, each on its own: the health monitor's decisions, the checkpoint
// policy, the step reporter's MFU/ETA math, rows and straggler medians, and the data-parallel
// strategies on a one-rank communicator (tests/test_comm_mpi.cpp and the integration tests cover
// several ranks).
#include <doctest/doctest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../src/train/backend_choice.h"
#include "../src/train/batches.h"
#include "../src/train/checkpoint_policy.h"
#include "../src/train/comm_stream.h"
#include "../src/train/data_parallel.h"
#include "../src/train/evaluator.h"
#include "../src/train/faults.h"
#include "../src/train/health_monitor.h"
#include "../src/train/recovery.h"
#include "../src/train/run_end.h"
#include "../src/train/step_reporter.h"
#include "state_support.h"
#include "temp_dir.h"
#include "trainrun/backend/backend.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/comm/comm.h"
#include "trainrun/core/errors.h"
#include "trainrun/data/data.h"
#include "trainrun/model/model.h"
#include "trainrun/obs/metrics.h"

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

double number(const MetricRow& row, const std::string& key) {
  for (const auto& [k, v] : row)
    if (k == key) return std::get<double>(v);
  FAIL("no field " << key);
  return NAN;
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

TEST_CASE("health monitor: the bad-step count that keeps checkpoints from being written") {
  HealthMonitor h(fault_config(3, 1, 0));
  CHECK(h.bad_in_row() == 0);
  h.observe(NAN, 1.0);
  CHECK(h.bad_in_row() == 1);  // a streak has begun: no checkpoint now
  h.observe(1.0, INFINITY);
  CHECK(h.bad_in_row() == 2);
  h.observe(2.0, 1.0);
  CHECK(h.bad_in_row() == 0);  // a good step ends it
  h.observe(NAN, 1.0);
  h.observe(NAN, 1.0);
  CHECK(h.observe(NAN, 1.0).action == Action::roll_back);
  CHECK(h.bad_in_row() == 0);  // the rollback restores a good state
}

TEST_CASE("fault injection: inf sets the weights to +inf once, at its step") {
  ::setenv("TRAINRUN_FAULTS", "inf:step=3,nan:step=5", 1);
  Faults f = Faults::from_env(0, 0);
  CHECK_FALSE(f.diverge(2));
  CHECK(f.diverge(3));
  CHECK_FALSE(f.diverge(3));  // a rollback replaying step 3 gets past it
  CHECK(f.poison(5));
  CHECK_FALSE(f.poison(3));
  ::setenv("TRAINRUN_FAULTS", "inf:rank=1:step=3", 1);
  CHECK_FALSE(Faults::from_env(0, 0).diverge(3));
  CHECK(Faults::from_env(1, 0).diverge(3));
  CHECK_FALSE(Faults::from_env(1, 1).diverge(3));  // first attempt only, as every fault
  ::setenv("TRAINRUN_FAULTS", "infinity:step=3", 1);
  CHECK_THROWS_AS(Faults::from_env(0, 0), ConfigError);
  ::unsetenv("TRAINRUN_FAULTS");
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

TEST_CASE("step reporter: durations, MFU and ETA") {
  CHECK(format_duration(42) == "42s");
  CHECK(format_duration(59.6) == "1m00s");
  CHECK(format_duration(187) == "3m07s");
  CHECK(format_duration(3720) == "1h02m");
  CHECK(format_duration(NAN) == "?");
  CHECK(format_duration(-1) == "?");

  Throughput tp;
  tp.flops_per_step = 1e12;
  tp.peak_gflops = 100;
  tp.world = 2;
  tp.tokens_per_step = 1000;
  CHECK(tp.mfu(5.0) == doctest::Approx(1.0));  // 2e11 FLOP/s of 2 x 100 GFLOP/s
  CHECK(tp.mfu(10.0) == doctest::Approx(0.5));

  auto comm = make_local_communicator();
  StepReporterConfig cfg;
  cfg.total_steps = 20;
  cfg.log_every = 5;
  StepReporter r(cfg, tp, *comm);
  CHECK(r.eta_seconds(10) == 0);  // nothing measured yet
  r.step_done(2.0);
  r.step_done(4.0);  // moving average 0.9 x 2 + 0.1 x 4
  CHECK(r.eta_seconds(10) == doctest::Approx(22.0));
  CHECK(r.due(1));
  CHECK(r.due(5));
  CHECK(r.due(20));
  CHECK_FALSE(r.due(7));

  StepSummary s;
  s.loss = 1.25;
  s.lr = 3e-4;
  s.grad_norm = 0.5;
  s.times.total = 10.0;
  const std::string line = r.progress_line(10, s, r.mfu(s.times.total));
  CHECK(line ==
        "step 10/20 | loss 1.2500 | lr 3.00e-04 | norm 0.500 | 100 tok/s | MFU 50.0% | "
        "10000 ms/step | ETA 22s");
  // A terminal's width: the least wanted fields go first (norm, MFU, lr, ...), in that order.
  CHECK(r.progress_line(10, s, r.mfu(10.0), 200) == line);
  CHECK(r.progress_line(10, s, r.mfu(10.0), 79) ==
        "step 10/20 | loss 1.2500 | lr 3.00e-04 | 100 tok/s | 10000 ms/step | ETA 22s");
  CHECK(r.progress_line(10, s, r.mfu(10.0), 63) ==
        "step 10/20 | loss 1.2500 | 100 tok/s | 10000 ms/step | ETA 22s");
  CHECK(r.progress_line(10, s, r.mfu(10.0), 40) == "step 10/20 | loss 1.2500 | ETA 22s");
  CHECK(r.progress_line(10, s, r.mfu(10.0), 12) == "step 10/20 |");  // cut: never wider
  for (int w = 1; w < 120; ++w) CHECK(r.progress_line(10, s, r.mfu(10.0), w).size() <= size_t(w));
}

TEST_CASE("step reporter: metrics rows on rank 0") {
  testing::TempDir dir;
  auto comm = make_local_communicator();
  StepReporterConfig cfg;
  cfg.run_dir = dir.str();
  cfg.total_steps = 4;
  cfg.log_every = 2;
  Throughput tp;
  tp.flops_per_step = 4e9;
  tp.peak_gflops = 1;
  tp.tokens_per_step = 64;
  StepReporter r(cfg, tp, *comm);
  r.open_metrics(-1);

  StepSummary s;
  s.loss = 2.0;
  s.times.total = 8.0;
  s.times.comm_total = 1.0;
  s.times.comm_wait = 0.25;
  s.tokens_seen = 128;
  for (int64_t step = 1; step <= 3; ++step) r.report(step, s);
  r.eval(2, 1.5);
  r.event(3, MetricEvent::bad_step, {{"loss", 7.0}});

  auto train = read_metrics_jsonl(dir.str(), "train");
  REQUIRE(train.size() == 3);
  CHECK(number(train[0], "mfu") == doctest::Approx(0.5));
  CHECK(number(train[0], "tokens_per_sec") == doctest::Approx(8.0));
  CHECK(number(train[0], "comm_hidden") == doctest::Approx(0.75));
  CHECK(number(train[2], "tokens_seen") == 128);
  auto eval = read_metrics_jsonl(dir.str(), "eval");
  REQUIRE(eval.size() == 1);
  CHECK(number(eval[0], "val_loss") == 1.5);
  REQUIRE(read_metrics_jsonl(dir.str(), "event").size() == 1);

  r.reopen_metrics(2);  // a rollback to step 2 drops the rows past it
  CHECK(read_metrics_jsonl(dir.str(), "train").size() == 2);
  CHECK(read_metrics_jsonl(dir.str(), "event").empty());
}

TEST_CASE("straggler window: medians per named phase, then empty") {
  StragglerWindow w;
  CHECK(w.take_medians(0.2).step == 0);
  for (double x : {3.0, 1.0, 2.0}) {
    StepTimes t;
    t.total = 10 * x;
    t.data = x;
    t.forward = 2 * x;
    t.backward = 3 * x;
    t.comm_wait = 4 * x;
    t.comm_total = 100;  // not a straggler phase: the exposed wait is
    t.optimizer = 5 * x;
    w.add(t);
  }
  const RankTiming r = w.take_medians(0.2);
  CHECK(r.step == 20.0);
  CHECK(r.work == 12.0);
  for (int p = 0; p < kPhaseCount; ++p) {
    const std::string name = kPhaseNames[p];
    const double want = name == "data"       ? 2.0
                        : name == "forward"  ? 4.0
                        : name == "backward" ? 6.0
                        : name == "comm"     ? 8.0
                                             : 10.0;
    CHECK_MESSAGE(r.phases[p] == want, name);
  }
  CHECK(w.take_medians(0.2).step == 0);
}

TEST_CASE("straggler window: work is each step's time outside collectives, medianed per step") {
  // The link slowed mid-window (as in tests/multihost): 23 ms of work a step, then one step with
  // a 200 ms stall outside collectives while the wait was short. median(step) - median(comm)
  // would be 33 ms, 10 ms of work this rank never did each step, enough to name it a straggler.
  StragglerWindow w;
  const double comm[] = {0.002, 0.200, 0.210, 0.220, 0.050};
  const double work[] = {0.023, 0.023, 0.023, 0.023, 0.200};
  for (int i = 0; i < 5; ++i) {
    StepTimes t;
    t.comm_wait = comm[i];
    t.data = work[i];
    t.total = work[i] + comm[i];
    w.add(t);
  }
  const RankTiming r = w.take_medians(0.2);
  CHECK(r.step - r.phases[3] == doctest::Approx(0.033));
  CHECK(r.work == doctest::Approx(0.023));
  // The stall statistic leaves that one stall out (a plain mean would read 58 ms), so rank 0 is
  // named by neither test against the other rank's 23.4 ms.
  CHECK(r.stall_cost == 0);
  RankTiming other;
  other.rank = 1;
  other.work = 0.0234;
  RankTiming mine = r;
  mine.rank = 0;
  CHECK(find_stragglers({mine, other}, 0.2).empty());
}

TEST_CASE("straggler window: stalls count over this window and the one before") {
  // 3 ms steps, a 30 ms stall in data on one step of each window: each window alone holds one
  // stall (a hiccup), the two together a pattern. The medians are the usual step's.
  StragglerWindow w;
  auto window = [&](int stalled) {
    for (int i = 0; i < 5; ++i) {
      StepTimes t;
      t.data = i == stalled ? 0.0301 : 0.0001;
      t.forward = 0.001;
      t.backward = 0.0015;
      t.comm_wait = 0.0003;
      t.optimizer = 0.0002;
      t.total = t.data + t.forward + t.backward + t.comm_wait + t.optimizer;
      w.add(t);
    }
    return w.take_medians(0.2);
  };
  const RankTiming first = window(2);
  CHECK(first.work == doctest::Approx(0.0028));
  CHECK(first.stall_cost == 0);  // one stall: left out
  const RankTiming second = window(4);
  CHECK(second.work == doctest::Approx(0.0028));
  CHECK(second.stall_cost == doctest::Approx(0.030 / 9));  // the other counts
  CHECK(std::string(kPhaseNames[second.stall_phase]) == "data");
  // A window later the first stall is out of reach and the second alone is a hiccup again.
  CHECK(window(-1).stall_cost == 0);
}

namespace {

// A small parameter store with a decayed matrix and an undecayed bias, known gradients.
struct Params {
  std::unique_ptr<Backend> be = make_cpu_backend();
  ParamStore ps{*be};
  Params() {
    ps.declare("w", {3, 4}, Init::normal, 0.5f, true);
    ps.declare("b", {4}, Init::zeros, 0.0f, false);
    ps.allocate();
    ps.initialize(7);
    float* g = ps.grads().as<float>();
    for (int64_t i = 0; i < ps.numel(); ++i) g[i] = 0.1f * static_cast<float>(i - 7);
  }
  std::vector<float> values(const Tensor& t) const {
    const float* p = t.as<float>();
    return std::vector<float>(p, p + t.numel());
  }
  double grad_norm() const {
    // Straight from the buffer: GCC 12 at -O3 warns (free-nonheap-object, a false positive)
    // about a temporary vector here.
    const Tensor grads = ps.grads();
    const float* g = grads.as<float>();
    double s = 0;
    for (int64_t i = 0; i < grads.numel(); ++i) s += double(g[i]) * g[i];
    return std::sqrt(s);
  }
};

}  // namespace

TEST_CASE("data parallel on one rank: DDP and ZeRO-1 agree with plain AdamW") {
  auto comm = make_local_communicator();
  for (int zero : {0, 1}) {
    CAPTURE(zero);
    OptimizerConfig cfg;
    cfg.grad_clip = 0.5;  // below the gradients' norm: the update is clipped
    Params a, ref;
    const DeviceMesh mesh = DeviceMesh::flat(*comm);
    auto dp = DataParallel::make(zero, mesh, a.ps, cfg, nullptr);
    REQUIRE(dp->optimizer().pieces().size() == 1);
    CHECK(dp->optimizer().pieces()[0].begin == 0);
    CHECK(dp->optimizer().pieces()[0].end == a.ps.numel());
    CHECK_FALSE(static_cast<bool>(dp->grad_ready_hook()));  // one rank: nothing to overlap

    StepTimes t;
    dp->reduce_grads(t);
    const StepStats s = dp->reduce_stats(2.5, true, t);
    CHECK(s.loss == 2.5);
    CHECK(s.stop);
    CHECK(s.grad_norm == doctest::Approx(a.grad_norm()));
    REQUIRE(s.grad_norm > cfg.grad_clip);
    dp->update(1e-2, 1, s.grad_norm, t);
    CHECK(t.comm_wait == 0);  // no collective ran

    AdamW opt(ref.ps, cfg, {Shard{0, ref.ps.numel()}});
    ref.be->scale(ref.ps.grads(), cfg.grad_clip / (s.grad_norm + 1e-6));
    opt.step(ref.ps.params(), ref.ps.grads(), 1e-2, 1);
    CHECK(a.values(a.ps.params()) == ref.values(ref.ps.params()));
    Params untouched;
    CHECK(a.values(a.ps.params()) != untouched.values(untouched.ps.params()));

    // With one rank, the strategy saves all of its moments.
    const std::vector<float> m = testing::saved_flat(*dp, "optimizer/m");
    const std::vector<float> v = testing::saved_flat(*dp, "optimizer/v");
    CHECK(m == ref.values(opt.m()));
    CHECK(v == ref.values(opt.v()));

    // Through a checkpoint into a fresh strategy, and out again unchanged.
    testing::TempDir dir;
    {
      StateDict sd;
      dp->state_dict(sd);
      RankSnapshot snap;
      take_snapshot(sd, &snap);
      snap.values = values_of(TrainState{});
      Checkpointer ck(dir.str(), 0, false);
      ck.save(std::move(snap));
      ck.commit(0, 1);
    }
    Params b;
    auto restored = DataParallel::make(zero, mesh, b.ps, cfg, nullptr);
    TrainState state;
    restored->load_state_dict(*open_checkpoint(checkpoint_path(dir.str(), 0), &state));
    CHECK(testing::saved_flat(*restored, "optimizer/m") == m);
    CHECK(testing::saved_flat(*restored, "optimizer/v") == v);
  }
}

TEST_CASE("data parallel: no clipping below the limit, none when it is off") {
  auto comm = make_local_communicator();
  for (double clip : {0.0, 100.0}) {
    OptimizerConfig cfg;
    cfg.grad_clip = clip;
    Params a, ref;
    const DeviceMesh mesh = DeviceMesh::flat(*comm);
    auto dp = DataParallel::make(0, mesh, a.ps, cfg, nullptr);
    StepTimes t;
    const StepStats s = dp->reduce_stats(1.0, false, t);
    CHECK_FALSE(s.stop);
    dp->update(1e-2, 1, s.grad_norm, t);
    AdamW opt(ref.ps, cfg, {Shard{0, ref.ps.numel()}});
    opt.step(ref.ps.params(), ref.ps.grads(), 1e-2, 1);
    CHECK(a.values(a.ps.params()) == ref.values(ref.ps.params()));
  }
}

TEST_CASE("step reporter: an MFU above 100% is called a wrong peak, once") {
  std::ostringstream captured;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured)));
  auto comm = make_local_communicator();
  StepReporterConfig cfg;
  cfg.total_steps = 10;
  cfg.log_every = 1;
  cfg.console = true;
  Throughput tp;
  tp.flops_per_step = 4e9;
  tp.tokens_per_step = 64;
  tp.peak_gflops = 1;  // 4 GFLOP in 1 s on a 1 GFLOP/s peak: MFU 400%
  tp.peak_source = "measured now, 1024 GEMM";
  StepReporter r(cfg, tp, *comm);
  StepSummary s;
  s.times.total = 1.0;
  r.report(1, s);
  r.report(2, s);
  spdlog::set_default_logger(previous);
  const std::string out = captured.str();
  const std::string warning =
      "MFU 400% is above 100%: the sgemm peak it divides by (1.0 GFLOP/s, measured now, 1024 "
      "GEMM) is too low";
  const auto first = out.find(warning);
  CHECK(first != std::string::npos);
  CHECK(out.find(warning, first + 1) == std::string::npos);  // once, not every step
  CHECK(out.find("MFU 400.0%") != std::string::npos);        // the line itself still shows it
}

TEST_CASE("backend choice: cpu as asked, cuda or a reason with the fix, auto falls back") {
  // No plugin at this path: the CUDA backend is unusable, as on a machine without a GPU.
  REQUIRE(setenv("TRAINRUN_CUDA_PLUGIN", "/nonexistent/libtrainrun_cuda.so", 1) == 0);
  Experiment exp;
  exp.device = DeviceChoice::cpu;
  CHECK(choose_backend(exp, 0)->device() == Device::cpu);
  exp.device = DeviceChoice::automatic;
  CHECK(choose_backend(exp, 0)->device() == Device::cpu);
  exp.device = DeviceChoice::cuda;
  CHECK_THROWS_WITH_AS(choose_backend(exp, 0),
                       doctest::Contains("fix: run on a machine with an NVIDIA GPU"), DeviceError);
  unsetenv("TRAINRUN_CUDA_PLUGIN");
  // The CPU backend runs every op of a bf16 step.
  CHECK_NOTHROW(require_bf16(*make_cpu_backend()));
}

TEST_CASE("run end: a stop's exit code and a finished run's") {
  CHECK(stop_exit_code(SIGINT, 5, true, "runs/x", "") == kExitInterrupted);
  CHECK(stop_exit_code(SIGTERM, 5, true, "runs/x", "") == kExitResumeMe);
  CHECK(stop_exit_code(SIGUSR1, 5, false, "runs/x", "runs/x/checkpoints/step-0000004.h5") ==
        kExitResumeMe);
  CHECK(stop_exit_code(0, 5, true, "runs/x", "") == kExitResumeMe);  // agreed, not seen here
  std::string why;
  CHECK(end_exit_code(10, 1.5, "", "c", &why) == kExitOk);
  CHECK(why.empty());
  CHECK(end_exit_code(10, NAN, "", "c", &why) == kExitGaveUp);
  CHECK(why == "a non-finite loss (nan)");
  CHECK(end_exit_code(10, 1.5, "disk full", "", &why) == kExitGaveUp);
  CHECK(why == "no final checkpoint (disk full)");
}

TEST_CASE("recovery: bad steps counted and recorded; where a rollback goes, or giving up") {
  testing::TempDir dir;
  auto comm = make_local_communicator();
  StepReporterConfig cfg;
  cfg.run_dir = dir.str();
  cfg.total_steps = 10;
  StepReporter reporter(cfg, Throughput{}, *comm);
  reporter.open_metrics(-1);
  FaultToleranceConfig ft = fault_config(2, 1, 4.0);
  ft.rollback_lr_factor = 0.5;
  Recovery rec(ft, reporter);
  CHECK(rec.lr_scale() == 1.0);
  CHECK(rec.judge(1, 2.0, 1.0) == Action::proceed);
  CHECK(rec.judge(2, NAN, 1.0) == Action::skip);
  CHECK(rec.bad_in_row() == 1);
  CHECK(rec.judge(3, 2.0, INFINITY) == Action::roll_back);
  CHECK(rec.bad_steps_total() == 2);
  const auto events = read_metrics_jsonl(dir.str(), "event");
  REQUIRE(events.size() == 2);
  auto text = [](const MetricRow& row, const std::string& key) {
    for (const auto& [k, v] : row)
      if (k == key) return std::get<std::string>(v);
    return std::string("(none)");
  };
  CHECK(text(events[0], "event") == "bad_step");
  CHECK(number(events[0], "step") == 2);

  CHECK_FALSE(rec.plan_rollback(std::nullopt).has_value());  // nothing to go back to
  // Its state as a checkpoint saved it earlier: no bad step yet, the scale at 0.5.
  testing::ValueSource earlier(
      {{state_name::bad_steps_total, int64_t{0}}, {state_name::lr_scale, 0.5}});
  rec.load_state_dict(earlier);
  CHECK(rec.lr_scale() == 0.5);
  CHECK(rec.bad_steps_total() == 0);
  // Planned before the restore: the bad steps counted by then, and the scale lowered from 0.5.
  testing::ValueSource before_streak(
      {{state_name::bad_steps_total, int64_t{2}}, {state_name::lr_scale, 0.5}});
  rec.load_state_dict(before_streak);
  const auto rb = rec.plan_rollback(std::string("ck.h5"));
  REQUIRE(rb.has_value());
  CHECK(rb->file == "ck.h5");
  CHECK(rb->lr_scale == 0.25);
  CHECK(rb->bad_steps_total == 2);
  rec.load_state_dict(earlier);  // the restore puts back the checkpoint's values ...
  rec.rolled_back(3, 1, *rb);    // ... and the rollback keeps the count and lowers the scale
  CHECK(rec.bad_steps_total() == 2);
  CHECK(rec.lr_scale() == 0.25);
  CHECK(testing::saved_values(rec) ==
        std::vector<NamedValue>{{state_name::bad_steps_total, int64_t{2}},
                                {state_name::lr_scale, 0.25}});
  CHECK(read_metrics_jsonl(dir.str(), "event").size() == 3);
  // One rollback allowed: the next streak gives up.
  CHECK(rec.judge(2, NAN, 1.0) == Action::skip);
  CHECK(rec.judge(3, NAN, 1.0) == Action::give_up);

  FaultToleranceConfig zero = ft;
  zero.rollback_lr_factor = 0;  // a learning rate of 0 learns nothing
  CHECK_FALSE(Recovery(zero, reporter).plan_rollback(std::string("ck.h5")).has_value());
}

namespace {

Experiment small_experiment() {
  Experiment exp;
  exp.model.vocab_size = 16;
  exp.model.seq_len = 8;
  exp.model.n_layer = 1;
  exp.model.n_head = 2;
  exp.model.d_model = 16;
  exp.data.synthetic = "markov";
  exp.data.synthetic_tokens = 1 << 14;
  exp.train.batch_size = 4;
  exp.train.steps = 10;
  exp.train.eval_every = 4;
  exp.train.eval_steps = 2;
  return exp;
}

std::vector<int32_t> tokens(const int32_t* p, size_t n) {
  return std::vector<int32_t>(p, p + n);
}

}  // namespace

TEST_CASE("batches: every rank reads its own part of the one global batch") {
  const Experiment exp = small_experiment();
  const size_t seq = static_cast<size_t>(exp.model.seq_len);
  // One rank, micro 2 (two micro-batches a step) against two ranks, micro 1 and 2 each.
  Batches one(exp, 0, 1, 2), r0(exp, 0, 2, 1), r1(exp, 1, 2, 1);
  for (int64_t step : {0, 3}) {
    CAPTURE(step);
    for (int m = 0; m < 2; ++m) {
      one.prefetch(step, m);
      CHECK(one.next() >= 0);
      const auto x = tokens(one.x(), 2 * seq), y = tokens(one.y(), 2 * seq);
      // One rank's micro-batch m = samples 2m, 2m+1 of the step = ranks 0 and 1's m-th.
      r0.prefetch(step, m);
      r1.prefetch(step, m);
      r0.next();
      r1.next();
      auto both = tokens(r0.x(), seq);
      const auto second = tokens(r1.x(), seq);
      both.insert(both.end(), second.begin(), second.end());
      CHECK(both == x);
      CHECK(tokens(r0.y(), seq) == std::vector<int32_t>(y.begin(), y.begin() + long(seq)));
    }
  }
  // The cursor: where the world's micro-batches read so far end (the last was step 3's second).
  CHECK(one.samples_seen() == 4 * exp.train.batch_size);
  CHECK(r1.samples_seen() == one.samples_seen());
  CHECK(testing::saved_values(one) ==
        std::vector<NamedValue>{{state_name::samples_seen, int64_t{16}},
                                {state_name::seed, exp.seed}});
  Batches fresh(exp, 0, 1, 2);
  CHECK(fresh.samples_seen() == 0);
  testing::ValueSource saved(testing::saved_values(one));
  fresh.load_state_dict(saved);
  CHECK(fresh.samples_seen() == 16);
  Experiment other_seed = exp;
  other_seed.seed = exp.seed + 1;
  Batches other(other_seed, 0, 1, 2);
  CHECK_THROWS_WITH_AS(other.load_state_dict(saved), doctest::Contains("belongs to another run"),
                       CheckpointError);
  CHECK(one.seed(0, 0) != one.seed(0, 1));
  CHECK(r1.seed(0, 0) == Batches(exp, 0, 1, 1).seed(0, 1));  // the seed follows the sample
  one.fetch_val(1, 0);
  const auto v = tokens(one.x(), 2 * seq);
  one.fetch_val(1, 0);
  CHECK(tokens(one.x(), 2 * seq) == v);  // the same validation samples every time
}

namespace {

// The tokens of a whole step's global batch, as `world` ranks of `micro` samples read them.
std::vector<int32_t> global_batch(const Experiment& exp, int world, int64_t step) {
  const int micro = exp.train.batch_size / world;
  const size_t n = static_cast<size_t>(micro) * static_cast<size_t>(exp.model.seq_len);
  std::vector<int32_t> out;
  for (int r = 0; r < world; ++r) {
    Batches b(exp, r, world, micro);
    b.prefetch(step, 0);
    b.next();
    out.insert(out.end(), b.x(), b.x() + n);
  }
  return out;
}

}  // namespace

TEST_CASE("batches: a data.mix in epochs order reads the same global batch at any world size") {
  testing::TempDir tmp;
  Experiment exp = small_experiment();
  exp.data.synthetic.clear();
  for (int s = 0; s < 2; ++s) {
    std::vector<int32_t> toks(400);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * (s + 3)) % 16);
    const std::string path = tmp / (s == 0 ? "web.bin" : "code.bin");
    write_token_shard(path, toks, 16);
    MixSource m;
    m.path = path;
    m.weight = s == 0 ? 0.75 : 0.25;
    exp.data.mix.push_back(m);
  }
  REQUIRE(exp.data.order == DataOrder::automatic);  // epochs, for a mixture
  for (int64_t step : {0, 7, 30}) {
    CAPTURE(step);
    const auto one = global_batch(exp, 1, step);
    CHECK(global_batch(exp, 2, step) == one);
    CHECK(global_batch(exp, 4, step) == one);
    CHECK(global_batch(exp, 1, step + 1) != one);
  }
  // web: 360 training tokens = 44 windows of 8, read 3 in 4 samples (batch 4): its first epoch
  // ends within step 15, and the log says so once.
  Batches b(exp, 0, 1, 4);
  CHECK(b.train().epoch_samples(0) == 44);
  int said = 0;
  for (int64_t step = 0; step < 16; ++step)
    for (const auto& line : b.epochs_begun(step)) {
      CAPTURE(line);
      CHECK(line.find("source 'web' begins epoch 2: all 44 samples read") == 0);
      CHECK(step == 14);
      ++said;
    }
  CHECK(said == 1);
}

TEST_CASE("batches: validation reads the run's data (its seed's Markov chain), in its own order") {
  // A val stream keyed by another seed would read another chain: a loss that rises as the model
  // learns the training chain (the quick start's val loss went 5.6 -> 6.5 while train fell).
  const Experiment exp = small_experiment();
  const auto data = open_dataset(exp.data, Split::val, exp.model.vocab_size, exp.seed);
  Batches b(exp, 0, 1, 4);
  const int64_t T = exp.model.seq_len;
  std::vector<int64_t> starts;
  for (int64_t batch = 0; batch < 3; ++batch) {
    b.fetch_val(batch, 0);
    for (int i = 0; i < 4; ++i) {
      const auto at = b.val().place(batch * 4 + i);
      std::vector<int32_t> want(static_cast<size_t>(T));
      data->read(at.start, T, want.data());
      CHECK(tokens(b.x() + i * T, static_cast<size_t>(T)) == want);
      starts.push_back(at.start);
    }
  }
  // Its own order: not the windows training reads first.
  std::vector<int64_t> train_starts;
  for (int64_t j = 0; j < 12; ++j) train_starts.push_back(b.train().place(j).start);
  CHECK(starts != train_starts);
}

TEST_CASE("evaluator: when it is due, and the mean validation loss over its batches") {
  Experiment exp = small_experiment();
  auto comm = make_local_communicator();
  auto be = make_cpu_backend();
  auto model = build_model(exp.model, *be, 4, DType::f32);
  model->params().initialize(exp.seed);
  Batches batches(exp, 0, 1, 4);
  Evaluator ev(exp.train, 1, batches, *model, *comm, nullptr);
  CHECK_FALSE(ev.due(3));
  CHECK(ev.due(4));
  CHECK(ev.due(10));  // the last step
  const auto v = ev.run(4);
  REQUIRE(v.has_value());
  // By hand: the mean forward loss of validation batches 0 and 1.
  double sum = 0;
  for (int b = 0; b < 2; ++b) {
    batches.fetch_val(b, 0);
    model->set_batch(batches.x(), batches.y());
    sum += model->forward(false, 0);
  }
  CHECK(*v == doctest::Approx(sum / 2).epsilon(1e-12));
  CHECK(*v == doctest::Approx(std::log(16.0)).epsilon(0.1));  // an untrained model: ~ln(vocab)
  exp.train.eval_steps = 0;
  CHECK(std::isnan(*Evaluator(exp.train, 1, batches, *model, *comm, nullptr).run(4)));
}

TEST_CASE("CommStream: collectives run one at a time in submission order; errors reach the loop") {
  std::vector<int> ran;  // written by the stream's thread only, read after the waits
  {
    CommStream stream(nullptr);
    CommStream::Ticket last = 0;
    for (int i = 0; i < 50; ++i)
      last = stream.submit("job", [&ran, i] {
        if (i % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ran.push_back(i);
      });
    CHECK(last == 50);
    CHECK(stream.wait(last) >= 0);
    CHECK(stream.done(10));
    REQUIRE(ran.size() == 50);
    for (int i = 0; i < 50; ++i) CHECK(ran[static_cast<size_t>(i)] == i);
    CHECK(stream.take_busy_seconds() > 0);
  }
  {
    // What was submitted before the stream ends still runs: the other ranks expect it.
    int count = 0;
    {
      CommStream stream(nullptr);
      for (int i = 0; i < 5; ++i) stream.submit("job", [&count] { ++count; });
    }
    CHECK(count == 5);
  }
  {
    CommStream stream(nullptr);
    stream.submit("fails", [] { throw std::runtime_error("the peer is gone"); });
    const auto after = stream.submit("after", [] {});
    CHECK_THROWS_WITH_AS(stream.wait(after), "the peer is gone", std::runtime_error);
    CHECK_THROWS_AS(stream.done(1), std::runtime_error);  // broken for good
  }
}

namespace {

// Three steps of a 3-block GPT on one rank under ZeRO stage `zero`: the losses and the final
// weights (ParamStore's checksum, however they are held).
std::pair<std::vector<double>, uint64_t> train_tiny(int zero, bool reshard = true) {
  auto comm = make_local_communicator();
  const DeviceMesh mesh = DeviceMesh::flat(*comm);
  auto be = make_cpu_backend();
  ModelConfig cfg;
  cfg.type = ModelType::gpt;
  cfg.n_layer = 3;
  cfg.d_model = 16;
  cfg.n_head = 2;
  cfg.seq_len = 8;
  cfg.vocab_size = 13;
  cfg.dropout = 0.1;
  auto model = build_model(cfg, *be, 2, DType::f32, ActivationCheckpointing::none,
                           DataParallel::storage_for(zero));
  OptimizerConfig oc;
  auto dp = DataParallel::make(zero, mesh, model->params(), oc, nullptr, reshard);
  dp->initialize_weights(7);
  std::vector<int32_t> x(16), y(16);
  std::vector<double> losses;
  for (int step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<int32_t>((i * 5 + static_cast<size_t>(step)) % 13);
      y[i] = static_cast<int32_t>((i * 3 + 1) % 13);
    }
    model->params().begin_grads();
    dp->begin_step();
    model->set_batch(x.data(), y.data());
    losses.push_back(model->forward(true, static_cast<uint64_t>(step)));
    model->backward(1.0f / 16, static_cast<uint64_t>(step), dp->grad_ready_hook());
    if (zero < 2) model->params().zero_stale(0, model->params().numel());
    StepTimes t;
    dp->reduce_grads(t);
    const StepStats s = dp->reduce_stats(losses.back(), false, t);
    dp->update(1e-2, step, s.grad_norm, t);
    if (step == 2) losses.push_back(model->forward(false, 0));  // an evaluation between steps
  }
  return {losses, dp->checksum()};
}

}  // namespace

TEST_CASE("ZeRO-2 and ZeRO-3 on one rank: the model's brackets train as the flat buffers do") {
  const auto flat = train_tiny(0);
  CHECK(flat.first.size() == 4);
  // One rank: every unit whole in this rank's pieces, the same elementwise update, gradients
  // added into a zeroed shard: bit for bit the flat run, whether the forward's weights are
  // freed, kept for the backward, or never sharded (ZeRO-2).
  CHECK(train_tiny(2) == flat);
  CHECK(train_tiny(3) == flat);
  CHECK(train_tiny(3, false) == flat);
}
