// Experiment: the resolved configuration as plain structs. Produced by config/ (parse, defaults,
// overrides, validation) and read by everything downstream; nothing writes back into it.
// Field names match the YAML keys exactly (model.n_layer <-> Experiment::model.n_layer). Keys
// with a fixed set of values are enums, parsed once by config/; their names are the YAML words
// (the EnumNames tables below are also the schema's allowed values).
#pragma once

#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "trainrun/core/enum_names.h"

namespace trainrun {

// Where to train: cpu, cuda, or auto (cuda when a GPU is usable, else cpu).
enum class DeviceChoice : uint8_t { cpu, cuda, automatic };
template <>
struct EnumNames<DeviceChoice> {
  static constexpr std::string_view names[] = {"cpu", "cuda", "auto"};
  static_assert(std::size(names) == 1 + static_cast<size_t>(DeviceChoice::automatic));
};

// Tensor parallelism's overlap of a column-parallel layer's backward all-reduce with its weight-
// gradient GEMM: auto is on over NCCL (the collective runs on its own stream) and off over MPI
// (Open MPI progresses a non-blocking collective only inside MPI calls, so it would run at the
// wait anyway, and its non-blocking all-reduce is the slower one: bench/RESULTS.md 47).
enum class TpOverlap : uint8_t { automatic, on, off };
template <>
struct EnumNames<TpOverlap> {
  static constexpr std::string_view names[] = {"auto", "true", "false"};
  static_assert(std::size(names) == 1 + static_cast<size_t>(TpOverlap::off));
};

// The model family (model_spec.h holds what each family is).
enum class ModelType : uint8_t { gpt, mlp, llama };
template <>
struct EnumNames<ModelType> {
  static constexpr std::string_view names[] = {"gpt", "mlp", "llama"};
  static_assert(std::size(names) == 1 + static_cast<size_t>(ModelType::llama));
};

// The MLP's hidden activation.
enum class ActivationKind : uint8_t { gelu, relu };
template <>
struct EnumNames<ActivationKind> {
  static constexpr std::string_view names[] = {"gelu", "relu"};
  static_assert(std::size(names) == 1 + static_cast<size_t>(ActivationKind::relu));
};

// What a transformer's backward has of each block's forward: everything it saved (none); only
// the block's input and its first norm's output, the rest recomputed (full); or the outputs of
// its GEMMs and attention (with the softmax statistics), the cheap pointwise ops' outputs
// recomputed (selective: norms, the MLP's activation, residual adds).
enum class ActivationCheckpointing : uint8_t { none, full, selective };
template <>
struct EnumNames<ActivationCheckpointing> {
  static constexpr std::string_view names[] = {"none", "full", "selective"};
  static_assert(std::size(names) == 1 + static_cast<size_t>(ActivationCheckpointing::selective));
};

enum class Precision : uint8_t { fp32, bf16 };
template <>
struct EnumNames<Precision> {
  static constexpr std::string_view names[] = {"fp32", "bf16"};
  static_assert(std::size(names) == 1 + static_cast<size_t>(Precision::bf16));
};

// The learning-rate decay after warmup.
enum class LrSchedule : uint8_t { cosine, linear, constant };
template <>
struct EnumNames<LrSchedule> {
  static constexpr std::string_view names[] = {"cosine", "linear", "constant"};
  static_assert(std::size(names) == 1 + static_cast<size_t>(LrSchedule::constant));
};

// Which window of tokens each training sample reads (docs/data-format.md, "Sampling").
// windows: a window at a hashed position, drawn with replacement (the order runs always had);
// epochs: each source cut into seq_len windows, every one read once per epoch in a shuffled
// order; auto: epochs for data.mix, windows otherwise.
enum class DataOrder : uint8_t { automatic, windows, epochs };
template <>
struct EnumNames<DataOrder> {
  static constexpr std::string_view names[] = {"auto", "windows", "epochs"};
  static_assert(std::size(names) == 1 + static_cast<size_t>(DataOrder::epochs));
};

struct ModelConfig {
  ModelType type = ModelType::gpt;
  int vocab_size = 256;
  int seq_len = 64;
  int n_layer = 4;
  int n_head = 4;
  int d_model = 128;
  double dropout = 0.0;
  std::vector<int> hidden = {512};                   // mlp only
  ActivationKind activation = ActivationKind::gelu;  // mlp only
  int n_kv_head = 0;                                 // llama: key/value heads; 0 = n_head
  double rope_theta = 10000.0;                       // llama: RoPE base
  int ffn_hidden = 0;                                // llama: SwiGLU width; 0 = auto
  bool tie_embeddings = true;                        // head shares wte (gpt: always)
  std::string init_from;  // a Hugging Face model folder the fresh run starts from (hf_import.h)
};

// llama's SwiGLU hidden width: ffn_hidden, or when 0 ceil(8 d_model / 3) rounded up to a
// multiple of 64 (the Llama recipe: the same parameters as a 4x GELU MLP).
inline int llama_ffn_hidden(const ModelConfig& m) {
  if (m.ffn_hidden > 0) return m.ffn_hidden;
  const int h = (8 * m.d_model + 2) / 3;
  return (h + 63) / 64 * 64;
}
// llama's key/value heads: n_kv_head, or n_head when 0.
inline int llama_kv_heads(const ModelConfig& m) {
  return m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
}

// One source of a data mixture (data.mix).
struct MixSource {
  std::string path;   // token shard file, directory or glob
  double weight = 1;  // share of the samples, relative to the other sources' weights
  std::string name;   // shown in logs and the report; "" = derived from path
  std::string val;    // validation shards; "" = the last data.val_fraction of path
  bool operator==(const MixSource&) const = default;
};

struct DataConfig {
  std::string train;                   // token shard file, directory or glob
  std::string val;                     // token shard file, directory or glob
  std::string text;                    // a text file, byte-tokenized on the fly
  std::string synthetic;               // built-in source: "markov" (or empty)
  std::string tokenizer;               // tokenizer.json data.train was made with; "" = its own
  double val_fraction = 0.1;           // for data.text and data.synthetic: tail fraction held out
  int markov_order = 1;                // for data.synthetic: markov
  int64_t synthetic_tokens = 1 << 20;  // length of the built-in stream
  std::vector<MixSource> mix;          // a weighted mixture of shard sources (instead of train)
  DataOrder order = DataOrder::automatic;
  int shuffle_block = 1;          // epochs: samples read in sequence, the unit the shuffle moves
  bool document_masking = false;  // attention stays within documents; positions restart
  int64_t eot = -1;               // the id between documents; -1: the tokenizer's <|endoftext|>
};

struct TrainConfig {
  int64_t steps = 1000;
  int batch_size = 8;        // global sequences per optimizer step
  int micro_batch_size = 0;  // per rank per micro-step; 0 = batch_size / world
  int64_t eval_every = 100;  // 0 = never
  int eval_steps = 10;
  Precision precision = Precision::fp32;  // bf16: mixed precision (docs/cuda.md)
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::none;
  // GOMP_SPINCOUNT for the CPU path's OpenMP threads (omp_wait.h); -1 = libgomp's default.
  int64_t omp_spincount = 3000;
};

// Whether the model recomputes (some of) its blocks' activations in backward.
inline bool recomputes(const TrainConfig& t) {
  return t.activation_checkpointing != ActivationCheckpointing::none;
}

struct OptimizerConfig {
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 100;
  LrSchedule schedule = LrSchedule::cosine;
  std::vector<double> betas = {0.9, 0.99};
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0 = off
};

struct CheckpointConfig {
  int64_t every = 0;  // steps; 0 = only at the end
  int keep_last = 3;
  bool async = false;
  bool sharded = false;  // one file per rank plus a manifest (docs/checkpoint-format.md)
};

struct LoggingConfig {
  int64_t every = 10;
  double straggler_margin = 0.2;  // a rank this much slower than the median is named
  bool tensorboard = true;        // event files in RUN_DIR/tb
  int prometheus_port = 0;        // rank 0 serves /metrics here; 0 = off
  std::string prometheus_address = "0.0.0.0";
};

struct DistributedConfig {
  int nproc = 1;  // ranks per node
  int nodes = 1;
  int zero = 0;          // 0 | 1 | 2 | 3 (ZeRO stage)
  int dp_replicate = 1;  // the device mesh's replica groups (device_mesh.h); divides the ranks
  // Tensor parallel: the ranks each layer splits over, the mesh's innermost axis (consecutive
  // ranks, one node's unless tp_across_nodes).
  int tp = 1;
  bool tp_across_nodes = false;
  TpOverlap tp_overlap = TpOverlap::automatic;
  // ZeRO-3: free a unit's gathered weights after its forward (and gather them again for its
  // backward), or keep them until its backward (less traffic, more memory).
  bool reshard_after_forward = true;
  // ZeRO-2/3: the dtype the gradients are reduce-scattered in (bf16 halves the traffic; each
  // rank's slice is added to its f32 gradient shard).
  Precision reduce_dtype = Precision::fp32;
  std::string hostfile;
  bool oversubscribe = false;
};

struct LauncherConfig {
  std::vector<std::string> mpirun_args;
};

struct FaultToleranceConfig {
  int max_restarts = 0;
  double step_timeout = 0;  // seconds; 0 = sized from the measured step time
  // Seconds the launcher gives a failed job to tear down (a rank recorded a failure) before it
  // kills mpirun: Open MPI can wait forever on a host that went silent.
  double teardown_timeout = 30;
  // Seconds mpirun gets to start the ranks (the first rank's heartbeat) before the launcher
  // ends it: a blocked mpirun never says so itself. Generous: a false alarm kills a launch that
  // was only slow (thousands of ranks, a large checkpoint every rank reads before MPI starts).
  double launch_timeout = 300;
  int max_bad_steps = 5;
  int max_rollbacks = 2;
  double rollback_lr_factor = 0.5;
  double restart_backoff = 5;
  double spike_zscore = 6;
};

struct SlurmConfig {
  std::vector<std::string> extra;  // extra #SBATCH lines
};

struct Experiment {
  std::string name = "run";
  uint64_t seed = 1337;
  std::string run_dir;  // default: runs/<name>
  DeviceChoice device = DeviceChoice::cpu;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimizerConfig optimizer;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  DistributedConfig distributed;
  LauncherConfig launcher;
  FaultToleranceConfig fault_tolerance;
  SlurmConfig slurm;

  std::string source_path;  // the YAML file it came from (not a key)
  int world_size() const { return distributed.nproc * distributed.nodes; }
};

}  // namespace trainrun
