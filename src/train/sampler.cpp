// `trainrun sample`: autoregressive generation from a checkpoint's weights on the CPU backend.
// Each new token re-runs the forward pass over the last seq_len tokens: simple, and fast enough
// for the small byte-level models this is for.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "trainrun/backend/backend.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/rng.h"
#include "trainrun/core/state_buffer.h"
#include "trainrun/data/tokenizer.h"
#include "trainrun/hf/hf_import.h"
#include "trainrun/model/model.h"
#include "trainrun/model/model_spec.h"
#include "trainrun/train/sampler.h"

namespace fs = std::filesystem;

namespace trainrun {

namespace {

struct Sampled {
  std::vector<int32_t> ids;
  std::unique_ptr<Tokenizer> tok;  // what decodes them; null: bytes
};

Sampled generate(const std::string& run_dir_or_file, const std::string& prompt, int tokens,
                 double temperature, uint64_t seed, const std::string& tokenizer) {
  // NaN compares false with everything: it would sample garbage instead of failing.
  if (!std::isfinite(temperature) || temperature < 0)
    throw ConfigError(
        fmt::format("--temperature {}: use a finite number >= 0 (0 = greedy, 1 = the model's own "
                    "distribution)",
                    temperature));
  std::string file = run_dir_or_file;
  // A Hugging Face folder holds config.json as a run directory does, but no checkpoints.
  std::error_code ec;
  const bool hf = is_hf_model_dir(run_dir_or_file) &&
                  !fs::exists(fs::path(run_dir_or_file) / "checkpoints", ec);
  if (!hf && is_run_directory(run_dir_or_file)) {
    std::vector<std::string> warnings;
    auto latest = latest_good_checkpoint(run_dir_or_file, &warnings);
    // A newer checkpoint that was skipped (damaged, unfinished) is said, so a sample from an
    // older one is never mistaken for the newest.
    for (const std::string& w : warnings) fmt::print(stderr, "warning: {}\n", w);
    if (!latest)
      throw CheckpointError(
          fmt::format("no usable checkpoint in {}/checkpoints: train first "
                      "(checkpoints are written at the end of every run)",
                      run_dir_or_file));
    file = *latest;
  }
  // The model and its weights: a checkpoint's, or a Hugging Face folder's (its context at most
  // kHfContext tokens: every new token runs the whole context again).
  constexpr int kHfContext = 1024;
  Experiment exp;
  StateBuffer weights;
  if (hf) {
    exp.model = hf_model_config(run_dir_or_file, kHfContext);
  } else {
    CheckpointData ck = read_checkpoint(file);
    exp = parse_experiment(ck.state.config_yaml, file + ":/config", {});
    weights = std::move(ck.weights);
  }
  auto be = make_cpu_backend();
  const ModelSpec& spec = model_spec(exp.model.type);
  auto model = spec.build(exp.model, *be, 1, DType::f32, ActivationCheckpointing::none,
                          ParamStorage::flat, {});  // no backward
  ParamStore& ps = model->params();
  if (hf) {
    weights.resize(static_cast<size_t>(ps.numel()));
    load_hf(run_dir_or_file, exp.model, ps.entries(), weights.data());
  }
  be->copy(ps.params(), Tensor(weights.data(), DType::f32, Device::cpu, {ps.numel()}));

  const int T = exp.model.seq_len, V = exp.model.vocab_size;
  // The tokenizer asked for, else the run's (data.tokenizer, else its shards' manifest), else
  // bytes; one the manifest contradicts is refused there (DataError). A Hugging Face folder's is
  // its tokenizer.json; without one only a vocabulary of bytes can be read.
  if (!tokenizer.empty()) exp.data.tokenizer = tokenizer;
  if (hf && tokenizer.empty()) {
    const fs::path own = fs::path(run_dir_or_file) / "tokenizer.json";
    if (fs::exists(own, ec))
      exp.data.tokenizer = own.string();
    else if (V != 256)
      throw ConfigError(fmt::format(
          "sample {}: the model has a vocabulary of {} and the folder no tokenizer.json: give its "
          "tokenizer with --tokenizer FILE (only a vocabulary of 256 reads as bytes)",
          run_dir_or_file, V));
  }
  std::unique_ptr<Tokenizer> tok = data_tokenizer(exp.data);
  if (!tok && !tokenizer.empty()) {
    // A run on text or synthetic data has no shards to check the tokenizer against (it was
    // ignored, even a missing file): load it, and refuse one the model cannot have trained on.
    tok = std::make_unique<Tokenizer>(Tokenizer::load(tokenizer));
    if (tok->vocab_size() > V)
      throw DataError(fmt::format(
          "--tokenizer {}: it has {} tokens, but this run's model has a vocabulary of {}, so it "
          "cannot be the tokenizer the run trained with (runs on data.text train on bytes: drop "
          "--tokenizer)",
          tokenizer, tok->vocab_size(), V));
  }
  if (!tok && V > 256 && !exp.data.train.empty())
    fmt::print(
        stderr,
        "warning: {}: no tokenizer on record (no manifest.json beside the shards, no "
        "data.tokenizer), so "
        "ids print as bytes and ids past 255 as <id>; if the shards were made with a tokenizer, "
        "pass it with --tokenizer FILE\n",
        exp.data.train);
  std::vector<int32_t> ctx;
  if (tok) {
    ctx = tok->encode(prompt.empty() ? "\n" : prompt);
  } else {
    for (unsigned char c : prompt) ctx.push_back(c);
  }
  for (const int32_t c : ctx)
    if (c >= V)
      throw DataError(fmt::format(
          "prompt {} {} is outside the model's vocabulary of {}: the prompt needs a token the "
          "model was not trained on (a tokenizer or text of another vocabulary)",
          tok ? "token" : "byte", c, V));
  if (ctx.empty()) ctx.push_back('\n');
  std::vector<int32_t> x(static_cast<size_t>(T)), y(static_cast<size_t>(T), 0);
  std::vector<float> logits(static_cast<size_t>(model->targets_per_batch()) * V);
  Rng rng(seed);
  std::vector<int32_t> out;
  for (int i = 0; i < tokens; ++i) {
    const int64_t next_row = spec.place_context(ctx, x);
    model->set_batch(x.data(), y.data());
    model->forward(false, 0);
    be->copy(Tensor(logits.data(), DType::f32, Device::cpu, {static_cast<int64_t>(logits.size())}),
             model->logits());
    const float* row = logits.data() + static_cast<size_t>(next_row) * V;
    int next = 0;
    if (temperature <= 0) {
      next = static_cast<int>(std::max_element(row, row + V) - row);
    } else {
      double mx = *std::max_element(row, row + V), z = 0;
      std::vector<double> p(static_cast<size_t>(V));
      for (int v = 0; v < V; ++v)
        z += p[static_cast<size_t>(v)] = std::exp((row[v] - mx) / temperature);
      double u = rng.uniform() * z;
      for (next = 0; next < V - 1; ++next) {
        u -= p[static_cast<size_t>(next)];
        if (u <= 0) break;
      }
    }
    ctx.push_back(next);
    out.push_back(next);
  }
  return {std::move(out), std::move(tok)};
}

}  // namespace

std::string sample_text(const std::string& run_dir_or_file, const std::string& prompt, int tokens,
                        double temperature, uint64_t seed, const std::string& tokenizer) {
  const Sampled s = generate(run_dir_or_file, prompt, tokens, temperature, seed, tokenizer);
  return ids_text(s.tok.get(), s.ids);
}

std::vector<int32_t> sample_ids(const std::string& run_dir_or_file, const std::string& prompt,
                                int tokens, double temperature, uint64_t seed,
                                const std::string& tokenizer) {
  return generate(run_dir_or_file, prompt, tokens, temperature, seed, tokenizer).ids;
}

}  // namespace trainrun
