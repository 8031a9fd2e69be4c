// The training step loop. One process = one rank; the data goes one way:
// experiment -> (communicator, backend, model, data, components) -> steps.
// Each decision belongs to a component: Batches (which samples, read ahead), DataParallel (how
// the ranks share a step: DDP or ZeRO-1), Recovery (bad steps, rollbacks, loss spikes),
// Evaluator (the validation loss), CheckpointManager (when and how to save, restore),
// StepReporter (metrics, console, MFU, stragglers) and run_end.h (the exit code). Trainer wires
// them together, and run() reads as the sequence of a step.
#include "trainrun/train/trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <omp.h>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "backend_choice.h"
#include "batches.h"
#include "checkpoint_manager.h"
#include "data_parallel.h"
#include "evaluator.h"
#include "fault_injection.h"
#include "logging.h"
#include "model_state.h"
#include "phase_scope.h"
#include "profiling.h"
#include "recovery.h"
#include "run_end.h"
#include "step_phase.h"
#include "step_reporter.h"
#include "traced_communicator.h"
#include "train_progress.h"
#include "trainrun/backend/backend.h"
#include "trainrun/comm/comm.h"
#include "trainrun/comm/device_mesh.h"
#include "trainrun/config/config.h"
#include "trainrun/core/build_info.h"
#include "trainrun/core/clock.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/no_follow.h"
#include "trainrun/hf/hf_import.h"
#include "trainrun/model/model.h"
#include "trainrun/obs/trace.h"
#include "trainrun/optim/optimizer.h"
#include "trainrun/plan/plan.h"
#include "trainrun/runtime/omp_threads.h"
#include "trainrun/runtime/rank_env.h"
#include "trainrun/runtime/stop_signals.h"
#include "watchdog.h"

namespace fs = std::filesystem;

namespace trainrun {

namespace {

// One optimizer step as the loop sees it.
struct StepResult {
  StepTimes times;
  double loss = NAN, grad_norm = NAN;  // agreed by every rank
  bool stop = false;                   // a stop request every rank agreed on (several ranks)
};

class Trainer {
 public:
  Trainer(const Experiment& exp, const RunOptions& opts) : exp_(exp), opts_(opts) {}
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
  double accumulate_gradients(const PhaseObservers& at, StepTimes& t);
  bool rollback(int64_t* step);
  void advance(int64_t* step, double seconds);
  std::string save_checkpoint(int64_t step, double* seconds);
  void restore(const std::string& file);
  void finish(int64_t step, double loss, int exit_code, double t_run);
  void log_peak_memory() const;

  void phase(Phase p, int64_t step) {
    if (watchdog_) watchdog_->enter(p, step);
  }

  Experiment exp_;
  RunOptions opts_;
  std::unique_ptr<Communicator> comm_;     // host values: losses, norms, barriers, timings
  std::unique_ptr<Communicator> dcomm_;    // device tensors: NCCL on CUDA; null = comm_
  std::unique_ptr<DeviceMesh> mesh_;       // the ranks' named axes and their groups
  std::unique_ptr<Communicator> tp_comm_;  // the tp group's, traced (tp > 1)
  int rank_ = 0, world_ = 1;
  bool console_ = false, tty_ = false;
  FaultInjector faults_;  // TRAINRUN_FAULTS: inert unless a test names a fault for this rank
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ModelState> model_state_;  // the parameters as checkpointed state
  DeviceBuffer loss_sums_;  // [accum_] f64 on the device: each micro-batch's loss sum
  std::unique_ptr<DataParallel> dp_;
  GradReadyFn grad_ready_;  // dp_'s hook for the last micro-batch's backward
  std::unique_ptr<Batches> batches_;
  std::unique_ptr<Evaluator> evaluator_;
  std::unique_ptr<CheckpointManager> ckpt_;
  std::unique_ptr<StepReporter> reporter_;
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<OpSpans> op_spans_;
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<Recovery> recovery_;
  Restarts restarts_ = detect_restarts();
  int micro_ = 1, accum_ = 1;
  int64_t targets_per_step_ = 0;
  TrainProgress progress_;
};

int Trainer::run() {
  install_stop_signals();
  setup();
  start();
  const int64_t total = exp_.train.steps;
  int64_t step = progress_.step;
  batches_->prefetch(step, 0);
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
    const double lr = learning_rate(exp_.optimizer, step, total) * recovery_->lr_scale();
    StepResult r = train_step(step, lr);
    loss = r.loss;
    trained = true;
    const HealthMonitor::Action health =  // step numbered as its metrics row
        recovery_->judge(step + 1, r.loss, r.grad_norm);
    if (health == HealthMonitor::Action::roll_back && rollback(&step)) continue;
    if (health == HealthMonitor::Action::roll_back || health == HealthMonitor::Action::give_up) {
      exit_code = kExitGaveUp;
      break;
    }
    advance(&step, r.times.total);
    bool eval_stopped = false;  // every rank agrees (evaluate's allreduce)
    if (evaluator_->due(step)) {
      std::optional<double> v = evaluator_->run(step);
      if (v) reporter_->eval(step, *v);
      eval_stopped = !v;
    }
    // A stop request must be seen by every rank at the same step boundary: with several ranks
    // it is the one agreed in this step's stats allreduce (a signal arriving later is seen at
    // the next step) or in the evaluation's; alone, the latest one.
    const bool stop = (world_ > 1 ? r.stop : stop_signal() != 0) || eval_stopped;
    if (ckpt_->due(step, stop)) {
      unsaved = save_checkpoint(step, &r.times.checkpoint);
      reporter_->checkpoint_time(r.times.checkpoint);
    }
    if (reporter_->due(step))
      reporter_->report(step, {loss, lr, r.grad_norm, r.times, progress_.tokens_seen});
    if (stop) {
      reporter_->end_line();
      exit_code =
          stop_exit_code(stop_signal(), step, unsaved.empty(), exp_.run_dir, ckpt_->newest());
      break;
    }
  }
  if (exit_code == kExitOk && trained) {
    std::string why;
    exit_code = end_exit_code(step, loss, unsaved, ckpt_->newest(), &why);
    if (!why.empty()) reporter_->event(step, MetricEvent::gave_up, {{"reason", why}});
  }
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
  if (rank_ == 0) replace_file((fs::path(exp_.run_dir) / "config.yaml").string(), to_yaml(exp_));
  setup_reporter();
  log_setup();
}

void Trainer::setup_device() {
  faults_.load(rank_, restarts_.count);
  be_ = faults_.wrap(choose_backend(exp_, comm_->local_rank()));
  if (exp_.train.precision == Precision::bf16) require_bf16(*be_);
  dcomm_ = make_device_communicator(*be_, *comm_);
  // validate_for_world checked that tp and dp_replicate divide the ranks.
  mesh_ = std::make_unique<DeviceMesh>(
      *comm_, dcomm_.get(),
      MeshShape::of(world_, exp_.distributed.dp_replicate, exp_.distributed.tp),
      [this](Communicator& group) { return make_device_communicator(*be_, group); });
}

void Trainer::setup_model() {
  // The tensor-parallel ranks of a data-parallel one share its micro-batches.
  const int dp = mesh_->shape().dp();
  micro_ =
      exp_.train.micro_batch_size > 0 ? exp_.train.micro_batch_size : exp_.train.batch_size / dp;
  accum_ = exp_.train.batch_size / (micro_ * dp);
  if (mesh_->shape().tp > 1)
    tp_comm_ =
        std::make_unique<TracedCommunicator>(mesh_->device_group(MeshAxis::tp), *tracer_, "tp ");
  const TpOverlap overlap = exp_.distributed.tp_overlap;
  const TensorParallel tp{mesh_->shape().tp, mesh_->coord(MeshAxis::tp), tp_comm_.get(),
                          overlap == TpOverlap::on || (overlap == TpOverlap::automatic &&
                                                       tp_comm_ && tp_comm_->kind() == "nccl")};
  model_ = build_model(
      exp_.model, *be_, micro_, exp_.train.precision == Precision::bf16 ? DType::bf16 : DType::f32,
      exp_.train.activation_checkpointing, DataParallel::storage_for(exp_.distributed.zero), tp);
  targets_per_step_ = model_->targets_per_batch() / micro_ * exp_.train.batch_size;
  loss_sums_ = DeviceBuffer(*be_, sizeof(double) * static_cast<size_t>(accum_));
  dp_ = DataParallel::make(exp_.distributed.zero, *mesh_, model_->params(), exp_.optimizer,
                           tracer_.get(), exp_.distributed.reshard_after_forward,
                           exp_.distributed.reduce_dtype == Precision::bf16);
  if (watchdog_)
    dp_->on_collective_wait(
        [w = watchdog_.get()](bool waiting) { w->wait_in_collective(waiting); });
  model_state_ = std::make_unique<ModelState>(model_->params(), *dp_);
  faults_.watch(dp_->buffers());
  grad_ready_ = dp_->grad_ready_hook();
}

void Trainer::setup_data() {
  batches_ =
      std::make_unique<Batches>(exp_, mesh_->coord(MeshAxis::dp), mesh_->shape().dp(), micro_);
  evaluator_ =
      std::make_unique<Evaluator>(exp_.train, accum_, *batches_, *model_, *comm_, watchdog_.get());
}

void Trainer::setup_reporter() {
  const auto cfg = StepReporterConfig::of(exp_, console_, tty_, restarts_.count);
  const auto tp = Throughput::of(exp_.model, *be_, world_, targets_per_step_);
  reporter_ = std::make_unique<StepReporter>(cfg, tp, *comm_);
  reporter_->on_collective([this](int64_t step) { phase(Phase::comm, step); });
  recovery_ = std::make_unique<Recovery>(exp_.fault_tolerance, *reporter_);
}

void Trainer::log_setup() const {
  spdlog::info("trainrun {} | run {} | rank {}/{} on {} | {}", trainrun_version(), exp_.name, rank_,
               world_, comm_->host(), be_->describe());
  if (world_ > 1)
    spdlog::info("mesh {}: this rank at replica {}, shard {}, tp {} | ZeRO stage {}",
                 mesh_->shape().describe(), mesh_->coord(MeshAxis::dp_replicate),
                 mesh_->coord(MeshAxis::dp_shard), mesh_->coord(MeshAxis::tp),
                 exp_.distributed.zero);
  spdlog::info(
      "model {}: {} parameters, activations {:.1f} MiB per rank | batch {} = {} ranks x "
      "{} micro x {} accum, seq_len {}",
      exp_.model.type, model_->params().numel(), model_->activation_bytes() / 1048576.0,
      exp_.train.batch_size, mesh_->shape().dp(), micro_, accum_, exp_.model.seq_len);
  spdlog::info("data train: {}", batches_->train().describe());
  spdlog::info("data val:   {}", batches_->val().describe());
  if (std::isfinite(batches_->train().entropy_rate()))
    spdlog::info("data entropy rate {:.4f} nats/token: the lowest loss any model can reach",
                 batches_->train().entropy_rate());
  const Throughput& tp = reporter_->throughput();
  spdlog::info("peak {:.1f} GFLOP/s per rank (sgemm: {}) | {:.3g} FLOP per step", tp.peak_gflops,
               tp.peak_source, tp.flops_per_step);
}

// A resumed run restores its checkpoint; a fresh one starts from rank 0's initial weights.
void Trainer::start() {
  ckpt_ = std::make_unique<CheckpointManager>(
      exp_, *comm_,
      std::vector<Stateful*>{model_state_.get(), dp_.get(), &progress_, batches_.get(),
                             recovery_.get()});
  if (!opts_.resume_file.empty()) {
    restore(opts_.resume_file);
  } else {
    ParamStore& ps = model_->params();
    if (!exp_.model.init_from.empty()) {
      // Every rank reads the published weights: a folder that does not fit fails them alike.
      // Under tensor parallelism each rank reads them whole and keeps its part.
      const std::vector<ParamEntry> whole = ps.whole_entries();
      int64_t n = 0;
      for (const ParamEntry& e : whole) {
        int64_t k = 1;
        for (int64_t d : e.shape) k *= d;
        n = e.offset + k;
      }
      std::vector<float> host(static_cast<size_t>(n), 0.0f);  // padding stays 0
      load_hf(exp_.model.init_from, exp_.model, whole, host.data());
      if (mesh_->shape().tp > 1) {
        std::vector<float> part(static_cast<size_t>(ps.numel()), 0.0f);
        ps.take_part(host.data(), part.data());
        host.swap(part);
      }
      dp_->load_weights(host.data());
      if (rank_ == 0) spdlog::info("weights from {} (model.init_from)", exp_.model.init_from);
    } else {
      dp_->initialize_weights(exp_.seed);
    }
  }
  // A relaunched job that had no checkpoint yet keeps the supervisor's restart event (step 0).
  const bool relaunched = restarts_.by_supervisor && restarts_.count > 0;
  reporter_->open_metrics(!opts_.resume_file.empty() ? progress_.step : (relaunched ? 0 : -1));
}

StepResult Trainer::train_step(int64_t step, double lr) {
  const PhaseObservers at{watchdog_.get(), tracer_.get(), be_.get(), step};
  tracer_->set_step(step + 1);
  be_->set_op_observer(tracer_->active() ? op_spans_.get() : nullptr);
  StepResult r;
  StepTimes& t = r.times;
  const double t_iter = now();
  double t_pre = 0;  // before the step: an injected delay (TRAINRUN_FAULTS) counts as data time
  {
    const PhaseScope before(at, Phase::data, &t_pre, PhaseMarks::none);
    faults_.on_step(step + 1);  // faults name the Nth step, from 1, as metrics rows do
  }
  const double t_start = now();
  // No zeroing pass: each gradient's first write of the step overwrites it (ParamStore).
  model_->params().begin_grads();
  dp_->begin_step();
  const double loss_sum = accumulate_gradients(at, t);
  StepStats stats;
  {
    const PhaseScope comm(at, Phase::comm, nullptr, PhaseMarks::range_only);
    dp_->reduce_grads(t);
    // Every micro-batch's loss is a mean over the same number of targets, so the global loss is
    // the mean of all micro-batch means over all ranks.
    stats = dp_->reduce_stats(loss_sum / accum_, stop_signal() != 0, t);
  }
  r.loss = stats.loss;
  r.grad_norm = stats.grad_norm;
  r.stop = stats.stop;
  {
    const PhaseScope optimizer(at, Phase::optimizer, &t.optimizer);
    if (HealthMonitor::finite(r.loss, r.grad_norm)) dp_->update(lr, step + 1, r.grad_norm, t);
    model_->params().refresh_compute();  // bf16: the next forward reads the updated masters
    be_->synchronize();
  }
  t.total = now() - t_start;
  tracer_->span("step", "step", t_iter, now());
  be_->set_op_observer(nullptr);
  StepTimes sample = t;
  sample.total += t_pre;
  sample.data += t_pre;
  reporter_->record(sample);
  return r;
}

// Forward and backward over this rank's micro-batches of the step; returns the sum of their
// mean losses. The losses stay on the device until every backward is queued and come back in one
// copy then: a GPU's queue never drains between a forward and its backward.
double Trainer::accumulate_gradients(const PhaseObservers& at, StepTimes& t) {
  const int64_t step = at.step;
  const float scale = 1.0f / static_cast<float>(targets_per_step_);
  const Tensor loss_sums(loss_sums_.data(), DType::f64, be_->device(), {accum_});
  // A range of gradients goes to the allreduce only once what no op wrote in it is zeroed.
  ParamStore& ps = model_->params();
  GradReadyFn ready;
  if (grad_ready_)
    ready = [&ps, this](int64_t begin, int64_t end) {
      ps.zero_stale(begin, end);
      grad_ready_(begin, end);
    };
  for (int m = 0; m < accum_; ++m) {
    {
      const PhaseScope data(at, Phase::data);  // its time: the loader's wait alone
      t.data += batches_->next();
    }
    // Keep the next micro-batch (or the next step's first) loading while this one computes.
    if (m + 1 < accum_)
      batches_->prefetch(step, m + 1);
    else
      batches_->prefetch(step + 1, 0);
    model_->set_batch(batches_->x(), batches_->y());
    model_->set_documents(batches_->doc_start());
    const uint64_t seed = batches_->seed(step, m);
    {
      const PhaseScope forward(at, Phase::forward, &t.forward);
      model_->forward(true, seed, loss_sums.slice(m, {1}), scale);
    }
    {
      // The last micro-batch's gradients are final as backward produces them: reduce them now.
      const PhaseScope backward(at, Phase::backward, &t.backward);
      model_->backward(scale, seed, m + 1 == accum_ ? ready : GradReadyFn{});
    }
  }
  ps.zero_stale(0, ps.numel());
  std::vector<double> sums(static_cast<size_t>(accum_));
  {
    // On a GPU: the wait for the queued kernels, counted as backward.
    const PhaseScope drain(at, Phase::backward, &t.backward, PhaseMarks::none);
    be_->copy(Tensor(sums.data(), DType::f64, Device::cpu, {accum_}), loss_sums);
  }
  double loss = 0;  // summed in micro-batch order, as every rank and backend does
  for (const double s : sums) loss += s / static_cast<double>(model_->targets_per_batch());
  return loss;
}

// Too many non-finite steps in a row: go back to the newest good checkpoint with a lower
// learning rate instead of training on garbage. False when there is nothing to go back to.
bool Trainer::rollback(int64_t* step) {
  phase(Phase::checkpoint, *step);
  const auto back = recovery_->plan_rollback(ckpt_->newest_good());
  if (!back) return false;
  batches_->next();  // drain the pending prefetch
  restore(back->file);
  const int64_t from = *step;
  *step = progress_.step;
  reporter_->reopen_metrics(*step);
  recovery_->rolled_back(from, *step, *back);
  batches_->prefetch(*step, 0);
  return true;
}

void Trainer::advance(int64_t* step, double seconds) {
  if (rank_ == 0)
    for (const auto& begun : batches_->epochs_begun(*step))
      spdlog::info("step {}: {}", *step + 1, begun);
  ++*step;
  progress_.step = *step;
  progress_.tokens_seen += targets_per_step_;
  reporter_->step_done(seconds);
  watchdog_->step_done(seconds);
}

// Collective (CheckpointManager::save). Returns why the checkpoint of `step` was not written
// ("" when it was); empty on every rank or on none.
std::string Trainer::save_checkpoint(int64_t step, double* seconds) {
  phase(Phase::checkpoint, step);
  const double t0 = now();
  const std::string before = ckpt_->newest();
  const std::string refused =
      ckpt_->save(step, recovery_->bad_in_row(), [this] { reporter_->flush(); });
  *seconds += now() - t0;
  if (refused.empty()) {
    reporter_->checkpoint(step, ckpt_->newest());
    return refused;
  }
  spdlog::warn(
      "step {}: {}; {}", step, refused,
      before.empty() ? "there is no earlier checkpoint" : "the newest checkpoint stays " + before);
  reporter_->event(step, MetricEvent::checkpoint_skipped, {{"reason", refused}});
  return refused;
}

void Trainer::restore(const std::string& file) {
  const TrainState saved = ckpt_->restore(file);
  // The data stream resumes where the steps did (its cursor follows from the step: Batches).
  if (batches_->samples_seen() != progress_.step * exp_.train.batch_size)
    throw CheckpointError(fmt::format(
        "checkpoint {}: its data cursor ({} samples) is not where {} steps of {} end: it was "
        "changed, or written by another program",
        file, batches_->samples_seen(), progress_.step, exp_.train.batch_size));
  reporter_->checkpoint(progress_.step, file);
  spdlog::info("resumed from {} at step {} ({} tokens seen, written by {} ranks)", file,
               progress_.step, progress_.tokens_seen, saved.world_size);
}

// The process's peak resident set beside the plan's bytes per rank (CPU runs, where the plan
// describes this process's memory), or the GPU's memory in use: the figure a test (or
// bench/gpu_check.sh) holds the plan to.
void Trainer::log_peak_memory() const {
  if (const double used = be_->device_memory_in_use(); used >= 0) {
    // A GPU: its memory in use beside the plan's bytes per rank for a GPU.
    const double planned = plan_memory(exp_, true).total;
    spdlog::info("rank {} device memory in use {:.0f} MiB, the plan {:.0f} MiB ({:+.1f}%)", rank_,
                 used / 1048576, planned / 1048576, 100 * (planned - used) / used);
    return;
  }
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) != 0) return;
  const double peak = static_cast<double>(ru.ru_maxrss) * 1024;  // Linux: KiB
  const double planned = plan_memory(exp_, false).total;
  spdlog::info("rank {} peak resident memory {:.0f} MiB, the plan {:.0f} MiB ({:+.1f}%)", rank_,
               peak / 1048576, planned / 1048576, 100 * (planned - peak) / peak);
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
  finish_profile(*tracer_, *comm_, exp_.run_dir, !opts_.profile.empty(), console_);
  spdlog::info("rank {} parameter checksum {:016x} at step {}", rank_, dp_->checksum(), step);
  log_peak_memory();
  if (exit_code == kExitOk)
    reporter_->summary(step, now() - t_run, loss, batches_->train().entropy_rate());
}

}  // namespace

int run_training(const Experiment& exp, const RunOptions& opts) {
  Trainer t(exp, opts);
  return t.run();
}

}  // namespace trainrun
