#include "schema.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

namespace trainrun::config {
namespace {

template <auto M>
auto& top(Experiment& e) {
  return e.*M;
}
template <auto S, auto M>
auto& sub(Experiment& e) {
  return (e.*S).*M;
}

// The key is spelled from the member's own name, so a YAML key can never drift from its field.
#define TOP(mem) .key = #mem, .ref = &top<&Experiment::mem>
#define KEY(sec, mem) \
  .key = #sec "." #mem, .ref = &sub<&Experiment::sec, &decltype(Experiment::sec)::mem>

constexpr bool kResumable = true;
constexpr bool kFixed = false;  // part of what the checkpoint is: changing it means a new run

// An enum member's allowed values are its EnumNames (experiment.h), never written here: the
// words YAML accepts, the docs list and the enum's values are one table.
std::vector<Field> with_enum_names(std::vector<Field> fields) {
  for (auto& f : fields) {
    std::visit(
        [&f](auto m) {
          using T = std::remove_cvref_t<decltype(m(std::declval<Experiment&>()))>;
          if constexpr (NamedEnum<T>) {
            if (!f.allowed.empty())
              throw std::logic_error(std::string(f.key) +
                                     ": an enum key's allowed values are its EnumNames; list none");
            const auto names = enum_names<T>();
            f.allowed.assign(names.begin(), names.end());
          }
        },
        f.ref);
  }
  return fields;
}

std::vector<Field> make_schema() {
  return with_enum_names({
      {TOP(name), .description = "Run name; names the run directory. Letters, digits, . _ -",
       .resumable = kFixed, .file_name = true},
      {TOP(seed), .description = "Seed for initialisation, data order and dropout",
       .resumable = kFixed},
      {TOP(run_dir), .description = "Run directory: resolved config, checkpoints, metrics, logs",
       .resumable = kFixed, .default_note = "runs/<name>"},
      {TOP(device), .description = "Where to train; auto picks cuda when a GPU is usable",
       .resumable = kResumable},

      {
          KEY(model, type),
          .description = "Model family",
          .resumable = kFixed,
      },
      {KEY(model, vocab_size), .description = "Token vocabulary size", .resumable = kFixed,
       .min = 2, .max = 2147483647},
      {KEY(model, seq_len), .description = "Context length in tokens", .resumable = kFixed,
       .min = 1},
      {KEY(model, n_layer), .description = "Transformer blocks (gpt, llama)", .resumable = kFixed,
       .min = 1, .max = 4096},
      {KEY(model, n_head), .description = "Attention heads per block (gpt, llama); divides d_model",
       .resumable = kFixed, .min = 1},
      {KEY(model, d_model), .description = "Embedding width (gpt, llama)", .resumable = kFixed,
       .min = 1},
      {KEY(model, dropout), .description = "Dropout probability", .resumable = kFixed, .min = 0,
       .max = 1, .max_open = true},
      {KEY(model, hidden), .description = "Hidden layer widths (mlp)", .resumable = kFixed,
       .min = 1},
      {
          KEY(model, activation),
          .description = "Hidden activation (mlp)",
          .resumable = kFixed,
      },
      {KEY(model, n_kv_head),
       .description = "Key/value heads per block (llama; grouped-query attention, 1 = "
                      "multi-query); divides n_head; 0 = n_head",
       .resumable = kFixed, .min = 0},
      {KEY(model, rope_theta), .description = "Rotary position embedding base (llama)",
       .resumable = kFixed, .min = 0, .min_open = true},
      {KEY(model, ffn_hidden),
       .description = "SwiGLU hidden width (llama); 0 = 8 d_model / 3 rounded up to a multiple "
                      "of 64",
       .resumable = kFixed, .min = 0},
      {KEY(model, tie_embeddings),
       .description = "The output head shares the token embedding (gpt: always; llama: false "
                      "adds a separate lm_head)",
       .resumable = kFixed},
      {KEY(model, init_from),
       .description = "A Hugging Face model folder (config.json and safetensors) a fresh run "
                      "starts from instead of random weights (gpt: GPT-2, llama: Llama; "
                      "docs/huggingface.md); the model keys left out are filled from its "
                      "config.json (all but seq_len), those given must agree with it. A resume "
                      "never reads it again",
       .resumable = kFixed},

      {KEY(data, train), .description = "Training token shards: a file, directory or glob",
       .resumable = kFixed},
      {KEY(data, val), .description = "Validation token shards (needs data.train)",
       .resumable = kFixed},
      {KEY(data, text), .description = "A text file, byte-tokenized on the fly",
       .resumable = kFixed},
      {KEY(data, synthetic), .description = "A built-in token stream", .resumable = kFixed,
       .allowed = {"", "markov"}},
      {KEY(data, tokenizer),
       .description = "tokenizer.json data.train was made with: checked against the shards' "
                      "manifest.json, used by sample",
       .resumable = kFixed},
      {KEY(data, val_fraction),
       .description = "data.text / data.synthetic: tail fraction held out for evaluation",
       .resumable = kFixed, .min = 0, .max = 1, .max_open = true},
      {KEY(data, markov_order), .description = "data.synthetic markov: order of the chain",
       .resumable = kFixed, .min = 1, .max = 2},
      {KEY(data, synthetic_tokens), .description = "data.synthetic: length of the stream",
       .resumable = kFixed, .min = 2},
      {KEY(data, mix),
       .description = "A weighted mixture of token shard sources, instead of data.train: a list "
                      "of {path, weight, name, val} (docs/data-format.md)",
       .resumable = kFixed},
      {KEY(data, order),
       .description = "Sample order: windows (hashed positions, with replacement), epochs "
                      "(every window once per epoch, shuffled); auto = epochs for data.mix, "
                      "windows otherwise",
       .resumable = kFixed},
      {KEY(data, shuffle_block),
       .description = "data.order epochs: consecutive samples read in sequence, the unit the "
                      "per-epoch shuffle moves (larger reads more sequentially)",
       .resumable = kFixed, .min = 1},
      {KEY(data, document_masking),
       .description = "Packed documents do not attend to each other: a position sees only its "
                      "own document's earlier positions, and positions (gpt's learned, llama's "
                      "RoPE) restart at each document (needs token shards)",
       .resumable = kFixed},
      {KEY(data, eot),
       .description = "data.document_masking: the end-of-text id between documents, for shards "
                      "without a document index (.idx); -1 = the tokenizer's <|endoftext|> "
                      "(byte-level shards: 0 unless prepared with --eot)",
       .resumable = kFixed, .min = -1},

      {KEY(train, steps), .description = "Optimizer steps in the whole run",
       .resumable = kResumable, .min = 1},
      // The data cursor and step count are in units of this batch: changing it mid-run would
      // skip or repeat samples.
      {KEY(train, batch_size), .description = "Global sequences per optimizer step",
       .resumable = kFixed, .min = 1},
      {KEY(train, micro_batch_size),
       .description = "Sequences per rank per micro-step; 0 = batch_size / ranks",
       .resumable = kResumable, .min = 0},
      {KEY(train, eval_every), .description = "Evaluate every N steps; 0 = never",
       .resumable = kResumable, .min = 0},
      {KEY(train, eval_steps), .description = "Batches per evaluation", .resumable = kResumable,
       .min = 1},
      {KEY(train, precision),
       .description = "Compute precision; bf16: bf16 weights and activations, fp32 master "
                      "weights, gradients and AdamW moments (on the CPU: the rounding reference)",
       .resumable = kResumable},
      {KEY(train, activation_checkpointing),
       .description = "full: keep each transformer block's input (and its first norm's output) "
                      "and recompute the rest of its forward during its backward; selective: "
                      "keep the GEMMs' and attention's outputs and recompute only the pointwise "
                      "ops (norms, the MLP's activation, residual adds). Activation memory for "
                      "more compute, the same numbers (gpt, llama)",
       .resumable = kResumable},
      {KEY(train, omp_spincount),
       .description = "Spins an idle OpenMP thread waits before sleeping (GOMP_SPINCOUNT; an "
                      "environment setting wins); -1 = libgomp's default, which collapses when "
                      "cores are shared",
       .resumable = kResumable, .min = -1},

      {KEY(optimizer, lr), .description = "Peak learning rate", .resumable = kResumable, .min = 0,
       .min_open = true},
      {KEY(optimizer, min_lr), .description = "Final learning rate of the decay; <= lr",
       .resumable = kResumable, .min = 0},
      {KEY(optimizer, warmup_steps), .description = "Linear warmup steps (may exceed steps)",
       .resumable = kResumable, .min = 0},
      {KEY(optimizer, schedule), .description = "Decay from lr to min_lr after warmup",
       .resumable = kResumable},
      {KEY(optimizer, betas), .description = "AdamW beta1, beta2", .resumable = kResumable,
       .min = 0, .max = 1, .max_open = true, .list_len = 2},
      {KEY(optimizer, eps), .description = "AdamW epsilon", .resumable = kResumable, .min = 0,
       .min_open = true},
      {KEY(optimizer, weight_decay), .description = "Decoupled weight decay (matrices only)",
       .resumable = kResumable, .min = 0},
      {KEY(optimizer, grad_clip), .description = "Clip the global gradient norm; 0 = off",
       .resumable = kResumable, .min = 0},

      {KEY(checkpoint, every), .description = "Checkpoint every N steps; 0 = only at the end",
       .resumable = kResumable, .min = 0},
      {KEY(checkpoint, keep_last), .description = "Checkpoints kept on disk",
       .resumable = kResumable, .min = 1},
      {KEY(checkpoint, async),
       .description = "Write checkpoints from a thread that yields to training (raised when late); "
                      "the step loop waits "
                      "only for the copy of the state",
       .resumable = kResumable},
      {KEY(checkpoint, sharded),
       .description = "No effect, kept so that configs which set it still load: every "
                      "checkpoint is now a folder where each rank writes its part (format 5, "
                      "docs/checkpoint-format.md)",
       .resumable = kResumable},

      {KEY(logging, every), .description = "Log metrics every N steps", .resumable = kResumable,
       .min = 1},
      {KEY(logging, straggler_margin),
       .description = "Name a rank this fraction slower than the median step time",
       .resumable = kResumable, .min = 0},
      // On by default: researchers look for curves in TensorBoard, and the files cost a few
      // hundred bytes per logged step and no dependency.
      {KEY(logging, tensorboard),
       .description = "Write TensorBoard event files to RUN_DIR/tb (on by default: where "
                      "researchers look, at a few hundred bytes per logged step)",
       .resumable = kResumable},
      {KEY(logging, prometheus_port),
       .description = "Rank 0 serves Prometheus metrics on this TCP port at /metrics; 0 = off",
       .resumable = kResumable, .min = 0, .max = 65535},
      // All interfaces by default: Prometheus scrapes from another host.
      {KEY(logging, prometheus_address),
       .description = "Address the Prometheus endpoint binds (0.0.0.0: every interface; "
                      "127.0.0.1: this host only)",
       .resumable = kResumable},

      {KEY(distributed, nproc), .description = "Ranks per node", .resumable = kResumable, .min = 1,
       .max = 4096},
      {KEY(distributed, nodes), .description = "Nodes", .resumable = kResumable, .min = 1,
       .max = 65536},
      {KEY(distributed, zero),
       .description = "ZeRO stage, sharding over the dp_shard ranks: 1 the optimizer state, 2 also "
                      "the gradients, 3 also the parameters (FSDP); 0 replicates everything",
       .resumable = kResumable, .min = 0, .max = 3},
      {KEY(distributed, dp_replicate),
       .description = "Replica groups of the device mesh: sharded state (ZeRO) is split over the "
                      "ranks of a group (dp_shard = ranks / dp_replicate) and copied across "
                      "groups (hybrid sharding, HSDP); must divide the ranks",
       .resumable = kResumable, .min = 1, .max = 65536},
      {KEY(distributed, tp),
       .description = "Tensor parallel: the ranks each transformer layer is split over "
                      "(Megatron's column and row split: attention by heads, the MLP by its "
                      "hidden width), the device mesh's innermost axis; divides the ranks of a "
                      "node, n_head, n_kv_head and the MLP's hidden width",
       .resumable = kResumable, .min = 1, .max = 4096},
      {KEY(distributed, tp_across_nodes),
       .description = "Allow distributed.tp to exceed the ranks of a node (its collectives, "
                      "two per layer each way, then cross the network)",
       .resumable = kResumable},
      {KEY(distributed, tp_overlap),
       .description = "Tensor parallel: run a column-parallel layer's input-gradient all-reduce "
                      "while its weight gradient is computed: auto (on over NCCL, off over MPI, "
                      "whose non-blocking collectives progress only at the wait), true or false; "
                      "the results are the same bits either way",
       .resumable = kResumable},
      {KEY(distributed, reshard_after_forward),
       .description = "ZeRO-3: free each unit's gathered weights after its forward and gather "
                      "them again for its backward (true), or keep them until its backward "
                      "(false: a third less traffic, every unit's weights held at the "
                      "forward's end)",
       .resumable = kResumable},
      {KEY(distributed, reduce_dtype),
       .description = "ZeRO-2/3: the dtype gradients are reduce-scattered in (bf16: half the "
                      "traffic, sums rounded to bf16; each rank's slice then adds into its fp32 "
                      "gradient shard)",
       .resumable = kResumable},
      {KEY(distributed, hostfile), .description = "mpirun hostfile for multi-node runs",
       .resumable = kResumable},
      {KEY(distributed, oversubscribe), .description = "Allow more ranks than cores",
       .resumable = kResumable},

      {KEY(launcher, mpirun_args), .description = "Extra arguments passed to mpirun",
       .resumable = kResumable},

      {KEY(fault_tolerance, max_restarts), .description = "Relaunches after a failed rank",
       .resumable = kResumable, .min = 0},
      {KEY(fault_tolerance, step_timeout),
       .description = "Seconds before a step counts as hung; 0 = from the measured step time",
       .resumable = kResumable, .min = 0},
      {KEY(fault_tolerance, teardown_timeout),
       .description = "Seconds a failed job may take to end before the launcher kills mpirun",
       .resumable = kResumable, .min = 1},
      {KEY(fault_tolerance, launch_timeout),
       .description = "Seconds mpirun may take to start the ranks (their first heartbeat) "
                      "before the launcher ends it (exit 6)",
       .resumable = kResumable, .min = 1},
      {KEY(fault_tolerance, max_bad_steps),
       .description = "Consecutive non-finite steps (skipped) before rolling back",
       .resumable = kResumable, .min = 1},
      {KEY(fault_tolerance, max_rollbacks),
       .description = "Rollbacks to the last checkpoint before giving up (exit 7)",
       .resumable = kResumable, .min = 0},
      {KEY(fault_tolerance, rollback_lr_factor),
       .description = "Learning-rate multiplier applied at each rollback", .resumable = kResumable,
       .min = 0, .max = 1, .min_open = true},
      {KEY(fault_tolerance, restart_backoff),
       .description = "Seconds before the first relaunch; doubles each time, at most 60",
       .resumable = kResumable, .min = 0},
      {KEY(fault_tolerance, spike_zscore),
       .description = "Warn when a loss is this many std devs above the last 50; 0 = off",
       .resumable = kResumable, .min = 0},

      {KEY(slurm, extra), .description = "Extra #SBATCH lines", .resumable = kResumable},
  });
}

#undef TOP
#undef KEY

std::string number(double v) {
  // Bounds are whole numbers or simple fractions; print them as a person would.
  return fmt::format("{}", v);
}

}  // namespace

std::string_view Field::section() const {
  auto dot = key.find('.');
  return dot == std::string_view::npos ? std::string_view{} : key.substr(0, dot);
}

std::string_view Field::leaf() const {
  auto dot = key.find('.');
  return dot == std::string_view::npos ? key : key.substr(dot + 1);
}

std::string Field::type_name() const {
  if (is_enum()) return "enum";
  return std::visit(
      [](auto m) -> std::string {
        using T = std::remove_cvref_t<decltype(m(std::declval<Experiment&>()))>;
        if constexpr (std::is_same_v<T, uint64_t>) return "uint";
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return "int";
        if constexpr (std::is_same_v<T, double>) return "double";
        if constexpr (std::is_same_v<T, bool>) return "bool";
        if constexpr (std::is_same_v<T, std::string>) return "string";
        if constexpr (std::is_same_v<T, std::vector<int>>) return "list<int>";
        if constexpr (std::is_same_v<T, std::vector<double>>) return "list<double>";
        if constexpr (std::is_same_v<T, std::vector<std::string>>) return "list<string>";
        if constexpr (std::is_same_v<T, std::vector<MixSource>>) return "list<source>";
        return "enum";
      },
      ref);
}

std::string Field::allowed_text() const {
  if (is_enum()) {
    std::string out;
    for (auto v : allowed) {
      if (!out.empty()) out += ", ";
      out += v.empty() ? std::string("\"\"") : std::string(v);
    }
    return out;
  }
  std::string out;
  if (min && max) {
    out = fmt::format("{}{}, {}{}", min_open ? "(" : "[", number(*min), number(*max),
                      max_open ? ")" : "]");
  } else if (min) {
    out = fmt::format("{} {}", min_open ? ">" : ">=", number(*min));
  } else if (max) {
    out = fmt::format("{} {}", max_open ? "<" : "<=", number(*max));
  }
  if (list_len >= 0) {
    out = fmt::format("{} values{}{}", list_len, out.empty() ? "" : ", each in ", out);
  }
  if (file_name) out = "[A-Za-z0-9._-]+";
  return out;
}

const std::vector<Field>& schema() {
  static const std::vector<Field> table = make_schema();
  return table;
}

const Field* find_field(std::string_view key) {
  for (const auto& f : schema()) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

const std::vector<std::string_view>& sections() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const auto& f : schema()) {
      auto s = f.section();
      if (!s.empty() && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    }
    return out;
  }();
  return names;
}

bool is_section(std::string_view name) {
  const auto& s = sections();
  return std::find(s.begin(), s.end(), name) != s.end();
}

}  // namespace trainrun::config
