// The training step loop. One process = one rank; the data goes one way:
// experiment -> (communicator, backend, model, optimizer, data, checkpointer, metrics) -> steps.
#include "trainrun/trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <omp.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "faults.h"
#include "grad_sync.h"
#include "logging.h"
#include "signals.h"
#include "trainrun/backend.h"
#include "trainrun/checkpoint.h"
#include "trainrun/comm.h"
#include "trainrun/config.h"
#include "trainrun/cuda_plugin.h"
#include "trainrun/data.h"
#include "trainrun/errors.h"
#include "trainrun/flops.h"
#include "trainrun/launch.h"
#include "trainrun/metrics.h"
#include "trainrun/model.h"
#include "trainrun/optimizer.h"
#include "trainrun/rng.h"
#include "trainrun/stragglers.h"
#include "trainrun/trace.h"
#include "watchdog.h"

namespace fs = std::filesystem;

namespace trainrun {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::unique_ptr<Backend> choose_backend(const Experiment& exp, int local_rank) {
  if (exp.device == "cpu") return make_cpu_backend();
  std::string why;
  auto be = make_cuda_backend(local_rank, &why);
  if (be) return be;
  if (exp.device == "cuda")
    throw DeviceError(
        "device: cuda was requested but CUDA is not usable here: " + why +
        "\n  fix: run on a machine with an NVIDIA GPU, or --set device=cpu (or auto)");
  spdlog::info("device: auto -> cpu ({})", why);
  return make_cpu_backend();
}

// Per-step timings, seconds.
struct StepTimes {
  double data = 0, forward = 0, backward = 0, comm_wait = 0, comm_total = 0, optimizer = 0,
         checkpoint = 0, total = 0;
};

class Trainer {
 public:
  Trainer(const Experiment& exp, const RunOptions& opts) : exp_(exp), opts_(opts) {}
  int run();

 private:
  void setup();
  void restore(const std::string& file);
  StepTimes train_step(int64_t step, double lr, double* loss, double* grad_norm, bool* bad);
  double evaluate();
  void save_checkpoint(int64_t step, double* seconds);
  CheckpointData snapshot(int64_t step);
  uint64_t parameter_checksum();
  void log_step(int64_t step, double loss, double lr, double norm, const StepTimes& t);
  int64_t first_sample(int64_t step, int micro) const {
    return step * exp_.train.batch_size + static_cast<int64_t>(micro) * micro_ * world_ +
           static_cast<int64_t>(rank_) * micro_;
  }

  Experiment exp_;
  RunOptions opts_;
  std::unique_ptr<Communicator> comm_;   // host values: losses, norms, barriers, timings
  std::unique_ptr<Communicator> dcomm_;  // device tensors: NCCL on CUDA; null = comm_
  Communicator& dcomm() { return dcomm_ ? *dcomm_ : *comm_; }
  int rank_ = 0, world_ = 1;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<AdamW> opt_;
  std::unique_ptr<TokenDataset> train_data_, val_data_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::unique_ptr<Checkpointer> ckpt_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<GradSync> grad_sync_;
  int micro_ = 1, accum_ = 1;
  int64_t targets_per_step_ = 0;
  std::vector<int32_t> x_, y_;
  TrainState state_;
  double peak_gflops_ = 0;
  double flops_per_step_ = 0;
  bool console_ = false, tty_ = false;
  Faults faults_;
  bool stop_requested_ = false;  // agreed by every rank in the step's stats allreduce
  std::unique_ptr<Tracer> tracer_;
  std::vector<std::string> hosts_;
  std::vector<std::array<double, 6>> samples_;  // per step since the last straggler check
  void check_stragglers(int64_t step);
  std::unique_ptr<Watchdog> watchdog_;
  int rollbacks_ = 0;
  std::deque<double> recent_losses_;
  void phase(const char* name, int64_t step) {
    if (watchdog_) watchdog_->enter(name, step);
  }
  bool rollback(int64_t* step);
  void check_spike(int64_t step, double loss);
  void event(int64_t step, const std::string& name, MetricRow extra);
  double last_val_loss_ = NAN;
};

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

  if (rank_ == 0) {
    fs::create_directories(exp_.run_dir);
    std::ofstream(fs::path(exp_.run_dir) / "config.yaml") << to_yaml(exp_);
  }
  comm_->barrier();
  setup_logging(exp_.run_dir, rank_, console_);

  watchdog_ = std::make_unique<Watchdog>(*comm_, exp_.run_dir, exp_.fault_tolerance.step_timeout);
  be_ = choose_backend(exp_, comm_->local_rank());
  if (exp_.train.precision == "bf16")
    throw ConfigError(
        "train.precision=bf16 is not supported by the trainer yet (the CUDA plugin has bf16 "
        "kernels, but the modules run fp32 only): use --set train.precision=fp32");
  if (be_->device() == Device::cuda && world_ > 1) {
    // Gradients live on the GPU: collectives over NCCL, its id sent over MPI from rank 0.
    NcclId id{};
    if (rank_ == 0) id = nccl_unique_id();
    double packed[16] = {};
    std::memcpy(packed, id.data(), id.size());
    comm_->broadcast(Tensor(packed, DType::f64, Device::cpu, {16}), 0);
    std::memcpy(id.data(), packed, id.size());
    dcomm_ = make_nccl_communicator(id, rank_, world_, comm_->local_rank());
  }
  micro_ = exp_.train.micro_batch_size > 0 ? exp_.train.micro_batch_size
                                           : exp_.train.batch_size / world_;
  accum_ = exp_.train.batch_size / (micro_ * world_);
  model_ = build_model(exp_.model, *be_, micro_);
  targets_per_step_ = model_->targets_per_batch() / micro_ * exp_.train.batch_size;
  ParamStore& ps = model_->params();
  const Shard shard =
      exp_.distributed.zero ? shard_of(ps.numel(), world_, rank_) : Shard{0, ps.numel()};
  opt_ = std::make_unique<AdamW>(ps, exp_.optimizer, shard);
  if (world_ > 1 && !exp_.distributed.zero)
    grad_sync_ = std::make_unique<GradSync>(dcomm(), ps.grads(), int64_t{1} << 20);

  train_data_ = open_dataset(exp_.data, Split::train, exp_.model.vocab_size, exp_.seed);
  val_data_ = open_dataset(exp_.data, Split::val, exp_.model.vocab_size, exp_.seed);
  train_loader_ = std::make_unique<DataLoader>(*train_data_, exp_.seed, exp_.model.seq_len);
  val_loader_ = std::make_unique<DataLoader>(*val_data_, hash_combine(exp_.seed, 0x7661ull),
                                             exp_.model.seq_len);
  const size_t n = static_cast<size_t>(micro_) * static_cast<size_t>(exp_.model.seq_len);
  x_.resize(n);
  y_.resize(n);

  const char* restarts = std::getenv("TRAINRUN_RESTART_COUNT");
  if (!restarts) restarts = std::getenv("SLURM_RESTART_COUNT");
  faults_ = Faults::from_env(rank_, restarts ? std::atoi(restarts) : 0);
  tracer_ = std::make_unique<Tracer>(exp_.run_dir, rank_, opts_.profile);
  {
    // Host names travel as 8 doubles (63 characters) through the doubles all-gather.
    double mine[8] = {};
    const std::string h = comm_->host().substr(0, sizeof(mine) - 1);
    std::memcpy(mine, h.data(), h.size());
    std::vector<double> all(static_cast<size_t>(8 * world_));
    comm_->all_gather_doubles(mine, 8, all.data());
    for (int r = 0; r < world_; ++r)
      hosts_.emplace_back(reinterpret_cast<const char*>(all.data() + 8 * r));
  }
  if (faults_.any())
    spdlog::warn("TEST FAULT INJECTION ACTIVE on rank {} (TRAINRUN_FAULTS): {}", rank_,
                 faults_.describe());

  peak_gflops_ = measure_gemm_peak_gflops(*be_, 1024);
  flops_per_step_ = train_flops_per_token(exp_.model) * static_cast<double>(targets_per_step_);

  spdlog::info("trainrun {} | run {} | rank {}/{} on {} | {}", TRAINRUN_VERSION, exp_.name, rank_,
               world_, comm_->host(), be_->describe());
  spdlog::info(
      "model {}: {} parameters, activations {:.1f} MiB per rank | batch {} = {} ranks x "
      "{} micro x {} accum, seq_len {}",
      exp_.model.type, ps.numel(), model_->activation_bytes() / 1048576.0, exp_.train.batch_size,
      world_, micro_, accum_, exp_.model.seq_len);
  spdlog::info("data train: {}", train_data_->describe());
  spdlog::info("data val:   {}", val_data_->describe());
  if (std::isfinite(train_data_->entropy_rate()))
    spdlog::info("data entropy rate {:.4f} nats/token: the lowest loss any model can reach",
                 train_data_->entropy_rate());
  spdlog::info("peak {:.1f} GFLOP/s per rank (measured sgemm) | {:.3g} FLOP per step", peak_gflops_,
               flops_per_step_);
}

void Trainer::restore(const std::string& file) {
  CheckpointData ck = read_checkpoint(file);
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
  const int64_t n = ps.numel();
  be_->copy(ps.params(), Tensor(ck.weights.data(), DType::f32, Device::cpu, {n}));
  const Shard s = opt_->shard();
  if (s.size() > 0) {
    be_->copy(opt_->m(), Tensor(ck.adam_m.data() + s.begin, DType::f32, Device::cpu, {s.size()}));
    be_->copy(opt_->v(), Tensor(ck.adam_v.data() + s.begin, DType::f32, Device::cpu, {s.size()}));
  }
  state_ = ck.state;
  spdlog::info("resumed from {} at step {} ({} tokens seen, written by {} ranks)", file,
               state_.step, state_.tokens_seen, state_.world_size);
}

CheckpointData Trainer::snapshot(int64_t step) {
  ParamStore& ps = model_->params();
  const int64_t n = ps.numel();
  CheckpointData ck;
  ck.state = state_;
  ck.state.step = step;
  ck.state.world_size = world_;
  ck.state.config_yaml = to_yaml(exp_);
  ck.params = ps.entries();
  ck.weights.resize(static_cast<size_t>(n));
  ck.adam_m.assign(static_cast<size_t>(n), 0.0f);
  ck.adam_v.assign(static_cast<size_t>(n), 0.0f);
  be_->copy(Tensor(ck.weights.data(), DType::f32, Device::cpu, {n}), ps.params());
  const Shard s = opt_->shard();
  if (s.size() > 0) {
    be_->copy(Tensor(ck.adam_m.data() + s.begin, DType::f32, Device::cpu, {s.size()}), opt_->m());
    be_->copy(Tensor(ck.adam_v.data() + s.begin, DType::f32, Device::cpu, {s.size()}), opt_->v());
  }
  if (exp_.distributed.zero && world_ > 1) {
    comm_->all_gather(Tensor(ck.adam_m.data(), DType::f32, Device::cpu, {n}));
    comm_->all_gather(Tensor(ck.adam_v.data(), DType::f32, Device::cpu, {n}));
  }
  return ck;
}

void Trainer::save_checkpoint(int64_t step, double* seconds) {
  phase("checkpoint", step);
  if (metrics_) metrics_->flush();  // metrics.h5 holds every row up to the checkpoint
  const double t0 = now();
  CheckpointData ck = snapshot(step);  // collective under ZeRO: every rank takes part
  double blocked = 0;
  if (rank_ == 0) {
    blocked = ckpt_->save(std::move(ck));
    if (!exp_.checkpoint.async) ckpt_->wait();
  }
  comm_->barrier();
  (void)blocked;
  if (seconds) *seconds += now() - t0;
}

StepTimes Trainer::train_step(int64_t step, double lr, double* loss, double* grad_norm, bool* bad) {
  StepTimes t;
  const double t_start = now();
  ParamStore& ps = model_->params();
  be_->fill(ps.grads(), 0.0);
  const float scale = 1.0f / static_cast<float>(targets_per_step_);
  double local_loss = 0;
  for (int m = 0; m < accum_; ++m) {
    phase("data", step);
    t.data += train_loader_->next(x_.data(), y_.data());
    // Keep the next micro-batch (or the next step's first) loading while this one computes.
    if (m + 1 < accum_)
      train_loader_->prefetch(first_sample(step, m + 1), micro_);
    else
      train_loader_->prefetch(first_sample(step + 1, 0), micro_);
    model_->set_batch(x_.data(), y_.data());
    phase("forward", step);
    double t0 = now();
    Tracer::Scope fwd_span(tracer_.get(), "forward", "phase");
    local_loss += model_->forward(
        true, hash_combine(exp_.seed, static_cast<uint64_t>(first_sample(step, m))));
    double t1 = now();
    t.forward += t1 - t0;
    phase("backward", step);
    const bool last = m + 1 == accum_;
    GradReadyFn ready;
    if (last && grad_sync_) ready = [this](int64_t b, int64_t e) { grad_sync_->ready(b, e); };
    Tracer::Scope bwd_span(tracer_.get(), "backward", "phase");
    model_->backward(scale, hash_combine(exp_.seed, static_cast<uint64_t>(first_sample(step, m))),
                     ready);
    t.backward += now() - t1;
  }
  // Every micro-batch's loss is a mean over the same number of targets, so the global loss is
  // the mean of all micro-batch means over all ranks.
  phase("comm", step);
  double t0 = now();
  if (grad_sync_) {
    t.comm_wait += grad_sync_->finish();
    tracer_->span("allreduce wait", "comm", t0, now());
    t.comm_total += grad_sync_->take_comm_seconds();
  } else if (exp_.distributed.zero && world_ > 1) {
    dcomm().reduce_scatter_sum(ps.grads());
    tracer_->span("reduce_scatter", "comm", t0, now());
    t.comm_wait += now() - t0;
    t.comm_total = t.comm_wait;
  }
  if (faults_.poison(step)) be_->fill(ps.grads(), NAN);
  // Loss, squared grad norm and any rank's stop request travel in one small allreduce.
  double stats[3] = {local_loss / accum_, 0.0, static_cast<double>(stop_signal())};
  const Shard s = opt_->shard();
  const Tensor my_grads = ps.grads().slice(s.begin, {s.size()});
  stats[1] = s.size() > 0 ? be_->sum_squares(my_grads) : 0.0;
  if (world_ > 1) {
    Tensor st(stats, DType::f64, Device::cpu, {3});
    const double ts = now();
    comm_->allreduce_sum(st);
    t.comm_wait += now() - ts;
    t.comm_total += now() - ts;
    tracer_->span("allreduce loss+norm", "comm", ts, now());
    stats[0] /= world_;
    if (!exp_.distributed.zero) stats[1] /= world_;  // every rank holds the full, same sum
  }
  t.comm_wait += 0;
  stop_requested_ = stats[2] != 0;
  *loss = stats[0];
  *grad_norm = std::sqrt(stats[1]);
  phase("optimizer", step);
  double t_opt = now();
  *bad = !std::isfinite(*loss) || !std::isfinite(*grad_norm);
  if (!*bad) {
    if (exp_.optimizer.grad_clip > 0 && *grad_norm > exp_.optimizer.grad_clip)
      be_->scale(my_grads, exp_.optimizer.grad_clip / (*grad_norm + 1e-6));
    opt_->step(lr, step + 1);
    if (exp_.distributed.zero && world_ > 1) {
      double tc = now();
      dcomm().all_gather(ps.params());
      tracer_->span("all_gather params", "comm", tc, now());
      t.comm_wait += now() - tc;
      t.comm_total += now() - tc;
    }
  }
  be_->synchronize();
  t.optimizer = now() - t_opt;
  t.total = now() - t_start;
  return t;
}

double Trainer::evaluate() {
  if (exp_.train.eval_steps <= 0) return NAN;
  phase("eval", state_.step);
  double sum = 0;
  for (int e = 0; e < exp_.train.eval_steps; ++e) {
    for (int m = 0; m < accum_; ++m) {
      // The same validation samples every time, so evaluations are comparable across steps.
      val_loader_->fetch(first_sample(e, m), micro_, x_.data(), y_.data());
      model_->set_batch(x_.data(), y_.data());
      sum += model_->forward(false, 0);
    }
  }
  double v = sum / (exp_.train.eval_steps * accum_);
  phase("comm", state_.step);
  if (world_ > 1) {
    Tensor t(&v, DType::f64, Device::cpu, {1});
    comm_->allreduce_avg(t);
  }
  return v;
}

void Trainer::log_step(int64_t step, double loss, double lr, double norm, const StepTimes& t) {
  const double tokens = static_cast<double>(targets_per_step_);
  const double tps = tokens / t.total;
  const double mfu = flops_per_step_ / t.total / (peak_gflops_ * 1e9 * world_);
  const double hidden = t.comm_total > 0 ? std::max(0.0, 1.0 - t.comm_wait / t.comm_total) : 0.0;
  if (metrics_) {
    metrics_->append("train", {{"step", double(step)},
                               {"loss", loss},
                               {"lr", lr},
                               {"grad_norm", norm},
                               {"tokens_per_sec", tps},
                               {"mfu", mfu},
                               {"step_time", t.total},
                               {"t_data", t.data},
                               {"t_forward", t.forward},
                               {"t_backward", t.backward},
                               {"t_comm", t.comm_total},
                               {"t_comm_exposed", t.comm_wait},
                               {"comm_hidden", hidden},
                               {"t_optimizer", t.optimizer},
                               {"t_checkpoint", t.checkpoint},
                               {"tokens_seen", double(state_.tokens_seen)}});
    metrics_->flush();
  }
}

void Trainer::event(int64_t step, const std::string& name, MetricRow extra) {
  if (!metrics_) return;
  MetricRow row = {{"step", double(step)}, {"event", name}};
  row.insert(row.end(), extra.begin(), extra.end());
  metrics_->append("event", row);
  metrics_->flush();
}

void Trainer::check_spike(int64_t step, double loss) {
  const double z_limit = exp_.fault_tolerance.spike_zscore;
  if (z_limit > 0 && recent_losses_.size() >= 10) {
    double mean = 0, var = 0;
    for (double l : recent_losses_) mean += l;
    mean /= recent_losses_.size();
    for (double l : recent_losses_) var += (l - mean) * (l - mean);
    const double sd = std::sqrt(var / recent_losses_.size());
    const double z = sd > 0 ? (loss - mean) / sd : 0;
    if (z > z_limit) {
      spdlog::warn(
          "step {}: loss spike {:.4f} is {:.1f} std devs above the last {} steps' "
          "mean {:.4f} (warning only)",
          step, loss, z, recent_losses_.size(), mean);
      event(step, "loss_spike", {{"loss", loss}, {"zscore", z}});
    }
  }
  recent_losses_.push_back(loss);
  if (recent_losses_.size() > 50) recent_losses_.pop_front();
}

// Too many non-finite steps in a row: go back to the newest good checkpoint with a lower
// learning rate instead of training on garbage. False when there is nothing to go back to or the
// rollbacks are used up.
bool Trainer::rollback(int64_t* step) {
  if (rollbacks_ >= exp_.fault_tolerance.max_rollbacks) {
    spdlog::error("{} non-finite steps in a row after {} rollback(s): giving up (exit {})",
                  exp_.fault_tolerance.max_bad_steps, rollbacks_, int(kExitGaveUp));
    event(*step, "gave_up", {{"rollbacks", double(rollbacks_)}});
    return false;
  }
  phase("checkpoint", *step);
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
  train_loader_->next(x_.data(), y_.data());  // drain the pending prefetch
  restore(*file);
  state_.bad_steps_total = bad_total;
  state_.lr_scale = scale;
  ++rollbacks_;
  const int64_t from = *step;
  *step = state_.step;
  if (metrics_) metrics_ = std::make_unique<MetricsLog>(exp_.run_dir, *step);
  spdlog::warn("rolled back from step {} to step {} ({}); learning rate now x{:.3g}", from, *step,
               *file, scale);
  event(*step, "rollback", {{"from_step", double(from)}, {"lr_scale", scale}});
  return true;
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

// Every logging.every steps: each rank's median step and phase times over the window are
// gathered; rank 0 names the ranks whose time outside collectives is well above the others'.
void Trainer::check_stragglers(int64_t step) {
  double mine[6] = {};
  for (size_t c = 0; c < 6; ++c) {
    std::vector<double> v;
    for (const auto& s : samples_) v.push_back(s[c]);
    if (v.empty()) continue;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    mine[c] = v[v.size() / 2];
  }
  samples_.clear();
  if (world_ < 2) return;
  phase("comm", step);
  std::vector<double> all(static_cast<size_t>(6 * world_));
  comm_->all_gather_doubles(mine, 6, all.data());
  if (rank_ != 0) return;
  std::vector<RankTiming> ranks(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r) {
    RankTiming& x = ranks[static_cast<size_t>(r)];
    x.rank = r;
    x.host = hosts_[static_cast<size_t>(r)];
    x.step = all[static_cast<size_t>(6 * r)];
    for (int p = 0; p < kPhaseCount; ++p) x.phases[p] = all[static_cast<size_t>(6 * r + 1 + p)];
  }
  for (const Straggler& s : find_stragglers(ranks, exp_.logging.straggler_margin)) {
    spdlog::warn(
        "straggler: rank {} on {} takes {:.1f} ms per step outside collectives, {:.0f}% "
        "above the other ranks' median {:.1f} ms (mostly {})",
        s.rank, s.host, s.step * 1e3, 100 * (s.step / s.median - 1), s.median * 1e3, s.phase);
    event(step, "straggler",
          {{"rank", double(s.rank)},
           {"host", s.host},
           {"phase", s.phase},
           {"step_time", s.step},
           {"median", s.median}});
  }
}

int Trainer::run() {
  install_stop_signals();
  setup();
  ParamStore& ps = model_->params();
  if (!opts_.resume_file.empty()) {
    restore(opts_.resume_file);
  } else {
    if (rank_ == 0) ps.initialize(exp_.seed);
    if (world_ > 1) dcomm().broadcast(ps.params(), 0);  // rank 0's initial weights everywhere
    state_.seed = exp_.seed;
  }
  if (rank_ == 0) {
    ckpt_ = std::make_unique<Checkpointer>(exp_.run_dir, exp_.checkpoint.keep_last,
                                           exp_.checkpoint.async);
    // A relaunched job that had no checkpoint yet keeps the supervisor's restart event (step 0).
    const char* rc = std::getenv("TRAINRUN_RESTART_COUNT");
    const bool relaunched = rc && std::atoi(rc) > 0;
    metrics_ = std::make_unique<MetricsLog>(
        exp_.run_dir, !opts_.resume_file.empty() ? state_.step : (relaunched ? 0 : -1));
  }

  const int64_t total = exp_.train.steps;
  int64_t step = state_.step;
  train_loader_->prefetch(first_sample(step, 0), micro_);
  double loss = NAN, norm = NAN, lr = 0;
  const double t_run = now();
  double ema_step = 0;
  int exit_code = kExitOk;
  int bad_in_row = 0;
  spdlog::info("training steps {}..{}", step, total);
  while (step < total) {
    lr = learning_rate(exp_.optimizer, step, total) * state_.lr_scale;
    phase("data", step);
    tracer_->set_step(step);
    const double t_iter = now();
    faults_.at_step_start(step);
    bool bad = false;
    const double t_pre = now() - t_iter;  // an injected delay before the step counts as data time
    StepTimes t = train_step(step, lr, &loss, &norm, &bad);
    tracer_->span("step", "step", t_iter, now());
    samples_.push_back(
        {t.total + t_pre, t.data + t_pre, t.forward, t.backward, t.comm_wait, t.optimizer});
    if (bad) {
      ++state_.bad_steps_total;
      ++bad_in_row;
      spdlog::warn("step {}: non-finite loss {} or grad norm {}: update skipped ({} in a row)",
                   step, loss, norm, bad_in_row);
      event(step, "bad_step", {{"loss", loss}, {"grad_norm", norm}});
      if (bad_in_row >= exp_.fault_tolerance.max_bad_steps) {
        bad_in_row = 0;
        if (!rollback(&step)) {
          exit_code = kExitGaveUp;
          break;
        }
        train_loader_->prefetch(first_sample(step, 0), micro_);
        continue;
      }
    } else {
      bad_in_row = 0;
      check_spike(step, loss);
    }
    ++step;
    state_.step = step;
    state_.tokens_seen += targets_per_step_;
    state_.samples_seen = step * exp_.train.batch_size;
    ema_step = ema_step == 0 ? t.total : 0.9 * ema_step + 0.1 * t.total;
    watchdog_->step_done(t.total);

    const bool eval_now =
        exp_.train.eval_every > 0 && (step % exp_.train.eval_every == 0 || step == total);
    if (eval_now) {
      last_val_loss_ = evaluate();
      if (metrics_) {
        metrics_->append("eval", {{"step", double(step)}, {"val_loss", last_val_loss_}});
        metrics_->flush();
      }
      if (console_) {
        if (tty_) fmt::print(stderr, "\r\033[K");
        spdlog::info("step {}/{} | val loss {:.4f}", step, total, last_val_loss_);
      }
    }
    // A stop request must be seen by every rank at the same step boundary: with several ranks
    // it is the one agreed in this step's stats allreduce (a signal arriving later is seen at
    // the next step); alone, the latest one.
    const bool stop = world_ > 1 ? stop_requested_ : stop_signal() != 0;
    const bool ckpt_now =
        (exp_.checkpoint.every > 0 && step % exp_.checkpoint.every == 0) || step == total || stop;
    if (ckpt_now) save_checkpoint(step, &t.checkpoint);
    if (step % exp_.logging.every == 0 || step == total || step == 1) {
      log_step(step, loss, lr, norm, t);
      if (step % exp_.logging.every == 0) check_stragglers(step);
      if (console_) {
        const double eta = ema_step * static_cast<double>(total - step);
        const std::string line = fmt::format(
            "step {}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.0f} tok/s | MFU {:.1f}% | "
            "{:.0f} ms/step | ETA {}",
            step, total, loss, lr, norm, targets_per_step_ / t.total,
            100.0 * flops_per_step_ / t.total / (peak_gflops_ * 1e9 * world_), t.total * 1e3,
            format_duration(eta));
        if (tty_) {
          fmt::print(stderr, "\r\033[K{}", line);
          std::fflush(stderr);
        } else {
          spdlog::info("{}", line);
        }
      }
    }
    if (stop) {
      const int sig = stop_signal();
      if (tty_) fmt::print(stderr, "\n");
      spdlog::warn(
          "stop requested (signal {}): checkpoint saved at step {}; resume with "
          "`trainrun --resume {}`",
          sig ? sig : SIGTERM, step, exp_.run_dir);
      exit_code = sig == SIGINT ? kExitInterrupted : kExitResumeMe;
      break;
    }
  }
  if (tty_) fmt::print(stderr, "\n");
  phase("checkpoint", step);
  if (ckpt_) ckpt_->wait();
  // No rank may exit before rank 0's last (possibly background) write is on disk: under mpirun
  // the first rank to exit with 75 ends the job.
  phase("sync", step);
  comm_->barrier();
  // Every rank must end with the same weights; the logs let a test (or a person) check it.
  tracer_->flush();
  spdlog::info("rank {} parameter checksum {:016x} at step {}", rank_, parameter_checksum(), step);
  if (exit_code == kExitOk && console_) {
    const double secs = now() - t_run;
    spdlog::info(
        "done: {} steps in {} | final train loss {:.4f}{}", step, format_duration(secs), loss,
        std::isfinite(last_val_loss_) ? fmt::format(" | val loss {:.4f}", last_val_loss_) : "");
    const double h = train_data_->entropy_rate();
    if (std::isfinite(h))
      spdlog::info("best possible loss on this data is {:.4f} nats/token: {:.4f} above it", h,
                   (std::isfinite(last_val_loss_) ? last_val_loss_ : loss) - h);
    spdlog::info("run directory: {}", fs::absolute(exp_.run_dir).string());
  }
  return exit_code;
}

}  // namespace

int run_training(const Experiment& exp, const RunOptions& opts) {
  Trainer t(exp, opts);
  return t.run();
}

}  // namespace trainrun
