// The training step loop. One process = one rank; the data goes one way:
// experiment -> (communicator, backend, model, data, components) -> steps.
// Each decision belongs to a component: DataParallel (how the ranks share a step: DDP or
// ZeRO-1), HealthMonitor (bad steps, rollbacks, loss spikes), StepReporter (metrics, console,
// MFU, stragglers) and CheckpointPolicy (when to save). Trainer wires them together, and run()
// reads as the sequence of a step.
#include "trainrun/trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <omp.h>
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "checkpoint_policy.h"
#include "data_parallel.h"
#include "faults.h"
#include "health_monitor.h"
#include "logging.h"
#include "step_phase.h"
#include "step_reporter.h"
#include "trainrun/backend.h"
#include "trainrun/checkpoint.h"
#include "trainrun/clock.h"
#include "trainrun/comm.h"
#include "trainrun/config.h"
#include "trainrun/cuda_plugin.h"
#include "trainrun/data.h"
#include "trainrun/errors.h"
#include "trainrun/flops.h"
#include "trainrun/launch.h"
#include "trainrun/model.h"
#include "trainrun/optimizer.h"
#include "trainrun/rng.h"
#include "trainrun/stop_signals.h"
#include "trainrun/trace.h"
#include "watchdog.h"

namespace fs = std::filesystem;

namespace trainrun {

namespace {

std::unique_ptr<Backend> choose_backend(const Experiment& exp, int local_rank) {
  if (exp.device == DeviceChoice::cpu) return make_cpu_backend();
  std::string why;
  auto be = make_cuda_backend(local_rank, &why);
  if (be) return be;
  if (exp.device == DeviceChoice::cuda)
    throw DeviceError(
        "device: cuda was requested but CUDA is not usable here: " + why +
        "\n  fix: run on a machine with an NVIDIA GPU, or --set device=cpu (or auto)");
  spdlog::info("device: auto -> cpu ({})", why);
  return make_cpu_backend();
}

// What train.precision=bf16 asks of the backend (docs/cuda.md, "bf16 mixed precision"): the ops
// the models run on bf16 activations (AdamW and the gradient norm run on the f32 masters), the
// cast that refreshes the compute copy, and f32 parameter gradients beside bf16 activations.
void require_bf16(const Backend& be) {
  std::string missing;
  auto lacks = [&](const std::string& what) { missing += (missing.empty() ? "" : ", ") + what; };
  for (int i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    if (op == Op::copy || op == Op::adamw || op == Op::sum_squares) continue;
    if (!be.supports(op, DType::bf16)) lacks(std::string(op_name(op)) + " in bf16");
  }
  if (!be.supports(Op::cast, DType::f32)) lacks("the f32 -> bf16 cast");
  if (!be.f32_param_grads_with_bf16())
    lacks("f32 parameter gradients beside bf16 activations (Backend::f32_param_grads_with_bf16)");
  if (!missing.empty())
    throw ConfigError(
        fmt::format("train.precision=bf16: the {} backend lacks {}: use --set train.precision=fp32",
                    be.describe(), missing));
}

int restart_count() {
  const char* restarts = std::getenv("TRAINRUN_RESTART_COUNT");
  if (!restarts) restarts = std::getenv("SLURM_RESTART_COUNT");
  return restarts ? std::atoi(restarts) : 0;
}

// One optimizer step as the loop sees it.
struct StepResult {
  StepTimes times;
  double loss = NAN, grad_norm = NAN;  // agreed by every rank
  bool stop = false;                   // a stop request every rank agreed on (several ranks)
};

// Under --profile, every backend op of a traced step becomes a span of category "op", which the
// tracer also sums per op (trace/ops-rank-N.txt): where the step's time goes, op by op.
class OpSpans : public OpObserver {
 public:
  explicit OpSpans(Tracer& t) : t_(t) {}
  void op_done(Op op, double t0, double t1) override { t_.span(op_name(op), "op", t0, t1); }

 private:
  Tracer& t_;
};

class Trainer {
 public:
  Trainer(const Experiment& exp, const RunOptions& opts)
      : exp_(exp),
        opts_(opts),
        health_(exp.fault_tolerance),
        checkpoint_policy_(exp.checkpoint.every, exp.train.steps) {}
  int run();

 private:
  void setup();
  void setup_device();
  void setup_model();
  void setup_data();
  void setup_reporter();
  void log_setup() const;
  void start();
  StepResult train_step(int64_t step, double lr);
  double accumulate_gradients(int64_t step, StepTimes& t);
  HealthMonitor::Action judge(int64_t step, const StepResult& r);
  bool rollback(int64_t* step);
  void advance(int64_t* step, double seconds);
  std::optional<double> evaluate();  // nullopt: abandoned for a stop request
  std::string save_checkpoint(int64_t step, double* seconds);
  std::string try_checkpoint(int64_t step);
  std::optional<CheckpointData> snapshot(int64_t step);
  std::string try_sharded_checkpoint(int64_t step);
  CheckpointShard shard_snapshot(int64_t step);
  std::string checkpoint_location(int64_t step) const;
  TrainState saved_state(int64_t step) const;
  void restore(const std::string& file);
  int stopped(int64_t step, bool saved) const;
  int end_code(int64_t step, double loss, const std::string& unsaved) const;
  void finish(int64_t step, double loss, int exit_code, double t_run);
  uint64_t parameter_checksum();

  int64_t first_sample(int64_t step, int micro) const {
    return step * exp_.train.batch_size + static_cast<int64_t>(micro) * micro_ * world_ +
           static_cast<int64_t>(rank_) * micro_;
  }
  void prefetch(int64_t step, int micro) {
    train_loader_->prefetch(first_sample(step, micro), micro_);
  }
  void phase(Phase p, int64_t step) {
    if (watchdog_) watchdog_->enter(p, step);
  }
  Communicator& dcomm() { return dcomm_ ? *dcomm_ : *comm_; }

  Experiment exp_;
  RunOptions opts_;
  std::unique_ptr<Communicator> comm_;   // host values: losses, norms, barriers, timings
  std::unique_ptr<Communicator> dcomm_;  // device tensors: NCCL on CUDA; null = comm_
  int rank_ = 0, world_ = 1;
  bool console_ = false, tty_ = false;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<DataParallel> dp_;
  GradReadyFn grad_ready_;  // dp_'s hook for the last micro-batch's backward
  std::unique_ptr<TokenDataset> train_data_, val_data_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::unique_ptr<Checkpointer> ckpt_;  // rank 0 only; every rank's with checkpoint.sharded
  std::unique_ptr<StepReporter> reporter_;
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<OpSpans> op_spans_;
  std::unique_ptr<Watchdog> watchdog_;
  HealthMonitor health_;
  CheckpointPolicy checkpoint_policy_;
  Faults faults_;
  int micro_ = 1, accum_ = 1;
  int64_t targets_per_step_ = 0;
  std::vector<int32_t> x_, y_;
  TrainState state_;
  std::string newest_checkpoint_;  // the newest this run wrote or restored; "" for none
};

int Trainer::run() {
  install_stop_signals();
  setup();
  start();
  const int64_t total = exp_.train.steps;
  int64_t step = state_.step;
  prefetch(step, 0);
  enter_step_loop();  // a stop request now waits for a step boundary (stop_signals.h)
  const double t_run = now();
  double loss = NAN;
  bool trained = false;  // some step ran here (not a resume at or past the end)
  std::string unsaved;   // why the last checkpoint due was not written; "" when it was
  int exit_code = kExitOk;
  spdlog::info("training steps {}..{}", step, total);
  // Steps are numbered from 1 here as everywhere: this run trains steps step+1 .. total.
  if (!opts_.profile.empty() && !tracer_->covers(step + 1, total + 1))
    spdlog::warn(
        "--profile {}: this run trains steps {}..{}, none of them in the window, so no "
        "trace is written; pick steps in that range",
        tracer_->window(), step + 1, total);
  while (step < total) {
    const double lr = learning_rate(exp_.optimizer, step, total) * state_.lr_scale;
    StepResult r = train_step(step, lr);
    loss = r.loss;
    trained = true;
    const HealthMonitor::Action health = judge(step + 1, r);  // numbered as its metrics row
    if (health == HealthMonitor::Action::roll_back && rollback(&step)) continue;
    if (health == HealthMonitor::Action::roll_back || health == HealthMonitor::Action::give_up) {
      exit_code = kExitGaveUp;
      break;
    }
    advance(&step, r.times.total);
    bool eval_stopped = false;  // every rank agrees (evaluate's allreduce)
    if (exp_.train.eval_every > 0 && (step % exp_.train.eval_every == 0 || step == total)) {
      std::optional<double> v = evaluate();
      if (v) reporter_->eval(step, *v);
      eval_stopped = !v;
    }
    // A stop request must be seen by every rank at the same step boundary: with several ranks
    // it is the one agreed in this step's stats allreduce (a signal arriving later is seen at
    // the next step) or in the evaluation's; alone, the latest one.
    const bool stop = (world_ > 1 ? r.stop : stop_signal() != 0) || eval_stopped;
    if (checkpoint_policy_.save_after(step, stop)) {
      unsaved = save_checkpoint(step, &r.times.checkpoint);
      reporter_->checkpoint_time(r.times.checkpoint);
    }
    if (reporter_->due(step))
      reporter_->report(step, {loss, lr, r.grad_norm, r.times, state_.tokens_seen});
    if (stop) {
      exit_code = stopped(step, unsaved.empty());
      break;
    }
  }
  if (exit_code == kExitOk && trained) exit_code = end_code(step, loss, unsaved);
  finish(step, loss, exit_code, t_run);
  return exit_code;
}

void Trainer::setup() {
  RankEnv env = detect_rank_env();
  // Ranks started by srun or a site's own mpirun get no OMP_NUM_THREADS from us: give each rank
  // its share of the node's cores, as trainrun's own launch does.
  if (!std::getenv("OMP_NUM_THREADS")) omp_set_num_threads(default_omp_threads(env.local_size));
  comm_ = env.is_rank && env.size > 1 ? make_mpi_communicator() : make_local_communicator();
  rank_ = comm_->rank();
  world_ = comm_->size();
  validate_for_world(exp_, world_);
  console_ = rank_ == 0;
  // Under mpirun stdout is often a pty, but the lines go to a log: plain lines there.
  tty_ = console_ && stdout_is_terminal() && !env.is_rank;

  if (rank_ == 0) fs::create_directories(exp_.run_dir);
  comm_->barrier();
  setup_logging(exp_.run_dir, rank_, console_);

  watchdog_ = std::make_unique<Watchdog>(*comm_, exp_.run_dir, exp_.fault_tolerance.step_timeout);
  tracer_ = std::make_unique<Tracer>(exp_.run_dir, rank_, opts_.profile);
  op_spans_ = std::make_unique<OpSpans>(*tracer_);
  setup_device();
  setup_model();
  setup_data();
  // Written once the device, model and data are set up: a start that fails before (say, a
  // moved data file on resume) leaves the run's config.yaml as it was.
  if (rank_ == 0) std::ofstream(fs::path(exp_.run_dir) / "config.yaml") << to_yaml(exp_);
  faults_ = Faults::from_env(rank_, restart_count());
  if (faults_.any())
    spdlog::warn("TEST FAULT INJECTION ACTIVE on rank {} (TRAINRUN_FAULTS): {}", rank_,
                 faults_.describe());
  setup_reporter();
  log_setup();
}

void Trainer::setup_device() {
  be_ = choose_backend(exp_, comm_->local_rank());
  if (exp_.train.precision == Precision::bf16) require_bf16(*be_);
  if (be_->device() == Device::cuda && world_ > 1) {
    // Gradients live on the GPU: collectives over NCCL, its id sent over MPI from rank 0.
    NcclId id{};
    if (rank_ == 0) id = nccl_unique_id();
    comm_->broadcast_bytes(id.data(), id.size(), 0);
    dcomm_ = make_nccl_communicator(id, rank_, world_, comm_->local_rank());
  }
}

void Trainer::setup_model() {
  micro_ = exp_.train.micro_batch_size > 0 ? exp_.train.micro_batch_size
                                           : exp_.train.batch_size / world_;
  accum_ = exp_.train.batch_size / (micro_ * world_);
  model_ = build_model(exp_.model, *be_, micro_,
                       exp_.train.precision == Precision::bf16 ? DType::bf16 : DType::f32);
  targets_per_step_ = model_->targets_per_batch() / micro_ * exp_.train.batch_size;
  dp_ = DataParallel::make(exp_.distributed.zero != 0, *comm_, dcomm(), model_->params(),
                           exp_.optimizer, tracer_.get());
  grad_ready_ = dp_->grad_ready_hook();
}

void Trainer::setup_data() {
  train_data_ = open_dataset(exp_.data, Split::train, exp_.model.vocab_size, exp_.seed);
  val_data_ = open_dataset(exp_.data, Split::val, exp_.model.vocab_size, exp_.seed);
  train_loader_ = std::make_unique<DataLoader>(*train_data_, exp_.seed, exp_.model.seq_len);
  val_loader_ = std::make_unique<DataLoader>(*val_data_, hash_combine(exp_.seed, 0x7661ull),
                                             exp_.model.seq_len);
  const size_t n = static_cast<size_t>(micro_) * static_cast<size_t>(exp_.model.seq_len);
  x_.resize(n);
  y_.resize(n);
}

void Trainer::setup_reporter() {
  StepReporterConfig cfg;
  cfg.run_dir = exp_.run_dir;
  cfg.total_steps = exp_.train.steps;
  cfg.log_every = exp_.logging.every;
  cfg.straggler_margin = exp_.logging.straggler_margin;
  cfg.console = console_;
  cfg.tty = tty_;
  cfg.run_name = exp_.name;
  cfg.restarts = restart_count();
  cfg.prometheus_port = exp_.logging.prometheus_port;
  cfg.prometheus_address = exp_.logging.prometheus_address;
  Throughput tp;
  const GemmPeak peak = gemm_peak(*be_, 1024, default_gemm_peak_cache());
  tp.peak_gflops = peak.gflops;
  tp.peak_source = peak.source;
  tp.flops_per_step = train_flops_per_token(exp_.model) * static_cast<double>(targets_per_step_);
  tp.world = world_;
  tp.tokens_per_step = targets_per_step_;
  reporter_ = std::make_unique<StepReporter>(cfg, tp, *comm_);
  reporter_->on_collective([this](int64_t step) { phase(Phase::comm, step); });
}

void Trainer::log_setup() const {
  spdlog::info("trainrun {} | run {} | rank {}/{} on {} | {}", TRAINRUN_VERSION, exp_.name, rank_,
               world_, comm_->host(), be_->describe());
  spdlog::info(
      "model {}: {} parameters, activations {:.1f} MiB per rank | batch {} = {} ranks x "
      "{} micro x {} accum, seq_len {}",
      exp_.model.type, model_->params().numel(), model_->activation_bytes() / 1048576.0,
      exp_.train.batch_size, world_, micro_, accum_, exp_.model.seq_len);
  spdlog::info("data train: {}", train_data_->describe());
  spdlog::info("data val:   {}", val_data_->describe());
  if (std::isfinite(train_data_->entropy_rate()))
    spdlog::info("data entropy rate {:.4f} nats/token: the lowest loss any model can reach",
                 train_data_->entropy_rate());
  const Throughput& tp = reporter_->throughput();
  spdlog::info("peak {:.1f} GFLOP/s per rank (sgemm: {}) | {:.3g} FLOP per step", tp.peak_gflops,
               tp.peak_source, tp.flops_per_step);
}

// A resumed run restores its checkpoint; a fresh one starts from rank 0's initial weights.
void Trainer::start() {
  if (!opts_.resume_file.empty()) {
    restore(opts_.resume_file);
  } else {
    if (rank_ == 0) model_->params().initialize(exp_.seed);
    dp_->broadcast_params();
    model_->params().refresh_compute();  // bf16: every rank rounds rank 0's masters
    state_.seed = exp_.seed;
  }
  if (rank_ == 0 || exp_.checkpoint.sharded)
    ckpt_ = std::make_unique<Checkpointer>(exp_.run_dir, exp_.checkpoint.keep_last,
                                           exp_.checkpoint.async, rank_);
  // A relaunched job that had no checkpoint yet keeps the supervisor's restart event (step 0).
  const char* rc = std::getenv("TRAINRUN_RESTART_COUNT");
  const bool relaunched = rc && std::atoi(rc) > 0;
  reporter_->open_metrics(!opts_.resume_file.empty() ? state_.step : (relaunched ? 0 : -1));
}

StepResult Trainer::train_step(int64_t step, double lr) {
  phase(Phase::data, step);
  tracer_->set_step(step + 1);
  be_->set_op_observer(tracer_->active() ? op_spans_.get() : nullptr);
  const double t_iter = now();
  // Faults name a step as logs, metrics rows, events and checkpoints do: the Nth, counted from 1.
  const int64_t nth = step + 1;
  faults_.at_step_start(nth);
  const double t_pre = now() - t_iter;  // an injected delay before the step counts as data time
  StepResult r;
  StepTimes& t = r.times;
  const double t_start = now();
  const Tensor grads = model_->params().grads();
  // No zeroing pass: each gradient's first write of the step overwrites it (ParamStore).
  model_->params().begin_grads();
  const double loss_sum = accumulate_gradients(step, t);
  phase(Phase::comm, step);
  dp_->reduce_grads(t);
  if (faults_.poison(nth)) be_->fill(grads, NAN);
  // Every micro-batch's loss is a mean over the same number of targets, so the global loss is
  // the mean of all micro-batch means over all ranks.
  const StepStats stats = dp_->reduce_stats(loss_sum / accum_, stop_signal() != 0, t);
  r.loss = stats.loss;
  r.grad_norm = stats.grad_norm;
  r.stop = stats.stop;
  phase(Phase::optimizer, step);
  const double t_opt = now();
  {
    Tracer::Scope span(tracer_.get(), phase_name(Phase::optimizer), "phase");
    if (HealthMonitor::finite(r.loss, r.grad_norm)) dp_->update(lr, step + 1, r.grad_norm, t);
    if (faults_.diverge(nth)) be_->fill(model_->params().params(), INFINITY);
    model_->params().refresh_compute();  // bf16: the next forward reads the updated masters
    be_->synchronize();
  }
  t.optimizer = now() - t_opt;
  t.total = now() - t_start;
  tracer_->span("step", "step", t_iter, now());
  be_->set_op_observer(nullptr);
  StepTimes sample = t;
  sample.total += t_pre;
  sample.data += t_pre;
  reporter_->record(sample);
  return r;
}

// Forward and backward over this rank's micro-batches of the step; returns their summed loss.
double Trainer::accumulate_gradients(int64_t step, StepTimes& t) {
  const float scale = 1.0f / static_cast<float>(targets_per_step_);
  double loss = 0;
  // A range of gradients goes to the allreduce only once what no op wrote in it is zeroed.
  ParamStore& ps = model_->params();
  GradReadyFn ready;
  if (grad_ready_)
    ready = [&ps, this](int64_t begin, int64_t end) {
      ps.zero_stale(begin, end);
      grad_ready_(begin, end);
    };
  for (int m = 0; m < accum_; ++m) {
    phase(Phase::data, step);
    {
      Tracer::Scope span(tracer_.get(), phase_name(Phase::data), "phase");
      t.data += train_loader_->next(x_.data(), y_.data());
    }
    // Keep the next micro-batch (or the next step's first) loading while this one computes.
    if (m + 1 < accum_)
      prefetch(step, m + 1);
    else
      prefetch(step + 1, 0);
    model_->set_batch(x_.data(), y_.data());
    const uint64_t seed = hash_combine(exp_.seed, static_cast<uint64_t>(first_sample(step, m)));
    phase(Phase::forward, step);
    const double t0 = now();
    {
      Tracer::Scope span(tracer_.get(), phase_name(Phase::forward), "phase");
      loss += model_->forward(true, seed);
    }
    const double t1 = now();
    t.forward += t1 - t0;
    phase(Phase::backward, step);
    {
      // The last micro-batch's gradients are final as backward produces them: reduce them now.
      Tracer::Scope span(tracer_.get(), phase_name(Phase::backward), "phase");
      model_->backward(scale, seed, m + 1 == accum_ ? ready : GradReadyFn{});
    }
    t.backward += now() - t1;
  }
  ps.zero_stale(0, ps.numel());
  return loss;
}

// Every rank judges the same agreed values, so every rank takes the same way out.
HealthMonitor::Action Trainer::judge(int64_t step, const StepResult& r) {
  const HealthMonitor::Verdict v = health_.observe(r.loss, r.grad_norm);
  if (v.spike) {
    spdlog::warn(
        "step {}: loss spike {:.4f} is {:.1f} std devs above the last {} steps' "
        "mean {:.4f} (warning only)",
        step, r.loss, v.spike->zscore, v.spike->window, v.spike->mean);
    reporter_->event(step, MetricEvent::loss_spike,
                     {{"loss", r.loss}, {"zscore", v.spike->zscore}});
  }
  if (v.action == HealthMonitor::Action::proceed) return v.action;
  ++state_.bad_steps_total;
  spdlog::warn("step {}: non-finite loss {} or grad norm {}: update skipped ({} in a row)", step,
               r.loss, r.grad_norm, v.bad_in_row);
  reporter_->event(step, MetricEvent::bad_step, {{"loss", r.loss}, {"grad_norm", r.grad_norm}});
  if (v.action == HealthMonitor::Action::give_up) {
    spdlog::error("{} non-finite steps in a row after {} rollback(s): giving up (exit {})",
                  exp_.fault_tolerance.max_bad_steps, health_.rollbacks(), int(kExitGaveUp));
    reporter_->event(step, MetricEvent::gave_up, {{"rollbacks", double(health_.rollbacks())}});
  }
  return v.action;
}

// Too many non-finite steps in a row: go back to the newest good checkpoint with a lower
// learning rate instead of training on garbage. False when there is nothing to go back to.
bool Trainer::rollback(int64_t* step) {
  phase(Phase::checkpoint, *step);
  if (ckpt_) ckpt_->wait();
  comm_->barrier();
  std::vector<std::string> warnings;
  auto file = latest_good_checkpoint(exp_.run_dir, &warnings);
  for (const auto& w : warnings) spdlog::warn("{}", w);
  if (!file) {
    spdlog::error("{} non-finite steps in a row and no checkpoint to roll back to: giving up",
                  exp_.fault_tolerance.max_bad_steps);
    return false;
  }
  const int64_t bad_total = state_.bad_steps_total;
  const double scale = state_.lr_scale * exp_.fault_tolerance.rollback_lr_factor;
  if (!(scale > 0)) {  // a learning rate of 0 learns nothing, and no checkpoint may hold it
    spdlog::error(
        "rolling back would scale the learning rate by {} (fault_tolerance.rollback_lr_factor "
        "{}): giving up",
        scale, exp_.fault_tolerance.rollback_lr_factor);
    return false;
  }
  train_loader_->next(x_.data(), y_.data());  // drain the pending prefetch
  restore(*file);
  state_.bad_steps_total = bad_total;
  state_.lr_scale = scale;
  health_.rolled_back();
  const int64_t from = *step;
  *step = state_.step;
  reporter_->reopen_metrics(*step);
  spdlog::warn("rolled back from step {} to step {} ({}); learning rate now x{:.3g}", from, *step,
               *file, scale);
  reporter_->event(*step, MetricEvent::rollback,
                   {{"from_step", double(from)}, {"lr_scale", scale}});
  prefetch(*step, 0);
  return true;
}

void Trainer::advance(int64_t* step, double seconds) {
  ++*step;
  state_.step = *step;
  state_.tokens_seen += targets_per_step_;
  state_.samples_seen = *step * exp_.train.batch_size;
  reporter_->step_done(seconds);
  watchdog_->step_done(seconds);
}

// The mean validation loss, or nullopt when a stop request came in between two evaluation
// batches (a long evaluation must not delay a stop: the weights are still the step's, so the
// stop's checkpoint is as good as after it). With several ranks the outcome is agreed in the
// same allreduce as the loss, so every rank stops or goes on together.
std::optional<double> Trainer::evaluate() {
  if (exp_.train.eval_steps <= 0) return NAN;
  phase(Phase::eval, state_.step);
  double sum = 0;
  int done = 0;
  for (; done < exp_.train.eval_steps && stop_signal() == 0; ++done) {
    for (int m = 0; m < accum_; ++m) {
      // The same validation samples every time, so evaluations are comparable across steps.
      val_loader_->fetch(first_sample(done, m), micro_, x_.data(), y_.data());
      model_->set_batch(x_.data(), y_.data());
      sum += model_->forward(false, 0);
    }
  }
  double v[2] = {sum / (std::max(done, 1) * accum_), done < exp_.train.eval_steps ? 1.0 : 0.0};
  phase(Phase::comm, state_.step);
  if (world_ > 1) {
    Tensor t(v, DType::f64, Device::cpu, {2});
    comm_->allreduce_avg(t);
  }
  if (v[1] == 0) return v[0];
  spdlog::warn("step {}: stop requested during the evaluation; abandoned it after {} of {} batches",
               state_.step, done, exp_.train.eval_steps);
  return std::nullopt;
}

// Collective: every rank takes part in the snapshot, rank 0 writes it. Never during a streak
// of bad steps, nor with a non-finite weight or moment: the newest checkpoint must always be
// one a rollback or a resume can go on from. Returns why it was not written ("" when it was);
// empty on every rank or on none.
std::string Trainer::save_checkpoint(int64_t step, double* seconds) {
  phase(Phase::checkpoint, step);
  const double t0 = now();
  const std::string refused = try_checkpoint(step);
  *seconds += now() - t0;
  if (refused.empty()) {
    newest_checkpoint_ = checkpoint_location(step);
    reporter_->checkpoint(step, newest_checkpoint_);
    return refused;
  }
  spdlog::warn("step {}: {}; {}", step, refused,
               newest_checkpoint_.empty() ? "there is no earlier checkpoint"
                                          : "the newest checkpoint stays " + newest_checkpoint_);
  reporter_->event(step, MetricEvent::checkpoint_skipped, {{"reason", refused}});
  return refused;
}

// Saves the checkpoint of `step` unless the state is not fit to be one; returns why not ("" when
// saved). Rank 0 names the tensor at fault; the others learn only that it refused.
std::string Trainer::try_checkpoint(int64_t step) {
  const std::string path = checkpoint_location(step);
  // Every rank judged the same allreduced values: all skip the snapshot together.
  if (health_.bad_in_row() > 0)
    return fmt::format(
        "not writing checkpoint {}: the last {} step(s) had a non-finite loss or "
        "gradient norm",
        path, health_.bad_in_row());
  reporter_->flush();  // metrics.h5 holds every row up to the checkpoint
  if (exp_.checkpoint.sharded) return try_sharded_checkpoint(step);
  std::string refused;
  if (std::optional<CheckpointData> ck = snapshot(step)) {
    try {
      ckpt_->save(std::move(*ck));  // checks finiteness on the host copy, before writing
      if (!exp_.checkpoint.async) ckpt_->wait();
    } catch (const NonFiniteCheckpoint& e) {
      refused = e.what();
    }
  }
  if (world_ > 1) {  // only rank 0 saw the snapshot
    char bad = refused.empty() ? 0 : 1;
    comm_->broadcast_bytes(&bad, 1, 0);
    if (bad && refused.empty())
      refused = fmt::format(
          "not writing checkpoint {}: rank 0 found a non-finite weight or "
          "optimizer moment",
          path);
  }
  comm_->barrier();
  return refused;
}

// What a checkpoint of `step` records of the run, in either layout.
TrainState Trainer::saved_state(int64_t step) const {
  TrainState st = state_;
  st.step = step;
  st.world_size = world_;
  st.config_yaml = to_yaml(exp_);
  return st;
}

std::string Trainer::checkpoint_location(int64_t step) const {
  return exp_.checkpoint.sharded ? sharded_checkpoint_path(exp_.run_dir, step)
                                 : checkpoint_path(exp_.run_dir, step);
}

// Every rank writes its shard; they agree on the outcome (each saw only its own part), and
// rank 0 commits. A rank that could not write makes every rank fail with the write error's
// exit code, so the job ends at once instead of waiting for rank 0's commit.
std::string Trainer::try_sharded_checkpoint(int64_t step) {
  const std::string path = checkpoint_location(step);
  std::string refused, failed;
  try {
    ckpt_->save_shard(shard_snapshot(step));  // refuses a non-finite shard synchronously
  } catch (const NonFiniteCheckpoint& e) {
    refused = e.what();
  } catch (const CheckpointError& e) {  // this write, or (async) the previous one
    failed = e.what();
  }
  const char mine = !failed.empty() ? 2 : !refused.empty() ? 1 : 0;
  std::vector<char> all(static_cast<size_t>(world_));
  comm_->all_gather_bytes(&mine, 1, all.data());
  const auto worst = std::max_element(all.begin(), all.end());
  const int who = static_cast<int>(worst - all.begin());
  if (*worst == 2)
    throw CheckpointWriteError(
        !failed.empty() ? failed
                        : fmt::format("cannot write checkpoint {}: rank {} could not write its "
                                      "shard (its log says why)",
                                      path, who));
  if (*worst == 1)
    return !refused.empty() ? refused
                            : fmt::format(
                                  "not writing checkpoint {}: rank {} found a non-finite "
                                  "weight or optimizer moment in its shard",
                                  path, who);
  if (!exp_.checkpoint.async && rank_ == 0) ckpt_->commit(step, world_);
  comm_->barrier();
  return "";
}

// This rank's shard_of range of the weights and moments; nothing is gathered.
CheckpointShard Trainer::shard_snapshot(int64_t step) {
  ParamStore& ps = model_->params();
  CheckpointShard s = ckpt_->reuse_shard();  // the last save's buffers: no page faults, no zeroing
  s.state = saved_state(step);
  s.params = ps.entries();
  s.flat_size = ps.numel();
  s.rank = rank_;
  s.range = shard_of(s.flat_size, world_, rank_);
  const int64_t n = s.range.size();
  s.weights.resize(static_cast<size_t>(n));
  s.adam_m.resize(static_cast<size_t>(n));
  s.adam_v.resize(static_cast<size_t>(n));
  if (n > 0)
    be_->copy(Tensor(s.weights.data(), DType::f32, Device::cpu, {n}),
              ps.params().slice(s.range.begin, {n}));
  dp_->copy_moments_range(s.range, s.adam_m.data(), s.adam_v.data());
  return s;
}

// The full state on rank 0, the writing rank; the other ranks only send their optimizer shards.
std::optional<CheckpointData> Trainer::snapshot(int64_t step) {
  if (rank_ != 0) {
    dp_->gather_optimizer_state(nullptr);
    return std::nullopt;
  }
  ParamStore& ps = model_->params();
  const int64_t n = ps.numel();
  CheckpointData ck = ckpt_->reuse_data();  // the last save's buffers: no page faults, no zeroing
  ck.state = saved_state(step);
  ck.params = ps.entries();
  ck.weights.resize(static_cast<size_t>(n));
  be_->copy(Tensor(ck.weights.data(), DType::f32, Device::cpu, {n}), ps.params());
  dp_->gather_optimizer_state(&ck);
  return ck;
}

void Trainer::restore(const std::string& file) {
  // Only this rank's range of the moments (all of them without ZeRO-1).
  CheckpointData ck = read_checkpoint(file, dp_->shard());
  ParamStore& ps = model_->params();
  if (static_cast<int64_t>(ck.weights.size()) != ps.numel())
    throw CheckpointError(fmt::format("checkpoint {} holds {} parameters but the model has {}",
                                      file, ck.weights.size(), ps.numel()));
  const auto mine = ps.entries();
  for (size_t i = 0; i < mine.size(); ++i)
    if (i >= ck.params.size() || ck.params[i].name != mine[i].name ||
        ck.params[i].offset != mine[i].offset || ck.params[i].shape != mine[i].shape)
      throw CheckpointError(fmt::format("checkpoint {} does not match the model at parameter {}",
                                        file, mine[i].name));
  be_->copy(ps.params(), Tensor(ck.weights.data(), DType::f32, Device::cpu, {ps.numel()}));
  ps.refresh_compute();
  dp_->restore_optimizer_state(ck);
  state_ = ck.state;
  newest_checkpoint_ = file;
  reporter_->checkpoint(state_.step, file);
  spdlog::info("resumed from {} at step {} ({} tokens seen, written by {} ranks)", file,
               state_.step, state_.tokens_seen, state_.world_size);
}

// A stop at `step` (its checkpoint written when `saved`): tell the user how to go on, and the
// launcher what happened.
int Trainer::stopped(int64_t step, bool saved) const {
  const int sig = stop_signal();
  reporter_->end_line();
  if (saved)
    spdlog::warn(
        "stop requested (signal {}): checkpoint saved at step {}; resume with "
        "`trainrun --resume {}`",
        sig ? sig : SIGTERM, step, exp_.run_dir);
  else
    spdlog::warn(
        "stop requested (signal {}) at step {}, where the state was not fit for a checkpoint; "
        "`trainrun --resume {}` goes on from {}",
        sig ? sig : SIGTERM, step, exp_.run_dir,
        newest_checkpoint_.empty() ? "nothing (no checkpoint was written)" : newest_checkpoint_);
  return sig == SIGINT ? kExitInterrupted : kExitResumeMe;
}

// The exit code of a run that trained to its last step: 0 only when the final loss is finite
// and the final checkpoint was written (`unsaved` says why not), so a diverged run never passes
// for a finished one. Every rank has the same loss and an equally empty `unsaved`, so every
// rank ends alike.
int Trainer::end_code(int64_t step, double loss, const std::string& unsaved) const {
  if (std::isfinite(loss) && unsaved.empty()) return kExitOk;
  const std::string what = std::isfinite(loss) ? "no final checkpoint (" + unsaved + ")"
                                               : fmt::format("a non-finite loss ({})", loss);
  spdlog::error(
      "the run ended at step {} with {}: its final state is not usable; {} (exit {}, gave up)",
      step, what,
      newest_checkpoint_.empty() ? "no checkpoint was written"
                                 : "the newest good checkpoint is " + newest_checkpoint_,
      int(kExitGaveUp));
  reporter_->event(step, MetricEvent::gave_up, {{"reason", what}});
  return kExitGaveUp;
}

void Trainer::finish(int64_t step, double loss, int exit_code, double t_run) {
  reporter_->end_line();
  phase(Phase::checkpoint, step);
  if (ckpt_) ckpt_->wait();
  // No rank may exit before rank 0's last (possibly background) write is on disk: under mpirun
  // the first rank to exit with 75 ends the job.
  phase(Phase::sync, step);
  comm_->barrier();
  // Every rank must end with the same weights; the logs let a test (or a person) check it.
  tracer_->flush();
  if (console_ && !tracer_->written_file().empty())
    spdlog::info(
        "profile: steps {} traced into {}/ (rank-N.json for https://ui.perfetto.dev, "
        "ops-rank-N.txt: time per op)",
        tracer_->window(), fs::path(tracer_->written_file()).parent_path().string());
  spdlog::info("rank {} parameter checksum {:016x} at step {}", rank_, parameter_checksum(), step);
  if (exit_code == kExitOk)
    reporter_->summary(step, now() - t_run, loss, train_data_->entropy_rate());
}

uint64_t Trainer::parameter_checksum() {
  ParamStore& ps = model_->params();
  std::vector<float> host(static_cast<size_t>(ps.numel()));
  be_->copy(Tensor(host.data(), DType::f32, Device::cpu, {ps.numel()}), ps.params());
  uint64_t h = 0;
  for (float f : host) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    h = hash_combine(h, bits);
  }
  return h;
}

}  // namespace

int run_training(const Experiment& exp, const RunOptions& opts) {
  Trainer t(exp, opts);
  return t.run();
}

}  // namespace trainrun
