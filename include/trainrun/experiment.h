// Experiment: the resolved configuration as plain structs. Produced by config/ (parse, defaults,
// overrides, validation) and read by everything downstream; nothing writes back into it.
// Field names match the YAML keys exactly (model.n_layer <-> Experiment::model.n_layer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainrun {

struct ModelConfig {
  std::string type = "gpt";  // gpt | mlp
  int vocab_size = 256;
  int seq_len = 64;
  int n_layer = 4;
  int n_head = 4;
  int d_model = 128;
  double dropout = 0.0;
  std::vector<int> hidden = {512};  // mlp only
  std::string activation = "gelu";  // mlp only: gelu | relu
};

struct DataConfig {
  std::string train;                   // token shard file, directory or glob
  std::string val;                     // token shard file, directory or glob
  std::string text;                    // a text file, byte-tokenized on the fly
  std::string synthetic;               // built-in source: "markov" (or empty)
  double val_fraction = 0.1;           // for data.text and data.synthetic: tail fraction held out
  int markov_order = 1;                // for data.synthetic: markov
  int64_t synthetic_tokens = 1 << 20;  // length of the built-in stream
};

struct TrainConfig {
  int64_t steps = 1000;
  int batch_size = 8;        // global sequences per optimizer step
  int micro_batch_size = 0;  // per rank per micro-step; 0 = batch_size / world
  int64_t eval_every = 100;  // 0 = never
  int eval_steps = 10;
  std::string precision = "fp32";  // fp32 | bf16 (bf16 on CUDA only)
};

struct OptimizerConfig {
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 100;
  std::string schedule = "cosine";  // cosine | linear | constant
  std::vector<double> betas = {0.9, 0.99};
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0 = off
};

struct CheckpointConfig {
  int64_t every = 0;  // steps; 0 = only at the end
  int keep_last = 3;
  bool async = false;
};

struct LoggingConfig {
  int64_t every = 10;
  double straggler_margin = 0.2;  // a rank this much slower than the median is named
  bool tensorboard = true;        // event files in RUN_DIR/tb
};

struct DistributedConfig {
  int nproc = 1;  // ranks per node
  int nodes = 1;
  int zero = 0;  // 0 | 1
  std::string hostfile;
  bool oversubscribe = false;
};

struct LauncherConfig {
  std::vector<std::string> mpirun_args;
};

struct FaultToleranceConfig {
  int max_restarts = 0;
  double step_timeout = 0;  // seconds; 0 = sized from the measured step time
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
  std::string run_dir;         // default: runs/<name>
  std::string device = "cpu";  // cpu | cuda | auto
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
