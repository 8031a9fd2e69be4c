// Finite-difference gradient checks, in double precision, for every module and for the whole
// GPT, MLP and Llama models. Each check perturbs sampled elements of every parameter and input by
// +-eps and compares (L(x+eps) - L(x-eps)) / 2eps with the analytic gradient from backward.
// Tolerance: |analytic - numeric| <= 1e-4 * max(|a|, |n|) + 1e-7. In double with eps = 1e-6
// the central difference carries ~1e-10 * |loss| of rounding and eps^2 * f'''(x) of truncation
// (up to ~1e-8 with the large random weights used here); a wrong gradient is off by O(1).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainrun/backend/backend.h"
#include "trainrun/core/documents.h"
#include "trainrun/core/rng.h"
#include "trainrun/model/activation.h"
#include "trainrun/model/attention.h"
#include "trainrun/model/block.h"
#include "trainrun/model/embedding.h"
#include "trainrun/model/flops.h"
#include "trainrun/model/layernorm.h"
#include "trainrun/model/linear.h"
#include "trainrun/model/llama_block.h"
#include "trainrun/model/mlp.h"
#include "trainrun/model/model.h"
#include "trainrun/model/model_spec.h"
#include "trainrun/model/rmsnorm.h"
#include "trainrun/model/swiglu_mlp.h"

using namespace trainrun;

namespace {

constexpr double kEps = 1e-6;
constexpr double kRel = 1e-4;
constexpr double kAbs = 1e-7;

struct HostBuf {
  std::vector<double> v;
  Tensor t;
  HostBuf(std::initializer_list<int64_t> shape) {
    t = Tensor(nullptr, DType::f64, Device::cpu, shape);
    v.assign(static_cast<size_t>(t.numel()), 0.0);
    t.data = v.data();
  }
  void randomize(Rng& rng, double scale = 1.0) {
    for (double& x : v) x = scale * rng.normal();
  }
  void zero() { std::fill(v.begin(), v.end(), 0.0); }
};

void randomize(Tensor t, Rng& rng, double scale) {
  double* p = t.as<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = scale * rng.normal();
}

// Checks d(loss)/d(value) against `grad` at up to `samples` random elements.
// `loss` recomputes the scalar loss from the current values.
int check_tensor(const std::string& what, Tensor value, Tensor grad,
                 const std::function<double()>& loss, Rng& rng, int samples = 12) {
  int failures = 0;
  double* x = value.as<double>();
  const double* g = grad.as<double>();
  const int64_t n = value.numel();
  for (int s = 0; s < samples && s < n; ++s) {
    const int64_t i =
        n <= samples ? s : static_cast<int64_t>(rng.next() % static_cast<uint64_t>(n));
    const double orig = x[i];
    x[i] = orig + kEps;
    const double lp = loss();
    x[i] = orig - kEps;
    const double lm = loss();
    x[i] = orig;
    const double numeric = (lp - lm) / (2 * kEps);
    const double err = std::fabs(numeric - g[i]);
    const double tol = kRel * std::max(std::fabs(numeric), std::fabs(g[i])) + kAbs;
    if (err > tol) {
      ++failures;
      MESSAGE(what << "[" << i << "]: analytic " << g[i] << " numeric " << numeric);
    }
  }
  return failures;
}

// Every parameter of the store, with random values so no gradient is trivially zero.
int check_params(ParamStore& ps, const std::function<double()>& loss, Rng& rng) {
  int failures = 0;
  for (size_t i = 0; i < ps.infos().size(); ++i)
    failures += check_tensor(ps.infos()[i].name, ps.param(static_cast<int>(i)),
                             ps.grad(static_cast<int>(i)), loss, rng);
  return failures;
}

double dot(Tensor a, const HostBuf& r) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.as<double>()[i] * r.v[static_cast<size_t>(i)];
  return s;
}

struct Fixture {
  std::unique_ptr<Backend> be = make_cpu_backend();
  ParamStore ps{*be, DType::f64};
  Arena acts{*be}, scratch{*be};
  Rng rng{42};
  void allocate_params() {
    ps.allocate();
    randomize(ps.params(), rng, 0.5);
  }
  // Two-pass arena binding, as the models do.
  void bind(const std::function<void()>& f) {
    f();
    acts.allocate();
    scratch.allocate();
    acts.restart();
    scratch.restart();
    f();
  }
};

// The check every module gets: loss = <forward(in), r> for random `in` [rows, in_cols] and r
// [rows, out_cols]; backward(din, r, in) must give the finite-difference gradient of every
// parameter in fx.ps and of the input. `overwrites`: backward overwrites din (blocks), so din
// starts as garbage that must not show; otherwise it starts at zero.
struct ModuleCase {
  int64_t rows, in_cols, out_cols;
  double in_scale = 1.0;
  int in_samples = 12;
  bool overwrites = false;
};

void gradcheck_module(Fixture& fx, const ModuleCase& c,
                      const std::function<void(Tensor out, Tensor in)>& forward,
                      const std::function<void(Tensor din, Tensor dout, Tensor in)>& backward,
                      const std::function<void(HostBuf& in)>& shape_input = {}) {
  HostBuf in({c.rows, c.in_cols}), out({c.rows, c.out_cols}), din({c.rows, c.in_cols}),
      r({c.rows, c.out_cols});
  in.randomize(fx.rng, c.in_scale);
  if (shape_input) shape_input(in);
  r.randomize(fx.rng);
  auto loss = [&] {
    forward(out.t, in.t);
    return dot(out.t, r);
  };
  loss();
  if (fx.scratch.bytes() > 0) fx.scratch.zero(0, fx.scratch.bytes());
  if (c.overwrites) din.randomize(fx.rng);
  backward(din.t, r.t, in.t);
  CHECK(check_params(fx.ps, loss, fx.rng) == 0);
  CHECK(check_tensor("in", in.t, din.t, loss, fx.rng, c.in_samples) == 0);
}

std::vector<std::string> param_names(const ParamStore& ps) {
  std::vector<std::string> names;
  for (const auto& info : ps.infos()) names.push_back(info.name);
  return names;
}

}  // namespace

TEST_CASE("gradcheck: Linear (with and without bias)") {
  for (bool bias : {true, false}) {
    Fixture fx;
    Linear lin(fx.ps, "lin", 5, 3, bias, 0.02f);
    fx.allocate_params();
    gradcheck_module(
        fx, {.rows = 4, .in_cols = 5, .out_cols = 3},
        [&](Tensor out, Tensor in) { lin.forward(out, in); },
        [&](Tensor din, Tensor dout, Tensor in) { lin.backward(din, dout, in); });
  }
}

TEST_CASE("gradcheck: LayerNorm and RMSNorm") {
  {
    Fixture fx;
    LayerNorm ln(fx.ps, "ln", 7);
    fx.allocate_params();
    fx.bind([&] { ln.bind(fx.acts, 3); });
    gradcheck_module(
        fx, {.rows = 3, .in_cols = 7, .out_cols = 7, .in_scale = 2.0},
        [&](Tensor out, Tensor in) { ln.forward(out, in); },
        [&](Tensor din, Tensor dout, Tensor in) { ln.backward(din, dout, in); });
  }
  Fixture fx;
  RMSNorm norm(fx.ps, "norm", 7);
  fx.allocate_params();
  fx.bind([&] { norm.bind(fx.acts, 3); });
  gradcheck_module(
      fx, {.rows = 3, .in_cols = 7, .out_cols = 7, .in_scale = 2.0, .in_samples = 21},
      [&](Tensor out, Tensor in) { norm.forward(out, in); },
      [&](Tensor din, Tensor dout, Tensor in) { norm.backward(din, dout, in); });
  CHECK(param_names(fx.ps) == std::vector<std::string>{"norm.weight"});
}

TEST_CASE("gradcheck: Embedding with repeated ids") {
  Fixture fx;
  Embedding emb(fx.ps, "emb", 6, 4, 0.02f);
  fx.allocate_params();
  std::vector<int32_t> ids = {1, 3, 1, 5, 0, 1};
  Tensor tids(ids.data(), DType::i32, Device::cpu, {6});
  HostBuf out({6, 4}), r({6, 4});
  r.randomize(fx.rng);
  auto loss = [&] {
    emb.forward(out.t, tids);
    return dot(out.t, r);
  };
  loss();
  emb.backward(r.t, tids);
  CHECK(check_params(fx.ps, loss, fx.rng) == 0);
}

TEST_CASE("gradcheck: GELU and ReLU") {
  for (auto kind : {Activation::gelu, Activation::relu}) {
    Fixture fx;
    Activation act(*fx.be, kind);
    gradcheck_module(
        fx, {.rows = 3, .in_cols = 8, .out_cols = 8, .in_samples = 24},
        [&](Tensor out, Tensor in) { act.forward(out, in); },
        [&](Tensor din, Tensor dout, Tensor in) { act.backward(din, dout, in); },
        [](HostBuf& in) {
          // Keep ReLU inputs away from the kink at 0, where the derivative is undefined.
          for (double& x : in.v)
            if (std::fabs(x) < 1e-3) x = 0.5;
        });
  }
}

// No document starts: every sequence one document.
const Tensor kOneDocument;

TEST_CASE(
    "gradcheck: CausalSelfAttention, plain and with grouped-query heads, RoPE, no bias, "
    "documents") {
  // (n_head, n_kv_head, bias, rope, documents): GPT-2's, then grouped-query, multi-query, and as
  // many kv heads as heads, each with and without biases; GPT-2's and a grouped-query one with
  // RoPE again with documents packed in the rows (document masking: the mask and the positions
  // restart at each document start).
  struct Case {
    int nh, nkv;
    bool bias, rope, documents = false;
  };
  std::vector<Case> cases = {
      {2, 2, true, false}, {2, 2, true, false, true}, {4, 2, false, true, true}};
  for (auto [nh, nkv] : {std::pair{4, 2}, std::pair{4, 1}, std::pair{2, 2}})
    for (bool bias : {false, true}) cases.push_back({nh, nkv, bias, true});
  // Row 0: documents [0,2) and [2,5); row 1: [0,1), [1,4) and [4,5).
  std::vector<int32_t> starts = {0, 0, 2, 2, 2, 0, 1, 1, 1, 4};
  for (const Case& k : cases) {
    CAPTURE(k.nh);
    CAPTURE(k.nkv);
    CAPTURE(k.bias);
    CAPTURE(k.rope);
    CAPTURE(k.documents);
    Fixture fx;
    const int B = 2, T = 5, C = k.rope ? 16 : 8, hd = C / k.nh;
    CausalSelfAttention attn =
        k.rope ? CausalSelfAttention(
                     fx.ps, "attn", C, k.nh, 0.02f,
                     {.n_kv_head = k.nkv, .bias = k.bias, .rope = true, .rope_theta = 100.0f})
               : CausalSelfAttention(fx.ps, "attn", C, k.nh, 0.02f);
    fx.allocate_params();
    const Tensor docs =
        k.documents ? Tensor(starts.data(), DType::i32, Device::cpu, {B, T}) : Tensor{};
    fx.bind([&] { attn.bind(fx.acts, fx.scratch, B, T, &docs); });
    REQUIRE(fx.ps.infos().size() == (k.bias ? 4u : 2u));
    CHECK(fx.ps.infos()[0].shape == std::vector<int64_t>{(k.nh + 2 * k.nkv) * hd, C});
    gradcheck_module(
        fx, {.rows = B * T, .in_cols = C, .out_cols = C, .in_samples = 20},
        [&](Tensor out, Tensor in) { attn.forward(out, in); },
        [&](Tensor din, Tensor dout, Tensor in) { attn.backward(din, dout, in); });
  }
}

TEST_CASE("gradcheck: MLP and SwiGluMLP") {
  {
    Fixture fx;
    MLP mlp(fx.ps, "mlp", 6, 0.02f);
    fx.allocate_params();
    fx.bind([&] { mlp.bind(fx.acts, fx.scratch, 4); });
    gradcheck_module(
        fx, {.rows = 4, .in_cols = 6, .out_cols = 6},
        [&](Tensor out, Tensor in) { mlp.forward(out, in); },
        [&](Tensor din, Tensor dout, Tensor in) { mlp.backward(din, dout, in); });
  }
  Fixture fx;
  SwiGluMLP mlp(fx.ps, "mlp", 6, 5, 0.02f);
  fx.allocate_params();
  fx.bind([&] { mlp.bind(fx.acts, fx.scratch, 4); });
  gradcheck_module(
      fx, {.rows = 4, .in_cols = 6, .out_cols = 6},
      [&](Tensor out, Tensor in) { mlp.forward(out, in); },
      [&](Tensor din, Tensor dout, Tensor in) { mlp.backward(din, dout, in); });
  // Bias-free: exactly the fused gate|up matrix and the down projection.
  CHECK(param_names(fx.ps) == std::vector<std::string>{"mlp.gate_up.weight", "mlp.down.weight"});
  CHECK(fx.ps.infos()[0].shape == std::vector<int64_t>{10, 6});
  CHECK(fx.ps.infos()[1].shape == std::vector<int64_t>{6, 5});
}

TEST_CASE("gradcheck: TransformerBlock and LlamaBlock (GQA), with and without dropout") {
  // The dropout mask is a pure function of the seed, so the loss stays a smooth function of the
  // inputs and finite differences apply. A block's backward turns the stream's gradient from
  // d(out) into d(in) in place: here din starts as a copy of dout (so din's old contents are
  // overwritten, as the check expects).
  const int B = 2, T = 4, C = 8;
  const ModuleCase block_case{.rows = B * T, .in_cols = C, .out_cols = C, .overwrites = true};
  for (float p : {0.0f, 0.3f}) {
    CAPTURE(p);
    // Activation checkpointing's paths too: the backward after a recomputation of the whole
    // forward (full) or of the pointwise outputs alone (selective, which binds them apart).
    for (const auto mode : {ActivationCheckpointing::none, ActivationCheckpointing::full,
                            ActivationCheckpointing::selective}) {
      CAPTURE(enum_name(mode));
      Fixture fx;
      TransformerBlock blk(fx.ps, "blk", C, 2, 2);
      fx.allocate_params();
      fx.bind([&] {
        blk.bind_kept(fx.acts, B * T);
        blk.bind({fx.acts, fx.acts, mode == ActivationCheckpointing::selective}, fx.scratch, B, T,
                 &kOneDocument);
      });
      gradcheck_module(
          fx, block_case, [&](Tensor out, Tensor in) { blk.forward(out, in, p, 7); },
          [&](Tensor din, Tensor dout, Tensor in) {
            if (mode == ActivationCheckpointing::full) blk.recompute(in, p, 7, /*normed=*/false);
            if (mode == ActivationCheckpointing::selective) blk.recompute_pointwise(in);
            fx.be->copy(din, dout);
            blk.backward(din, in, p, 7);
          });
    }
    Fixture fx;
    ModelConfig cfg;
    cfg.d_model = C;
    cfg.n_head = 2;
    cfg.n_kv_head = 1;
    cfg.ffn_hidden = 12;
    cfg.n_layer = 2;
    LlamaBlock blk(fx.ps, "blk", cfg);
    fx.allocate_params();
    fx.bind([&] {
      blk.bind_kept(fx.acts, B * T);
      blk.bind(fx.acts, fx.scratch, B, T, &kOneDocument);
    });
    CHECK(param_names(fx.ps) ==
          std::vector<std::string>{"blk.attn_norm.weight", "blk.attn.qkv.weight",
                                   "blk.attn.proj.weight", "blk.mlp_norm.weight",
                                   "blk.mlp.gate_up.weight", "blk.mlp.down.weight"});
    gradcheck_module(
        fx, block_case, [&](Tensor out, Tensor in) { blk.forward(out, in, p, 7); },
        [&](Tensor din, Tensor dout, Tensor in) {
          fx.be->copy(din, dout);
          blk.backward(din, in, p, 7);
        });
  }
}

namespace {
void check_model(const ModelConfig& cfg, int batch,
                 ActivationCheckpointing checkpointing = ActivationCheckpointing::none) {
  auto be = make_cpu_backend();
  auto model = build_model(cfg, *be, batch, DType::f64, checkpointing);
  Rng rng(5);
  ParamStore& ps = model->params();
  randomize(ps.params(), rng, 0.3);
  const int T = cfg.seq_len;
  std::vector<int32_t> x(static_cast<size_t>(batch * T)), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(cfg.vocab_size));
    y[i] = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(cfg.vocab_size));
  }
  model->set_batch(x.data(), y.data());
  auto loss = [&] { return model->forward(true, 3); };
  const float scale = 1.0f / static_cast<float>(model->targets_per_batch());
  // Both ways to the loss's gradient: from the saved lse in backward, and fused into the forward
  // (the trainer's), whose loss sum must be the reading forward's.
  for (const bool fused : {false, true}) {
    CAPTURE(fused);
    if (fused) {
      double sum = 0;
      model->forward(true, 3, Tensor(&sum, DType::f64, Device::cpu, {1}), scale);
      CHECK(sum / static_cast<double>(model->targets_per_batch()) == loss());
      // loss() ran an unfused forward, which kept the logits: fuse again for the backward.
      model->forward(true, 3, Tensor(&sum, DType::f64, Device::cpu, {1}), scale);
    } else {
      loss();
    }
    be->fill(ps.grads(), 0);
    int64_t reported = 0;
    model->backward(scale, 3, [&](int64_t b, int64_t e) { reported += e - b; });
    CHECK(reported == ps.numel());  // every gradient is reported final exactly once
    CHECK(check_params(ps, loss, rng) == 0);
  }
}
}  // namespace

TEST_CASE("gradcheck: whole GPT (tied head, 2 layers, dropout)") {
  ModelConfig cfg;
  cfg.type = ModelType::gpt;
  cfg.vocab_size = 11;
  cfg.seq_len = 5;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.d_model = 8;
  cfg.dropout = 0.2;
  check_model(cfg, 2);
}

TEST_CASE("gradcheck: whole MLP model") {
  ModelConfig cfg;
  cfg.type = ModelType::mlp;
  cfg.vocab_size = 9;
  cfg.seq_len = 3;
  cfg.d_model = 4;
  cfg.hidden = {6, 5};
  for (ActivationKind act : {ActivationKind::gelu, ActivationKind::relu}) {
    cfg.activation = act;
    check_model(cfg, 3);
  }
}

TEST_CASE("gradcheck: whole Llama (GQA, tied and untied head, dropout)") {
  ModelConfig cfg;
  cfg.type = ModelType::llama;
  cfg.vocab_size = 11;
  cfg.seq_len = 5;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.n_kv_head = 2;
  cfg.d_model = 8;
  cfg.ffn_hidden = 12;
  cfg.rope_theta = 50.0;
  for (bool tie : {true, false}) {
    for (double p : {0.0, 0.2}) {
      CAPTURE(tie);
      CAPTURE(p);
      cfg.tie_embeddings = tie;
      cfg.dropout = p;
      check_model(cfg, 2);
    }
  }
}

TEST_CASE("GPT: same seed gives bit-identical forward; parameter count matches the formula") {
  ModelConfig cfg;
  cfg.vocab_size = 32;
  cfg.seq_len = 8;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.d_model = 16;
  auto be = make_cpu_backend();
  auto a = build_model(cfg, *be, 2);
  auto b = build_model(cfg, *be, 2);
  a->params().initialize(9);
  b->params().initialize(9);
  std::vector<int32_t> x(16), y(16);
  for (int i = 0; i < 16; ++i) {
    x[static_cast<size_t>(i)] = (i * 7) % 32;
    y[static_cast<size_t>(i)] = (i * 5 + 1) % 32;
  }
  a->set_batch(x.data(), y.data());
  b->set_batch(x.data(), y.data());
  const double la = a->forward(false, 0), lb = b->forward(false, 0);
  CHECK(la == lb);
  // An untrained model predicts close to uniform: loss near log(vocab).
  CHECK(la == doctest::Approx(std::log(32.0)).epsilon(0.05));
  CHECK(parameter_count(cfg) == a->params().numel());
  cfg.type = ModelType::mlp;
  cfg.hidden = {20, 10};
  CHECK(parameter_count(cfg) == build_model(cfg, *be, 2)->params().numel());
}

namespace {

ModelConfig gpt_config(int L, int C, int H, int T, int V) {
  ModelConfig cfg;
  cfg.type = ModelType::gpt;
  cfg.n_layer = L;
  cfg.d_model = C;
  cfg.n_head = H;
  cfg.seq_len = T;
  cfg.vocab_size = V;
  return cfg;
}

ModelConfig mlp_config(int C, int T, int V, std::vector<int> hidden) {
  ModelConfig cfg;
  cfg.type = ModelType::mlp;
  cfg.d_model = C;
  cfg.seq_len = T;
  cfg.vocab_size = V;
  cfg.hidden = std::move(hidden);
  return cfg;
}

ModelConfig llama_config(int L, int C, int H, int KV, int T, int V, bool tie, int ffn = 0) {
  ModelConfig cfg = gpt_config(L, C, H, T, V);
  cfg.type = ModelType::llama;
  cfg.n_kv_head = KV;
  cfg.tie_embeddings = tie;
  cfg.ffn_hidden = ffn;
  return cfg;
}

std::vector<ModelConfig> spec_zoo() {
  return {gpt_config(2, 16, 2, 8, 32),
          gpt_config(0, 8, 2, 5, 11),
          gpt_config(3, 24, 3, 7, 50),
          mlp_config(4, 3, 9, {6, 5}),
          mlp_config(8, 4, 13, {}),
          llama_config(2, 16, 4, 2, 8, 32, false),      // GQA, untied, ffn auto (64)
          llama_config(1, 24, 4, 1, 7, 50, true, 40),   // multi-query, tied
          llama_config(2, 16, 2, 0, 6, 20, true),       // n_kv_head 0 = n_head
          llama_config(0, 8, 2, 2, 5, 11, false, 16)};  // no blocks
}

}  // namespace

TEST_CASE("a forward that fused the loss's gradient refuses a backward at another scale") {
  auto be = make_cpu_backend();
  auto model = build_model(gpt_config(1, 8, 2, 4, 11), *be, 1);
  model->params().initialize(1);
  const std::vector<int32_t> x = {1, 2, 3, 4}, y = {2, 3, 4, 5};
  model->set_batch(x.data(), y.data());
  double sum = 0;
  model->forward(true, 1, Tensor(&sum, DType::f64, Device::cpu, {1}), 0.25f);
  CHECK(std::isfinite(sum));
  CHECK_THROWS_WITH_AS(model->backward(0.5f, 1, {}),
                       doctest::Contains("after a forward that fused the loss's gradient at 0.25"),
                       std::logic_error);
  model->forward(true, 1, Tensor(&sum, DType::f64, Device::cpu, {1}), 0.25f);
  CHECK_NOTHROW(model->backward(0.25f, 1, {}));
}

TEST_CASE("ModelSpec: every model type has its spec, complete") {
  for (size_t i = 0; i < enum_names<ModelType>().size(); ++i) {
    const auto type = static_cast<ModelType>(i);
    CAPTURE(enum_name(type));
    const ModelSpec& spec = model_spec(type);
    CHECK(spec.type == type);
    CHECK_MESSAGE(static_cast<bool>(spec.build), "build");
    CHECK_MESSAGE(static_cast<bool>(spec.measure), "measure");
    CHECK_MESSAGE(static_cast<bool>(spec.forward_flops_per_token), "forward_flops_per_token");
    CHECK_MESSAGE(static_cast<bool>(spec.targets_per_sequence), "targets_per_sequence");
    CHECK_MESSAGE(static_cast<bool>(spec.advise), "advise");
    CHECK_MESSAGE(static_cast<bool>(spec.place_context), "place_context");
    CHECK_MESSAGE(spec.rules != nullptr, "rules");
    CHECK_MESSAGE(static_cast<bool>(spec.validate), "validate");
    CHECK_MESSAGE(static_cast<bool>(spec.tensor_bounds), "tensor_bounds");
    CHECK_MESSAGE(static_cast<bool>(spec.describe), "describe");
  }
}

TEST_CASE("ModelSpec: the measuring pass is what the build allocates, fp32 and bf16") {
  auto be = make_cpu_backend();
  for (const ModelConfig& cfg : spec_zoo()) {
    for (int batch : {1, 3}) {
      for (DType dt : {DType::f32, DType::bf16}) {
        // With activation checkpointing too (its measure and build share the bind).
        const auto recompute = cfg.type == ModelType::mlp ? ActivationCheckpointing::none
                               : batch == 3               ? ActivationCheckpointing::full
                               : dt == DType::bf16        ? ActivationCheckpointing::selective
                                                          : ActivationCheckpointing::none;
        CAPTURE(enum_name(cfg.type));
        CAPTURE(cfg.d_model);
        CAPTURE(batch);
        CAPTURE(dtype_name(dt));
        CAPTURE(enum_name(recompute));
        const ModelSpec& spec = model_spec(cfg.type);
        const ModelShape shape = spec.measure(cfg, batch, dt, recompute, 1);
        auto model = spec.build(cfg, *be, batch, dt, recompute, ParamStorage::flat, {});
        CHECK(shape.params == model->params().numel());
        CHECK(shape.activation_bytes == static_cast<int64_t>(model->activation_bytes()));
        // Modules in declaration order; each parameter sits under the module it is counted in.
        size_t module = 0;
        int64_t in_module = 0;
        for (const auto& info : model->params().infos()) {
          CAPTURE(info.name);
          REQUIRE(module < shape.params_by_module.size());
          if (info.name.rfind(shape.params_by_module[module].first + ".", 0) != 0) {
            CHECK(in_module == shape.params_by_module[module].second);
            ++module;
            in_module = 0;
            REQUIRE(module < shape.params_by_module.size());
          }
          CHECK(info.name.rfind(shape.params_by_module[module].first + ".", 0) == 0);
          in_module += info.numel;
        }
        CHECK(module + 1 == shape.params_by_module.size());
        CHECK(in_module == shape.params_by_module.back().second);
      }
    }
  }
  const ModelShape gpt =
      model_spec(ModelType::gpt)
          .measure(gpt_config(2, 16, 2, 8, 32), 1, DType::f32, ActivationCheckpointing::none, 1);
  std::vector<std::string> names;
  for (const auto& [name, n] : gpt.params_by_module) names.push_back(name);
  CHECK(names == std::vector<std::string>{"wte", "wpe", "blocks.0", "blocks.1", "ln_f"});
  // bf16 halves every float buffer; the token ids stay int32.
  const ModelConfig big = gpt_config(2, 64, 4, 32, 64);
  const auto none = ActivationCheckpointing::none;
  const auto f32 = model_spec(ModelType::gpt).measure(big, 4, DType::f32, none, 1).activation_bytes;
  const auto bf16 =
      model_spec(ModelType::gpt).measure(big, 4, DType::bf16, none, 1).activation_bytes;
  CHECK(bf16 < f32);
  CHECK(bf16 > f32 * 45 / 100);
}

TEST_CASE("ModelSpec: parameter counts match the closed forms") {
  // gpt, per block: ln1 (2C) + qkv (3C^2 + 3C) + proj (C^2 + C) + ln2 (2C) + fc (4C^2 + 4C)
  // + proj2 (4C^2 + C); plus wte, wpe and ln_f (the head is tied to wte).
  for (const ModelConfig& cfg : spec_zoo()) {
    CAPTURE(enum_name(cfg.type));
    CAPTURE(cfg.d_model);
    const int64_t C = cfg.d_model, V = cfg.vocab_size, T = cfg.seq_len;
    int64_t expected = 0;
    if (cfg.type == ModelType::gpt) {
      expected = V * C + T * C + cfg.n_layer * (12 * C * C + 13 * C) + 2 * C;
    } else if (cfg.type == ModelType::llama) {
      // docs: V C + L (2C + (NH + 2 NKV) hd C + C^2 + 3 H C) + C + (tie ? 0 : V C)
      const int64_t NH = cfg.n_head, NKV = cfg.n_kv_head > 0 ? cfg.n_kv_head : NH, hd = C / NH;
      const int64_t auto_h = ((8 * C + 2) / 3 + 63) / 64 * 64;  // ceil(8C/3), up to 64k
      const int64_t H = cfg.ffn_hidden > 0 ? cfg.ffn_hidden : auto_h;
      expected = V * C + cfg.n_layer * (2 * C + (NH + 2 * NKV) * hd * C + C * C + 3 * H * C) + C +
                 (cfg.tie_embeddings ? 0 : V * C);
    } else {
      int64_t in = T * C;
      expected = V * C;
      for (int h : cfg.hidden) {
        expected += in * h + h;
        in = h;
      }
      expected += in * V + V;
    }
    CHECK(parameter_count(cfg) == expected);
    CHECK(
        model_spec(cfg.type).measure(cfg, 2, DType::f32, ActivationCheckpointing::none, 1).params ==
        expected);
  }
}

namespace {
// A batch of 2 sequences with fixed ids and targets, for tests that need one forward/backward.
void set_fixed_batch(Model& model, const ModelConfig& cfg) {
  const size_t n = static_cast<size_t>(2 * cfg.seq_len);
  std::vector<int32_t> x(n), y(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<int32_t>((i * 3) % static_cast<size_t>(cfg.vocab_size));
    y[i] = static_cast<int32_t>((i * 5 + 1) % static_cast<size_t>(cfg.vocab_size));
  }
  model.set_batch(x.data(), y.data());
}
}  // namespace

TEST_CASE("ModelSpec: last_ready_params is what backward reports final last") {
  auto be = make_cpu_backend();
  for (const ModelConfig& cfg : spec_zoo()) {
    CAPTURE(enum_name(cfg.type));
    CAPTURE(cfg.d_model);
    const ModelSpec& spec = model_spec(cfg.type);
    auto model =
        spec.build(cfg, *be, 2, DType::f32, ActivationCheckpointing::none, ParamStorage::flat, {});
    model->params().initialize(5);
    set_fixed_batch(*model, cfg);
    model->forward(true, 1);
    int64_t last = -1;
    model->backward(1.0f, 1, [&](int64_t begin, int64_t end) { last = end - begin; });
    CHECK(last ==
          spec.measure(cfg, 2, DType::f32, ActivationCheckpointing::none, 1).last_ready_params);
  }
  const ModelConfig gpt = gpt_config(2, 16, 2, 8, 32);
  CHECK(model_spec(ModelType::gpt)
            .measure(gpt, 1, DType::f32, ActivationCheckpointing::none, 1)
            .last_ready_params == (32 + 8) * 16);  // wte and wpe
}

TEST_CASE(
    "begin_grads: every model's gradients come out as from zeroed buffers, whatever was there") {
  auto be = make_cpu_backend();
  for (const ModelConfig& cfg : spec_zoo()) {
    CAPTURE(enum_name(cfg.type));
    CAPTURE(cfg.d_model);
    auto model = model_spec(cfg.type).build(cfg, *be, 2, DType::f32, ActivationCheckpointing::none,
                                            ParamStorage::flat, {});
    ParamStore& ps = model->params();
    ps.initialize(5);
    set_fixed_batch(*model, cfg);
    auto grads = [&] {
      const float* g = ps.grads().as<float>();
      return std::vector<float>(g, g + ps.numel());
    };
    // Reference: zeroed buffers, every op accumulating.
    be->fill(ps.grads(), 0.0);
    model->forward(true, 1);
    model->backward(1.0f, 1, nullptr);
    const std::vector<float> want = grads();
    // Stale buffers (NaN: any value an op read would show), first writes overwrite, twice over
    // so the second step starts from the first's gradients.
    be->fill(ps.grads(), NAN);
    for (int step = 0; step < 2; ++step) {
      ps.begin_grads();
      model->forward(true, 1);
      int64_t ready_end = 0;
      model->backward(1.0f, 1, [&](int64_t begin, int64_t end) {
        ps.zero_stale(begin, end);
        ready_end = std::max(ready_end, end);
      });
      ps.zero_stale(0, ps.numel());
      CHECK(ready_end == ps.numel());
      CHECK(grads() == want);
    }
  }
}

TEST_CASE("Llama: parameter counts by hand, names and modules in forward order") {
  // C 16, 4 heads (hd 4), V 32: wte 512; per block 2*16 norms + qkv (4 + 2 KV) * 4 * 16
  // + proj 256 + SwiGLU 3 * 16 * H; norm_f 16; lm_head 512 when untied.
  CHECK(parameter_count(llama_config(2, 16, 4, 2, 8, 32, false)) ==
        512 + 2 * (32 + 512 + 256 + 3 * 16 * 64) + 16 + 512);  // GQA, H auto = 64
  CHECK(parameter_count(llama_config(2, 16, 4, 1, 8, 32, true)) ==
        512 + 2 * (32 + 384 + 256 + 3 * 16 * 64) + 16);  // multi-query, tied
  CHECK(parameter_count(llama_config(1, 16, 4, 4, 8, 32, true, 24)) ==
        512 + (32 + 768 + 256 + 3 * 16 * 24) + 16);  // as many kv heads as heads, H 24
  CHECK(parameter_count(llama_config(1, 16, 4, 0, 8, 32, true, 24)) ==
        parameter_count(llama_config(1, 16, 4, 4, 8, 32, true, 24)));  // 0 = n_head
  // d_model 96: 8 * 96 / 3 = 256 exactly, a multiple of 64: H 256.
  CHECK(parameter_count(llama_config(1, 96, 4, 4, 8, 10, true)) ==
        960 + (192 + 3 * 96 * 96 + 96 * 96 + 3 * 256 * 96) + 96);
  const ModelShape s = model_spec(ModelType::llama)
                           .measure(llama_config(2, 16, 4, 2, 8, 32, false), 1, DType::f32,
                                    ActivationCheckpointing::none, 1);
  std::vector<std::string> modules;
  for (const auto& [name, n] : s.params_by_module) modules.push_back(name);
  CHECK(modules == std::vector<std::string>{"wte", "blocks.0", "blocks.1", "norm_f", "lm_head"});
  CHECK(s.last_ready_params == 512);  // wte
  auto be = make_cpu_backend();
  auto model = build_model(llama_config(1, 16, 4, 2, 8, 32, false), *be, 1);
  std::vector<std::string> names;
  for (const auto& info : model->params().infos()) names.push_back(info.name);
  CHECK(names == std::vector<std::string>{"wte.weight", "blocks.0.attn_norm.weight",
                                          "blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight",
                                          "blocks.0.mlp_norm.weight", "blocks.0.mlp.gate_up.weight",
                                          "blocks.0.mlp.down.weight", "norm_f.weight",
                                          "lm_head.weight"});
  CHECK(model->params().infos()[2].shape == std::vector<int64_t>{32, 16});  // (4 + 2*2) * 4
}

TEST_CASE("ModelSpec: how sampling places a context in the window") {
  const std::vector<int32_t> shorter = {7, 8, 9}, longer = {1, 2, 3, 4, 5, 6, 7};
  std::vector<int32_t> window(5, -1);
  SUBCASE("gpt: from position 0, padding after it; the row of the last context token") {
    const ModelSpec& gpt = model_spec(ModelType::gpt);
    CHECK(gpt.place_context(shorter, window) == 2);
    CHECK(window == std::vector<int32_t>{7, 8, 9, 0, 0});
    CHECK(gpt.place_context(longer, window) == 4);
    CHECK(window == std::vector<int32_t>{3, 4, 5, 6, 7});
  }
  SUBCASE("llama: as gpt (causal, positions from 0)") {
    const ModelSpec& llama = model_spec(ModelType::llama);
    CHECK(llama.place_context(shorter, window) == 2);
    CHECK(window == std::vector<int32_t>{7, 8, 9, 0, 0});
    CHECK(llama.place_context(longer, window) == 4);
    CHECK(window == std::vector<int32_t>{3, 4, 5, 6, 7});
  }
  SUBCASE("mlp: right-aligned after newlines; one prediction per window") {
    const ModelSpec& mlp = model_spec(ModelType::mlp);
    CHECK(mlp.place_context(shorter, window) == 0);
    CHECK(window == std::vector<int32_t>{'\n', '\n', 7, 8, 9});
    CHECK(mlp.place_context(longer, window) == 0);
    CHECK(window == std::vector<int32_t>{3, 4, 5, 6, 7});
  }
}

TEST_CASE("ModelSpec: FLOPs and targets per family") {
  const ModelConfig gpt = gpt_config(3, 48, 6, 16, 97);
  // matmuls per layer 24 C^2 and attention 4 T C per token, head 2 C V.
  CHECK(forward_flops_per_token(gpt) == 3 * (24.0 * 48 * 48 + 4.0 * 16 * 48) + 2.0 * 48 * 97);
  CHECK(train_flops_per_token(gpt) == 3 * forward_flops_per_token(gpt));
  CHECK(targets_per_sequence(gpt) == 16);
  const ModelConfig mlp = mlp_config(10, 3, 27, {33, 17});
  CHECK(forward_flops_per_token(mlp) == 2.0 * 30 * 33 + 2.0 * 33 * 17 + 2.0 * 17 * 27);
  CHECK(targets_per_sequence(mlp) == 1);
  // llama, C 48, 6 heads (hd 8), 2 kv heads, H 128 (auto): qkv 2 C (6 + 4) hd, proj 2 C^2,
  // gate_up 2 C 2H, down 2 H C per layer; attention 4 T C; head 2 C V.
  const ModelConfig llama = llama_config(3, 48, 6, 2, 16, 97, false);
  CHECK(forward_flops_per_token(llama) ==
        3 * (2.0 * 48 * 80 + 2.0 * 48 * 48 + 4.0 * 48 * 128 + 2.0 * 128 * 48 + 4.0 * 16 * 48) +
            2.0 * 48 * 97);
  CHECK(train_flops_per_token(llama) == 3 * forward_flops_per_token(llama));
  CHECK(targets_per_sequence(llama) == 16);
}

TEST_CASE("ModelSpec: every family states its rules, bounds and description") {
  for (const ModelConfig& cfg : spec_zoo()) {
    CAPTURE(enum_name(cfg.type));
    CAPTURE(cfg.d_model);
    const ModelSpec& spec = model_spec(cfg.type);
    CHECK(spec.type == cfg.type);
    REQUIRE(spec.rules != nullptr);
    CHECK(std::string(spec.rules).rfind(std::string(enum_name(cfg.type)) + ":", 0) == 0);
    std::vector<ModelProblem> problems;
    spec.validate(cfg, problems);
    // The zoo builds; only an mlp without hidden layers (the model can, configs may not) breaks
    // a rule.
    CHECK(problems.size() == (cfg.type == ModelType::mlp && cfg.hidden.empty() ? 1u : 0u));
    // The bounds are upper estimates of real tensors: at least the largest weight matrix the
    // measuring pass declares (in double, before any int64 arithmetic could overflow).
    std::vector<TensorBound> bounds;
    spec.tensor_bounds(cfg, 2, bounds);
    const ModelShape shape = spec.measure(cfg, 2, DType::f32, ActivationCheckpointing::none, 1);
    double largest_block = 0;
    for (const auto& [module, n] : shape.params_by_module)
      if (module.rfind("blocks.", 0) == 0 || module.rfind("hidden", 0) == 0 ||
          module.rfind("fc", 0) == 0)
        largest_block = std::max(largest_block, double(n));
    double largest_bound = 0;
    for (const TensorBound& b : bounds) largest_bound = std::max(largest_bound, b.elements);
    CHECK(largest_bound >= largest_block * 0.5);
    const std::string d = spec.describe(cfg);
    CHECK(d.rfind(std::string(enum_name(cfg.type)), 0) == 0);
    CHECK(d.find("vocab " + std::to_string(cfg.vocab_size)) != std::string::npos);
  }
  // A broken config gets the family's own reasons, naming the keys.
  ModelConfig llama;
  llama.type = ModelType::llama;
  llama.d_model = 96;
  llama.n_head = 4;  // head dimension 24: even, fine
  llama.n_kv_head = 3;
  std::vector<ModelProblem> problems;
  model_spec(ModelType::llama).validate(llama, problems);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].keys[0] == "model.n_kv_head");
  ModelConfig mlp;
  mlp.type = ModelType::mlp;
  mlp.hidden.clear();
  problems.clear();
  model_spec(ModelType::mlp).validate(mlp, problems);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].message.find("model.hidden is empty") != std::string::npos);
}

TEST_CASE("document masking: two packed documents give the logits of each run on its own") {
  // Row 0 packs documents A and B (each ending in the end-of-text id); row 1 packs B then A. With
  // document masking each position's logits must equal those of its document run alone at the
  // start of a row (what follows it there cannot matter: attention is causal). That holds only
  // if attention stays inside the document and the positions (gpt's learned table, llama's RoPE)
  // restart at its start. Without masking the second document's logits differ.
  const int T = 12, V = 20, n = 6;
  const int32_t eot = 19;
  for (const ModelConfig& cfg :
       {gpt_config(2, 16, 2, T, V), llama_config(2, 16, 4, 2, T, V, false)}) {
    CAPTURE(enum_name(cfg.type));
    auto be = make_cpu_backend();
    auto model = build_model(cfg, *be, 2, DType::f64);
    Rng rng(11);
    randomize(model->params().params(), rng, 0.3);
    std::vector<int32_t> A(n), B(n);
    for (int i = 0; i < n; ++i) {
      A[size_t(i)] = static_cast<int32_t>(rng.next() % (V - 1));
      B[size_t(i)] = static_cast<int32_t>(rng.next() % (V - 1));
    }
    A[n - 1] = B[n - 1] = eot;  // each document ends with the end-of-text id
    auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
      a.insert(a.end(), b.begin(), b.end());
      return a;
    };
    const std::vector<int32_t> zeros(n, 0), targets(2 * T, 1);
    // The logits [2T, V] of rows r0 and r1, with or without document masking.
    auto logits = [&](const std::vector<int32_t>& r0, const std::vector<int32_t>& r1, bool masked) {
      const std::vector<int32_t> x = cat(r0, r1);
      std::vector<int32_t> starts(x.size());
      document_starts(x.data(), 2, T, eot, starts.data());
      model->set_batch(x.data(), targets.data());
      model->set_documents(masked ? starts.data() : nullptr);
      model->forward(false, 0);
      std::vector<double> out(static_cast<size_t>(2 * T * V));
      be->copy(Tensor(out.data(), DType::f64, Device::cpu, {2 * T, V}), model->logits());
      return out;
    };
    const auto packed = logits(cat(A, B), cat(B, A), true);
    const auto alone = logits(cat(A, zeros), cat(B, zeros), false);
    const auto unmasked = logits(cat(A, B), cat(B, A), false);
    // Row r, positions [p0, p0 + n) of `a` against positions [0, n) of row r of `b`.
    auto max_diff = [&](const std::vector<double>& a, int r, int p0, const std::vector<double>& b,
                        int rb) {
      double d = 0;
      for (int p = 0; p < n; ++p)
        for (int v = 0; v < V; ++v)
          d = std::max(d, std::abs(a[size_t(((r * T) + p0 + p) * V + v)] -
                                   b[size_t(((rb * T) + p) * V + v)]));
      return d;
    };
    CHECK(max_diff(packed, 0, 0, alone, 0) < 1e-12);   // A first: as alone
    CHECK(max_diff(packed, 0, n, alone, 1) < 1e-12);   // B after A: as B alone
    CHECK(max_diff(packed, 1, 0, alone, 1) < 1e-12);   // B first
    CHECK(max_diff(packed, 1, n, alone, 0) < 1e-12);   // A after B
    CHECK(max_diff(unmasked, 0, n, alone, 1) > 1e-3);  // B sees A without masking
    // Masking off again (nullptr): the plain causal model.
    CHECK(logits(cat(A, B), cat(B, A), false) == unmasked);
  }
}

TEST_CASE("document_starts: a document starts at 0 and after each end-of-text id") {
  const std::vector<int32_t> x = {5, 9, 7, 9, 9, 3, /* row 1 */ 9, 1, 2, 3, 4, 9};
  std::vector<int32_t> s(x.size());
  document_starts(x.data(), 2, 6, 9, s.data());
  CHECK(s == std::vector<int32_t>{0, 0, 2, 2, 4, 5, 0, 1, 1, 1, 1, 1});
}

namespace {

// One fp32 step's loss sum and gradients of `cfg` on fixed tokens (seed 4 for the dropout), with
// or without activation checkpointing; `docs`: document starts for document masking.
struct StepGrads {
  double loss_sum = 0;
  std::vector<float> grads;
  size_t activation_bytes = 0;
};
StepGrads step_grads(const ModelConfig& cfg, ActivationCheckpointing checkpointing,
                     const std::vector<int32_t>* docs) {
  auto be = make_cpu_backend();
  const int batch = 2;
  auto model = build_model(cfg, *be, batch, DType::f32, checkpointing);
  model->params().initialize(21);
  const size_t n = static_cast<size_t>(batch * cfg.seq_len);
  std::vector<int32_t> x(n), y(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<int32_t>((i * 7 + 3) % static_cast<size_t>(cfg.vocab_size));
    y[i] = static_cast<int32_t>((i * 5 + 1) % static_cast<size_t>(cfg.vocab_size));
  }
  model->set_batch(x.data(), y.data());
  if (docs) model->set_documents(docs->data());
  StepGrads out;
  const float scale = 1.0f / static_cast<float>(model->targets_per_batch());
  model->forward(true, 4, Tensor(&out.loss_sum, DType::f64, Device::cpu, {1}), scale);
  model->params().begin_grads();
  model->backward(scale, 4, {});
  model->params().zero_stale(0, model->params().numel());
  const float* g = model->params().grads().as<float>();
  out.grads.assign(g, g + model->params().numel());
  out.activation_bytes = model->activation_bytes();
  return out;
}

}  // namespace

TEST_CASE("activation checkpointing: the gradients are checked, and bit-identical to none") {
  // f64 finite differences through the recomputed blocks (dropout 0: a smooth loss).
  for (const auto mode : {ActivationCheckpointing::full, ActivationCheckpointing::selective}) {
    CAPTURE(enum_name(mode));
    check_model(gpt_config(3, 8, 2, 5, 11), 2, mode);
    check_model(llama_config(3, 8, 2, 1, 5, 11, false, 16), 2, mode);
  }
  // fp32, with dropout (the recomputation must draw the same masks) and document masking.
  ModelConfig gpt = gpt_config(4, 16, 2, 8, 19), llama = llama_config(4, 16, 4, 2, 8, 19, false);
  gpt.dropout = llama.dropout = 0.2;
  std::vector<int32_t> docs(16);
  for (size_t i = 0; i < docs.size(); ++i) docs[i] = static_cast<int32_t>(i % 8 < 3 ? 0 : 3);
  for (const ModelConfig& cfg : {gpt, llama}) {
    for (const std::vector<int32_t>* d : {static_cast<const std::vector<int32_t>*>(nullptr),
                                          static_cast<const std::vector<int32_t>*>(&docs)}) {
      CAPTURE(enum_name(cfg.type));
      CAPTURE(d != nullptr);
      const StepGrads none = step_grads(cfg, ActivationCheckpointing::none, d);
      const StepGrads full = step_grads(cfg, ActivationCheckpointing::full, d);
      const StepGrads selective = step_grads(cfg, ActivationCheckpointing::selective, d);
      for (const StepGrads* g : {&full, &selective}) {
        CHECK(g->loss_sum == none.loss_sum);
        REQUIRE(g->grads.size() == none.grads.size());
        CHECK(std::memcmp(g->grads.data(), none.grads.data(), g->grads.size() * sizeof(float)) ==
              0);
      }
      // The blocks' activations but their kept part are shared: less memory, and selective
      // keeps more than full (the GEMMs' and attention's outputs).
      CHECK(full.activation_bytes < selective.activation_bytes);
      CHECK(selective.activation_bytes < none.activation_bytes);
    }
  }
}

TEST_CASE("ParamStore: parameters declared before any begin_unit are one unit from the first") {
  // The unit opened at the first declare used to begin after that parameter's elements, so a
  // ZeRO unit of such a store left it out, and its views reached back by an unsigned wrap.
  auto be = make_cpu_backend();
  ParamStore ps(*be);
  ps.declare("a", {3, 5}, Init::zeros, 0.0f, false);
  ps.declare("b", {5}, Init::zeros, 0.0f, false);
  REQUIRE(ps.units().size() == 1);
  CHECK(ps.units()[0].first == 0);
  CHECK(ps.units()[0].last == 2);
  CHECK(ps.units()[0].begin == 0);
  CHECK(ps.units()[0].end == 20);
  ps.allocate();
  CHECK(ps.param(0).data == ps.params().data);
  CHECK(static_cast<float*>(ps.param(1).data) == static_cast<float*>(ps.params().data) + 15);
}
