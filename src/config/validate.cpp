#include "validate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "schema.h"
#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"
#include "trainrun/model/model_spec.h"
#include "value.h"

namespace trainrun::config {
namespace {

using Fail = std::vector<Violation>;

void fail(Fail& out, std::vector<std::string_view> keys, std::string message) {
  out.push_back({std::move(keys), std::move(message)});
}

// The llama keys mean nothing to the other families: a value other than the default there is a
// mistake (most likely a forgotten model.type: llama), not something to ignore silently.
void llama_keys_only_for_llama(const Experiment& e, int, Fail& out) {
  const auto& m = e.model;
  if (m.type == ModelType::llama) return;
  const ModelConfig d;
  std::vector<std::string_view> set;
  if (m.n_kv_head != d.n_kv_head) set.push_back("model.n_kv_head");
  if (m.rope_theta != d.rope_theta) set.push_back("model.rope_theta");
  if (m.ffn_hidden != d.ffn_hidden) set.push_back("model.ffn_hidden");
  if (m.tie_embeddings != d.tie_embeddings) set.push_back("model.tie_embeddings");
  if (set.empty()) return;
  const std::string_view type = enum_name(m.type);
  std::string message = fmt::format(
      "{} {} only for model.type llama (model.type is {}): remove {} or set model.type: llama",
      fmt::join(set, ", "), set.size() == 1 ? "applies" : "apply", type,
      set.size() == 1 ? "it" : "them");
  if (m.tie_embeddings != d.tie_embeddings && m.type == ModelType::gpt)
    message += "; a gpt's head is always tied to its token embedding (GPT-2)";
  set.push_back("model.type");
  fail(out, std::move(set), std::move(message));
}

// The configured family's own rules (model_spec.h); docs/config.md lists every family's.
void family_rules(const Experiment& e, int, Fail& out) {
  std::vector<ModelProblem> problems;
  model_spec(e.model.type).validate(e.model, problems);
  for (auto& p : problems) fail(out, std::move(p.keys), std::move(p.message));
}

void one_data_source(const Experiment& e, int, Fail& out) {
  const auto& d = e.data;
  std::vector<std::string_view> sources;
  if (!d.train.empty()) sources.push_back("data.train");
  if (!d.mix.empty()) sources.push_back("data.mix");
  if (!d.text.empty()) sources.push_back("data.text");
  if (!d.synthetic.empty()) sources.push_back("data.synthetic");
  if (sources.empty()) {
    fail(out, {"data.train", "data.mix", "data.text", "data.synthetic"},
         "no training data: set one of data.train, data.mix, data.text or data.synthetic");
  } else if (sources.size() > 1) {
    fail(out, sources,
         fmt::format("{} are {} set: set one of data.train, data.mix, data.text or "
                     "data.synthetic",
                     fmt::join(sources, " and "), sources.size() == 2 ? "both" : "all"));
  }
  if (!d.val.empty() && d.train.empty()) {
    fail(out, {"data.val"},
         "data.val is set without data.train: data.val holds validation shards for data.train; "
         "a data.mix source has its own `val`, and data.text and data.synthetic hold out "
         "data.val_fraction instead");
  }
  if (!d.tokenizer.empty() && d.train.empty() && d.mix.empty()) {
    fail(out, {"data.tokenizer"},
         "data.tokenizer is set without data.train or data.mix: it names the tokenizer token "
         "shards were made with; data.text is bytes and data.synthetic its own symbols");
  }
}

void documents_need_shards(const Experiment& e, int, Fail& out) {
  const auto& d = e.data;
  if (d.eot >= 0 && !d.document_masking) {
    fail(out, {"data.eot"},
         "data.eot is set without data.document_masking: it names the id that separates "
         "documents, which only document masking uses (set data.document_masking: true, or drop "
         "data.eot)");
    return;
  }
  if (!d.document_masking) return;
  if (e.model.type == ModelType::mlp) {
    fail(out, {"data.document_masking", "model.type"},
         "data.document_masking needs attention: model.type mlp reads a fixed context window; "
         "use gpt or llama, or drop data.document_masking");
  } else if (d.train.empty() && d.mix.empty()) {
    fail(out, {"data.document_masking", !d.text.empty() ? "data.text" : "data.synthetic"},
         "data.document_masking needs token shards (data.train or data.mix) with an end-of-text "
         "id between documents: data.text and data.synthetic are one stream (make shards with "
         "`trainrun data prepare`)");
  }
  if (d.eot >= e.model.vocab_size) {
    fail(out, {"data.eot", "model.vocab_size"},
         fmt::format("data.eot={} is not a token of the model's vocabulary (0-{})", d.eot,
                     e.model.vocab_size - 1));
  }
}

// Weights are relative: each is finite and > 0 (check_sources), and so must be their sum, by
// which every share is divided (1.5e308 + 0.5e308 is inf: every share 0, shown as "-nan%").
void mix_weights_sum_finite(const Experiment& e, int, Fail& out) {
  double sum = 0;
  for (const MixSource& s : e.data.mix) sum += s.weight;
  if (!std::isfinite(sum))
    fail(out, {"data.mix"},
         fmt::format("data.mix: the weights sum to {}: they are relative, so scale them down "
                     "(0.75 and 0.25 give what 3 and 1 do)",
                     sum));
}

void something_to_evaluate(const Experiment& e, int, Fail& out) {
  const auto& d = e.data;
  const bool split_by_fraction =
      d.train.empty() && d.mix.empty() && (!d.text.empty() || !d.synthetic.empty());
  if (split_by_fraction && e.train.eval_every > 0 && d.val_fraction <= 0) {
    fail(out, {"data.val_fraction", "train.eval_every"},
         fmt::format("data.val_fraction=0 leaves nothing to evaluate on every {} steps: set "
                     "data.val_fraction above 0 or train.eval_every to 0",
                     e.train.eval_every));
  }
}

void synthetic_fits_a_sequence(const Experiment& e, int, Fail& out) {
  const auto& d = e.data;
  if (d.synthetic.empty() || !d.train.empty() || !d.text.empty()) return;
  const auto train_tokens = static_cast<double>(d.synthetic_tokens) * (1.0 - d.val_fraction);
  if (train_tokens < e.model.seq_len + 1.0) {
    fail(out, {"data.synthetic_tokens", "model.seq_len"},
         fmt::format("data.synthetic_tokens={} leaves {:.0f} training tokens, fewer than one "
                     "sequence of model.seq_len + 1 = {}",
                     d.synthetic_tokens, train_tokens, int64_t{e.model.seq_len} + 1));
  }
}

void text_fits_vocab(const Experiment& e, int, Fail& out) {
  if (!e.data.text.empty() && e.model.vocab_size < 256) {
    fail(out, {"model.vocab_size", "data.text"},
         fmt::format("data.text is byte-tokenized (256 symbols) but model.vocab_size is {}: set "
                     "model.vocab_size >= 256",
                     e.model.vocab_size));
  }
}

// Sizes are computed in int64 everywhere (parameters, arena offsets, plan bytes). Bounding each
// tensor's element count here, in double, keeps every such product and sum far from overflow;
// 2^46 elements (256 TiB in fp32) is beyond any machine, so no real run is refused.
constexpr double kMaxTensorElements = 70368744177664.0;  // 2^46

void sizes_fit(const Experiment& e, int, Fail& out) {
  const auto& m = e.model;
  const double B = e.train.batch_size, T = m.seq_len, V = m.vocab_size, C = m.d_model;
  std::vector<TensorBound> tensors = {{"token embedding (vocab_size x d_model)", V * C},
                                      {"logits (batch_size x seq_len x vocab_size)", B * T * V}};
  model_spec(m.type).tensor_bounds(m, B, tensors);
  for (const auto& t : tensors) {
    if (t.elements > kMaxTensorElements) {
      fail(out,
           {"model.vocab_size", "model.d_model", "model.seq_len", "model.n_layer",
            "train.batch_size"},
           fmt::format("the {} would hold {:.3g} elements, more than any machine holds (limit "
                       "2^46): shrink the model or the batch",
                       t.what, t.elements));
      return;
    }
  }
}

// The data-parallel ranks: the tensor-parallel ranks of one share its batches.
int dp_ranks(const Experiment& e, int world) {
  const int tp = e.distributed.tp;
  return tp > 1 && world % tp == 0 ? world / tp : world;
}

void batch_splits_over_ranks(const Experiment& e, int ranks, Fail& out) {
  const auto& t = e.train;
  const int world = dp_ranks(e, ranks);
  if (world < 1) return;  // nproc or nodes out of range: reported on their own
  if (t.batch_size % world != 0) {
    fail(out, {"train.batch_size", "distributed.nproc", "distributed.nodes"},
         fmt::format("train.batch_size={} is not divisible by ranks({}): each rank takes "
                     "batch_size / ranks sequences per step",
                     t.batch_size, world));
    return;
  }
  const int64_t per_micro_step = static_cast<int64_t>(t.micro_batch_size) * world;
  if (t.micro_batch_size > 0 && t.batch_size % per_micro_step != 0) {
    fail(out, {"train.batch_size", "train.micro_batch_size", "distributed.nproc"},
         fmt::format("train.batch_size={} is not divisible by micro_batch_size({}) x ranks({}) "
                     "= {}: each step accumulates batch_size / (micro_batch_size x ranks) "
                     "micro-steps",
                     t.batch_size, t.micro_batch_size, world, per_micro_step));
  }
}

void checkpointing_needs_blocks(const Experiment& e, int, Fail& out) {
  if (e.train.activation_checkpointing != ActivationCheckpointing::none &&
      e.model.type == ModelType::mlp)
    fail(out, {"train.activation_checkpointing", "model.type"},
         "train.activation_checkpointing recomputes transformer blocks, and model.type=mlp has "
         "none (its activations are a few [batch x seq_len x hidden] layers): use "
         "train.activation_checkpointing=none");
}

void sharding_needs_units(const Experiment& e, int, Fail& out) {
  if (e.distributed.zero >= 2 && e.model.type == ModelType::mlp)
    fail(out, {"distributed.zero", "model.type"},
         fmt::format("distributed.zero={} shards parameters unit by unit (the embeddings, each "
                     "transformer block, the head), and model.type=mlp has no blocks to shard "
                     "(it is a few small layers): use distributed.zero=1, which shards its "
                     "optimizer state",
                     e.distributed.zero));
}

void resharding_needs_zero_3(const Experiment& e, int, Fail& out) {
  if (!e.distributed.reshard_after_forward && e.distributed.zero != 3)
    fail(out, {"distributed.reshard_after_forward", "distributed.zero"},
         fmt::format("distributed.reshard_after_forward=false keeps ZeRO-3's gathered weights "
                     "from a unit's forward to its backward, and distributed.zero={} gathers "
                     "none: set distributed.zero=3, or drop the key",
                     e.distributed.zero));
}

void reduce_dtype_needs_zero_2(const Experiment& e, int, Fail& out) {
  if (e.distributed.reduce_dtype != Precision::fp32 && e.distributed.zero < 2)
    fail(out, {"distributed.reduce_dtype", "distributed.zero"},
         fmt::format("distributed.reduce_dtype=bf16 sets the dtype of ZeRO-2/3's reduce-scatters, "
                     "and distributed.zero={} runs none: set distributed.zero=2 or 3, or drop the "
                     "key",
                     e.distributed.zero));
}

// "1, 2, 4": the divisors of n.
std::string divisors_of(int64_t n) {
  std::string s;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) s += fmt::format("{}{}", s.empty() ? "" : ", ", d);
  return s;
}

void tp_fits_the_mesh(const Experiment& e, int world, Fail& out) {
  const auto& d = e.distributed;
  if (d.tp <= 1 || world < 1) return;
  if (e.model.type == ModelType::mlp) {
    fail(out, {"distributed.tp", "model.type"},
         fmt::format("distributed.tp={} splits the attention heads and the MLP of transformer "
                     "blocks, and model.type=mlp has none: use distributed.tp=1 (and "
                     "distributed.zero to shard its state)",
                     d.tp));
    return;
  }
  if (world % d.tp != 0) {
    fail(out, {"distributed.tp", "distributed.nproc", "distributed.nodes"},
         fmt::format("distributed.tp={} does not divide the {} ranks: use one of {}", d.tp, world,
                     divisors_of(world)));
    return;
  }
  if (!d.tp_across_nodes && d.nproc % d.tp != 0)
    fail(out, {"distributed.tp", "distributed.nproc", "distributed.tp_across_nodes"},
         fmt::format("distributed.tp={} does not divide the {} ranks of a node "
                     "(distributed.nproc): tensor parallelism runs collectives inside every "
                     "layer, which a network between nodes slows many times over; use one of "
                     "{}, or set distributed.tp_across_nodes: true to split layers across nodes "
                     "anyway",
                     d.tp, d.nproc, divisors_of(d.nproc)));
}

// "4 or 8": the values nearest `v` (below and above) that `tp` divides.
std::string nearest_multiples(int64_t v, int tp) {
  const int64_t below = v / tp * tp, above = below + tp;
  return below > 0 ? fmt::format("{} or {}", below, above) : fmt::format("{}", above);
}

void tp_divides_the_layers(const Experiment& e, int, Fail& out) {
  const int tp = e.distributed.tp;
  const ModelConfig& m = e.model;
  if (tp <= 1 || m.type == ModelType::mlp) return;
  const int kv = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
  if (m.n_head % tp != 0)
    fail(out, {"model.n_head", "distributed.tp"},
         fmt::format("model.n_head={} is not divisible by distributed.tp={}: each rank computes "
                     "n_head / tp whole heads; use n_head {} (with d_model divisible by it), "
                     "or tp one of {}",
                     m.n_head, tp, nearest_multiples(m.n_head, tp), divisors_of(m.n_head)));
  else if (kv % tp != 0)
    fail(out, {"model.n_kv_head", "distributed.tp"},
         fmt::format("model.n_kv_head={} is not divisible by distributed.tp={}: each rank keeps "
                     "n_kv_head / tp key/value heads with their query heads; use n_kv_head {} "
                     "(dividing n_head), or tp one of {}",
                     kv, tp, nearest_multiples(kv, tp), divisors_of(kv)));
  const int64_t ffn = m.type == ModelType::llama ? llama_ffn_hidden(m) : int64_t{4} * m.d_model;
  if (ffn % tp != 0)
    fail(out, {m.type == ModelType::llama ? "model.ffn_hidden" : "model.d_model", "distributed.tp"},
         fmt::format("the MLP's hidden width {} is not divisible by distributed.tp={}: each rank "
                     "computes hidden / tp of it; use {} {}",
                     ffn, tp, m.type == ModelType::llama ? "model.ffn_hidden" : "a width",
                     nearest_multiples(ffn, tp)));
}

void mesh_divides_ranks(const Experiment& e, int ranks, Fail& out) {
  const int r = e.distributed.dp_replicate;
  const int world = dp_ranks(e, ranks);
  if (world < 1 || r < 1 || world % r == 0) return;
  fail(out, {"distributed.dp_replicate", "distributed.nproc", "distributed.nodes"},
       fmt::format("distributed.dp_replicate={} does not divide the {} {}: the device mesh is "
                   "dp_replicate groups of them; use one of {} (the nodes, to shard inside each "
                   "node)",
                   r, world,
                   world == ranks ? "ranks" : "data-parallel ranks (ranks / distributed.tp)",
                   divisors_of(world)));
}

void lr_decays_down(const Experiment& e, int, Fail& out) {
  const auto& o = e.optimizer;
  if (o.min_lr > o.lr) {
    fail(out, {"optimizer.min_lr", "optimizer.lr"},
         fmt::format("optimizer.min_lr={} is above optimizer.lr={}: the schedule decays from lr "
                     "down to min_lr",
                     format_double(o.min_lr), format_double(o.lr)));
  }
}

// Each rule beside the sentence that documents it (docs/config.md lists them).
struct Rule {
  std::string_view summary;
  void (*check)(const Experiment&, int world, Fail&);
};

const Rule kRules[] = {
    {"exactly one of `data.train`, `data.mix`, `data.text`, `data.synthetic`; `data.val` only "
     "with `data.train`, `data.tokenizer` only with `data.train` or `data.mix`",
     one_data_source},
    {"", family_rules},  // one line per family: the specs' own (cross_field_rules)
    {"`model.n_kv_head`, `model.rope_theta`, `model.ffn_hidden` and `model.tie_embeddings: "
     "false` only with `model.type: llama`",
     llama_keys_only_for_llama},
    {"`train.batch_size` divisible by the data-parallel ranks (`distributed.nproc` x "
     "`distributed.nodes` / `distributed.tp`), and by `train.micro_batch_size` x those ranks "
     "when that is above 0",
     batch_splits_over_ranks},
    {"`train.activation_checkpointing` other than none only with a gpt or llama model",
     checkpointing_needs_blocks},
    {"`distributed.zero` 2 or 3 only with a gpt or llama model", sharding_needs_units},
    {"`distributed.reshard_after_forward: false` only with `distributed.zero: 3`",
     resharding_needs_zero_3},
    {"`distributed.reduce_dtype: bf16` only with `distributed.zero` 2 or 3",
     reduce_dtype_needs_zero_2},
    {"`distributed.tp` only with a gpt or llama model; it divides the ranks, and the ranks of a "
     "node (`distributed.nproc`) unless `distributed.tp_across_nodes: true`",
     tp_fits_the_mesh},
    {"`distributed.tp` divides `model.n_head`, `model.n_kv_head` and the MLP's hidden width "
     "(4 `model.d_model`, or llama's `model.ffn_hidden`)",
     tp_divides_the_layers},
    {"`distributed.dp_replicate` divides the data-parallel ranks (`distributed.nproc` x "
     "`distributed.nodes` / `distributed.tp`)",
     mesh_divides_ranks},
    {"`optimizer.min_lr` <= `optimizer.lr` (`optimizer.warmup_steps` may exceed "
     "`train.steps`)",
     lr_decays_down},
    {"`data.mix` weights sum to a finite number (they are relative)", mix_weights_sum_finite},
    {"with `data.text` or `data.synthetic` and `train.eval_every` > 0: `data.val_fraction` > 0",
     something_to_evaluate},
    {"`data.document_masking` with token shards (`data.train` or `data.mix`) and a gpt or llama "
     "model; `data.eot` only with it, below `model.vocab_size`",
     documents_need_shards},
    {"`data.synthetic`: the training part of `data.synthetic_tokens` holds at least "
     "`model.seq_len` + 1 tokens",
     synthetic_fits_a_sequence},
    {"`data.text` (bytes): `model.vocab_size` >= 256", text_fits_vocab},
    {"no tensor (embedding, logits, attention scores, weights) above 2^46 elements", sizes_fit},
};

}  // namespace

std::vector<Violation> violations(const Experiment& exp, int world) {
  std::vector<Violation> out;
  for (const auto& f : schema()) {
    if (auto problem = check_value(f, exp)) out.push_back({{f.key}, *problem});
  }
  for (const auto& rule : kRules) rule.check(exp, world, out);
  return out;
}

std::vector<std::string_view> cross_field_rules() {
  std::vector<std::string_view> out;
  for (const auto& rule : kRules) {
    if (rule.check != family_rules) {
      out.push_back(rule.summary);
      continue;
    }
    for (size_t t = 0; t < std::size(EnumNames<ModelType>::names); ++t)
      out.push_back(model_spec(static_cast<ModelType>(t)).rules);
  }
  return out;
}

}  // namespace trainrun::config

namespace trainrun {

void validate_for_world(const Experiment& exp, int world_size) {
  if (world_size < 1) {
    throw ConfigError(fmt::format("world size must be at least 1 (got {})", world_size));
  }
  auto found = config::violations(exp, world_size);
  if (found.empty()) return;
  std::string message;
  for (const auto& v : found) {
    if (!message.empty()) message += '\n';
    message +=
        exp.source_path.empty() ? v.message : fmt::format("{}: {}", exp.source_path, v.message);
  }
  throw ConfigError(message);
}

}  // namespace trainrun
