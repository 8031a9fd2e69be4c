// bf16 mixed precision (docs/cuda.md): the ParamStore keeps f32 masters and gradients beside a
// bf16 compute copy rounded from them, and a bf16 step of a GPT and a Llama moves the f32 masters
// as the f32 step does from the same rounded weights, within what bf16 activations explain.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "trainrun/backend/backend.h"
#include "trainrun/core/bf16.h"
#include "trainrun/model/model.h"
#include "trainrun/optim/optimizer.h"

using namespace trainrun;

namespace {

std::vector<float> host(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  be.copy(Tensor(v.data(), DType::f32, Device::cpu, {t.numel()}), t);
  return v;
}

std::vector<uint16_t> host_bf16(Backend& be, const Tensor& t) {
  std::vector<uint16_t> v(static_cast<size_t>(t.numel()));
  be.copy(Tensor(v.data(), DType::bf16, Device::cpu, {t.numel()}), t);
  return v;
}

// The compute copy is the masters rounded to nearest even, element for element.
void check_compute_copy(ParamStore& ps) {
  const auto master = host(ps.backend(), ps.params());
  const auto copy = host_bf16(ps.backend(), ps.compute_params());
  int64_t bad = 0;
  for (size_t i = 0; i < master.size(); ++i) bad += copy[i] != bf16_from_f32(master[i]);
  CHECK(bad == 0);
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

ModelConfig config(ModelType type) {
  ModelConfig cfg;
  cfg.type = type;
  cfg.n_layer = 2;
  cfg.d_model = 32;
  cfg.n_head = 4;
  cfg.seq_len = 16;
  cfg.vocab_size = 50;
  if (type == ModelType::llama) cfg.n_kv_head = 2;
  return cfg;
}

}  // namespace

TEST_CASE(
    "ParamStore under bf16: f32 masters and gradients, a bf16 compute copy rounded from them") {
  auto be = make_cpu_backend();
  ParamStore ps(*be, DType::bf16);
  const int w = ps.declare("w", {3, 5}, Init::normal, 1.0f, true);
  ps.declare("b", {5}, Init::ones, 0.0f, false);
  ps.allocate();
  ps.initialize(7);
  CHECK(ps.dtype() == DType::bf16);
  CHECK(ps.master_dtype() == DType::f32);
  CHECK(ps.params().dtype == DType::f32);
  CHECK(ps.grads().dtype == DType::f32);
  CHECK(ps.grad(w).dtype == DType::f32);
  CHECK(ps.param(w).dtype == DType::bf16);
  CHECK(ps.param(w).dim(1) == 5);
  CHECK(ps.compute_params().data != ps.params().data);
  check_compute_copy(ps);  // after initialize
  // Masters the copy cannot hold: a tie goes to even, and only refresh_compute() moves the copy.
  float* m = ps.params().as<float>();
  m[0] = 1.0f + 0x1p-8f;
  m[1] = 1.0f + 3 * 0x1p-8f;
  CHECK(bf16_to_f32(ps.param(w).as<uint16_t>()[0]) != 1.0f);
  ps.refresh_compute();
  check_compute_copy(ps);
  CHECK(bf16_to_f32(ps.param(w).as<uint16_t>()[0]) == 1.0f);
  CHECK(bf16_to_f32(ps.param(w).as<uint16_t>()[1]) == 1.0f + 0x1p-6f);
  CHECK(m[0] == 1.0f + 0x1p-8f);  // the master keeps its bits

  // f32 stores have no copy: param(i) views the masters.
  ParamStore f(*be, DType::f32);
  f.declare("w", {4}, Init::zeros, 0.0f, false);
  f.allocate();
  CHECK(f.compute_params().data == f.params().data);
  CHECK(f.param(0).data == f.params().data);
}

TEST_CASE("a bf16 step moves the f32 masters as the f32 step from the same rounded weights") {
  for (ModelType type : {ModelType::gpt, ModelType::llama}) {
    CAPTURE(static_cast<int>(type));
    auto be = make_cpu_backend();
    const ModelConfig cfg = config(type);
    const int batch = 3;
    auto half = build_model(cfg, *be, batch, DType::bf16);
    auto full = build_model(cfg, *be, batch, DType::f32);
    ParamStore &ph = half->params(), &pf = full->params();
    ph.initialize(11);
    // The f32 run starts from the weights the bf16 run computes with.
    std::vector<float> start = host(*be, ph.params());
    for (float& x : start) x = round_to_bf16(x);
    be->copy(pf.params(), Tensor(start.data(), DType::f32, Device::cpu, {pf.numel()}));

    const int64_t n = int64_t{batch} * cfg.seq_len;
    std::vector<int32_t> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      x[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + 3) % cfg.vocab_size);
      y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + 10) % cfg.vocab_size);
    }
    double loss[2];
    Model* models[2] = {half.get(), full.get()};
    for (int k = 0; k < 2; ++k) {
      models[k]->set_batch(x.data(), y.data());
      loss[k] = models[k]->forward(true, 5);
      models[k]->backward(1.0f / static_cast<float>(n), 5, nullptr);
    }
    CHECK(loss[0] == doctest::Approx(loss[1]).epsilon(1e-2));
    // bf16 activations perturb the gradients by about a percent, no more.
    const auto gh = host(*be, ph.grads()), gf = host(*be, pf.grads());
    CHECK(rel_l2(gh, gf) < 3e-2);

    const auto master0 = host(*be, ph.params());
    OptimizerConfig oc;
    oc.weight_decay = 0.1;
    AdamW oh(ph, oc, {Shard{0, ph.numel()}}), of(pf, oc, {Shard{0, pf.numel()}});
    const double lr = 1e-3;
    oh.step(ph.params(), ph.grads(), lr, 1);
    of.step(pf.params(), pf.grads(), lr, 1);
    ph.refresh_compute();
    check_compute_copy(ph);
    const auto master1 = host(*be, ph.params()), f1 = host(*be, pf.params());
    // The update of the (unrounded) masters against the f32 update of the rounded weights.
    std::vector<float> dh(master1.size()), df(f1.size());
    for (size_t i = 0; i < dh.size(); ++i) {
      dh[i] = master1[i] - master0[i];
      df[i] = f1[i] - start[i];
    }
    CHECK(rel_l2(dh, df) < 0.15);
    // The masters moved by less than bf16 resolves for most weights: they are not rounded.
    int64_t below_bf16 = 0;
    for (size_t i = 0; i < dh.size(); ++i) below_bf16 += master1[i] != round_to_bf16(master1[i]);
    CHECK(below_bf16 > static_cast<int64_t>(dh.size()) / 2);
  }
}

TEST_CASE("gradients reduced in f32 keep what a bf16 reduction would round away") {
  // Eight micro-batch gradients of a bf16 GPT (each f32, as the backward writes them), summed as
  // the trainer does (f32 +=) and as a bf16 reduction would (each partial sum stored in bf16),
  // against their sum in double. The figures are in bench/RESULTS.md (section 9).
  auto be = make_cpu_backend();
  const ModelConfig cfg = config(ModelType::gpt);
  const int batch = 2, K = 8;
  auto model = build_model(cfg, *be, batch, DType::bf16);
  ParamStore& ps = model->params();
  ps.initialize(3);
  const int64_t n = int64_t{batch} * cfg.seq_len;
  const size_t P = static_cast<size_t>(ps.numel());
  std::vector<double> exact(P, 0.0);
  std::vector<float> f32(P, 0.0f), bf16(P, 0.0f);
  std::vector<int32_t> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (int k = 0; k < K; ++k) {
    for (int64_t i = 0; i < n; ++i) {
      x[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + 3 * k + 1) % cfg.vocab_size);
      y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 11 + 5 * k + 2) % cfg.vocab_size);
    }
    be->fill(ps.grads(), 0.0);
    model->set_batch(x.data(), y.data());
    model->forward(true, 1);
    model->backward(1.0f / static_cast<float>(n * K), 1, nullptr);
    const auto g = host(*be, ps.grads());
    for (size_t i = 0; i < P; ++i) {
      exact[i] += g[i];
      f32[i] += g[i];
      bf16[i] = round_to_bf16(bf16[i] + round_to_bf16(g[i]));
    }
  }
  auto err = [&](const std::vector<float>& got) {
    double num = 0, den = 0;
    for (size_t i = 0; i < P; ++i) {
      num += (got[i] - exact[i]) * (got[i] - exact[i]);
      den += exact[i] * exact[i];
    }
    return std::sqrt(num / den);
  };
  const double e32 = err(f32), e16 = err(bf16);
  MESSAGE("relative L2 error of the summed gradient: f32 reduction " << e32 << ", bf16 reduction "
                                                                     << e16);
  CHECK(e32 < 1e-6);
  CHECK(e16 > 1e-3);  // bf16 keeps 8 mantissa bits: 2^-9 relative per rounding
}
