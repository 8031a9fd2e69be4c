// The CPU backend is the reference every other backend is compared against, so its own proof is
// independent of it: finite-difference gradients in double for every backward op, naive
// references (materialised softmax attention, -log softmax, a scalar AdamW step), f32 against
// f64, the accumulate/overwrite conventions, dropout's mask properties, and shape validation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../src/backend/cpu/vec_math.h"
#include "cpu_gradcheck.h"
#include "temp_dir.h"
#include "trainrun/backend/backend.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/no_id.h"

using namespace trainrun::testing;

using namespace trainrun;

TEST_CASE("gradcheck: matmul (din, dw, dbias) with a 3-d input") {
  Rng rng;
  const int64_t B = 2, T = 3, C = 7, OC = 6, N = B * T;
  auto in = rng.vec(N * C), w = rng.vec(OC * C), bias = rng.vec(OC);
  std::vector<double> out(N * OC), din(N * C), dw(OC * C), dbias(OC);
  GradCase c;
  c.inputs = {&in, &w, &bias};
  c.grads = {&din, &dw, &dbias};
  c.out = &out;
  c.forward = [&] {
    be().matmul(view(out, {B, T, OC}), view(in, {B, T, C}), view(w, {OC, C}), view(bias, {OC}));
  };
  c.backward = [&](std::vector<double>& d) {
    be().matmul_backward(view(din, {B, T, C}), view(dw, {OC, C}), view(dbias, {OC}),
                         view(d, {B, T, OC}), view(in, {B, T, C}), view(w, {OC, C}));
  };
  check_gradients(c, rng);

  SUBCASE("empty din and dbias are skipped, dw unchanged, no bias means none added") {
    std::vector<double> out2(N * OC), dw2(OC * C, 0.0), dw3(OC * C, 0.0);
    be().matmul(view(out2, {N, OC}), view(in, {N, C}), view(w, {OC, C}), Tensor());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o)
        CHECK(out2[n * OC + o] == doctest::Approx(out[n * OC + o] - bias[o]));
    auto d = rng.vec(N * OC);
    std::vector<double> din3(N * C), db3(OC);
    be().matmul_backward(Tensor(), view(dw2, {OC, C}), Tensor(), view(d, {N, OC}), view(in, {N, C}),
                         view(w, {OC, C}));
    be().matmul_backward(view(din3, {N, C}), view(dw3, {OC, C}), view(db3, {OC}), view(d, {N, OC}),
                         view(in, {N, C}), view(w, {OC, C}));
    for (size_t i = 0; i < dw2.size(); ++i) CHECK(dw2[i] == doctest::Approx(dw3[i]).epsilon(1e-14));
  }
}

TEST_CASE("gradcheck: layernorm (din, dw, db)") {
  Rng rng;
  const int64_t rows = 4, C = 10;
  auto in = rng.vec(rows * C, -2, 2), w = rng.vec(C), b = rng.vec(C);
  std::vector<double> out(rows * C), mean(rows), rstd(rows), din(rows * C), dw(C), db(C);
  GradCase c;
  c.inputs = {&in, &w, &b};
  c.grads = {&din, &dw, &db};
  c.out = &out;
  c.forward = [&] {
    be().layernorm(view(out, {rows, C}), view(mean, {rows}), view(rstd, {rows}),
                   view(in, {rows, C}), view(w, {C}), view(b, {C}));
  };
  c.backward = [&](std::vector<double>& d) {
    be().layernorm_backward(view(din, {rows, C}), view(dw, {C}), view(db, {C}), view(d, {rows, C}),
                            view(in, {rows, C}), view(w, {C}), view(mean, {rows}),
                            view(rstd, {rows}));
  };
  check_gradients(c, rng);
  // The saved statistics are the row's mean and 1/sqrt(var + 1e-5), computed here naively.
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < C; ++i) m += in[r * C + i] / C;
    for (int64_t i = 0; i < C; ++i) v += (in[r * C + i] - m) * (in[r * C + i] - m) / C;
    CHECK(mean[r] == doctest::Approx(m).epsilon(1e-13));
    CHECK(rstd[r] == doctest::Approx(1 / std::sqrt(v + 1e-5)).epsilon(1e-13));
  }
}

TEST_CASE("gradcheck: gelu and relu") {
  Rng rng;
  const int64_t n = 23;
  auto in = rng.vec(n, -3, 3);
  away_from_zero(in);
  std::vector<double> out(n), din(n);
  GradCase c;
  c.inputs = {&in};
  c.grads = {&din};
  c.out = &out;
  SUBCASE("gelu") {
    c.forward = [&] { be().gelu(view(out, {n}), view(in, {n})); };
    c.backward = [&](std::vector<double>& d) {
      be().gelu_backward(view(din, {n}), view(d, {n}), view(in, {n}));
    };
    check_gradients(c, rng);
    for (int64_t i = 0; i < n; ++i) {
      const double x = in[i];
      CHECK(out[i] ==
            doctest::Approx(0.5 * x *
                            (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))))
                .epsilon(1e-14));
    }
  }
  SUBCASE("relu") {
    c.forward = [&] { be().relu(view(out, {n}), view(in, {n})); };
    c.backward = [&](std::vector<double>& d) {
      be().relu_backward(view(din, {n}), view(d, {n}), view(in, {n}));
    };
    check_gradients(c, rng);
    for (int64_t i = 0; i < n; ++i) CHECK(out[i] == std::max(0.0, in[i]));
  }
}

TEST_CASE("gradcheck: dropout") {
  Rng rng;
  const int64_t n = 60;
  auto in = rng.vec(n);
  std::vector<double> out(n), din(n);
  GradCase c;
  c.inputs = {&in};
  c.grads = {&din};
  c.out = &out;
  c.forward = [&] { be().dropout(view(out, {n}), view(in, {n}), 0.3f, 77); };
  c.backward = [&](std::vector<double>& d) {
    be().dropout_backward(view(din, {n}), view(d, {n}), 0.3f, 77);
  };
  check_gradients(c, rng);
  int dropped = 0;
  for (double o : out) dropped += o == 0.0;
  CHECK(dropped > 0);
  CHECK(dropped < n);
}

namespace {
void attention_gradcheck(int64_t B, int64_t T, int NH, int64_t hd) {
  Rng rng;
  const int64_t C = NH * hd;
  auto qkv = rng.vec(B * T * 3 * C);
  std::vector<double> out(B * T * C), lse(B * NH * T), dqkv(qkv.size());
  GradCase c;
  c.inputs = {&qkv};
  c.grads = {&dqkv};
  c.out = &out;
  c.forward = [&] {
    be().attention(view(out, {B, T, C}), view(lse, {B, NH, T}), view(qkv, {B, T, 3 * C}), NH);
  };
  c.backward = [&](std::vector<double>& d) {
    be().attention_backward(view(dqkv, {B, T, 3 * C}), view(d, {B, T, C}), view(qkv, {B, T, 3 * C}),
                            view(out, {B, T, C}), view(lse, {B, NH, T}), NH);
  };
  check_gradients(c, rng);
}
}  // namespace

TEST_CASE("gradcheck: causal attention, T not a power of two, several heads") {
  SUBCASE("B=2 T=7 NH=3 hd=4") {
    attention_gradcheck(2, 7, 3, 4);
  }
  SUBCASE("B=1 T=13 NH=2 hd=5") {
    attention_gradcheck(1, 13, 2, 5);
  }
}

TEST_CASE("gradcheck: embedding with repeated ids") {
  Rng rng;
  const int64_t V = 6, C = 5, N = 9;
  std::vector<int32_t> ids = {1, 3, 1, 0, 5, 3, 3, 2, 1};  // 1 and 3 repeat; 4 never appears
  auto table = rng.vec(V * C);
  std::vector<double> out(N * C), dtable(V * C);
  GradCase c;
  c.inputs = {&table};
  c.grads = {&dtable};
  c.out = &out;
  c.forward = [&] { be().embedding(view(out, {N, C}), view(ids, {N}), view(table, {V, C})); };
  c.backward = [&](std::vector<double>& d) {
    be().embedding_backward(view(dtable, {V, C}), view(d, {N, C}), view(ids, {N}));
  };
  check_gradients(c, rng);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < C; ++i) CHECK(out[n * C + i] == table[ids[n] * C + i]);
}

TEST_CASE("gradcheck: cross-entropy (overwrites, scale)") {
  Rng rng;
  const int64_t N = 4, V = 9;
  auto logits = rng.vec(N * V, -3, 3);
  auto targets = rng.ids(N, V);
  std::vector<double> losses(N), lse(N), dlogits(N * V);
  const float scale = 0.375f;
  GradCase c;
  c.inputs = {&logits};
  c.grads = {&dlogits};
  c.out = &losses;
  c.uniform_dout = scale;  // the backward is d(scale * sum losses)/dlogits
  c.accumulates = false;
  c.forward = [&] {
    be().cross_entropy(view(losses, {N}), view(lse, {N}), view(logits, {N, V}), view(targets, {N}));
  };
  c.backward = [&](std::vector<double>&) {
    be().cross_entropy_backward(view(dlogits, {N, V}), view(logits, {N, V}), view(lse, {N}),
                                view(targets, {N}), scale);
  };
  check_gradients(c, rng);

  SUBCASE("dlogits may alias logits") {
    std::vector<double> inplace = logits;
    be().cross_entropy_backward(view(inplace, {N, V}), view(inplace, {N, V}), view(lse, {N}),
                                view(targets, {N}), scale);
    for (size_t i = 0; i < inplace.size(); ++i) CHECK(inplace[i] == dlogits[i]);
  }
}

TEST_CASE("cross-entropy equals -log softmax computed naively, and is stable for large logits") {
  Rng rng;
  const int64_t N = 6, V = 50;
  auto logits = rng.vec(N * V, -5, 5);
  auto targets = rng.ids(N, V);
  std::vector<double> losses(N), lse(N);
  be().cross_entropy(view(losses, {N}), view(lse, {N}), view(logits, {N, V}), view(targets, {N}));
  for (int64_t n = 0; n < N; ++n) {
    long double z = 0;
    for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<long double>(logits[n * V + v]));
    const long double p = std::exp(static_cast<long double>(logits[n * V + targets[n]])) / z;
    CHECK(losses[n] == doctest::Approx(static_cast<double>(-std::log(p))).epsilon(1e-13));
    CHECK(lse[n] == doctest::Approx(static_cast<double>(std::log(z))).epsilon(1e-13));
  }
  // exp(1000) overflows even double: only a max-shifted form gives finite, shift-invariant
  // losses. f32 logits near 1000 carry ~6e-5 of rounding, hence 1e-3.
  std::vector<float> big(N * V), lbig(N), lsebig(N);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(logits[i] + 1000.0);
  be().cross_entropy(view(lbig, {N}), view(lsebig, {N}), view(big, {N, V}), view(targets, {N}));
  for (int64_t n = 0; n < N; ++n) {
    REQUIRE(std::isfinite(lbig[n]));
    CHECK(lbig[n] == doctest::Approx(losses[n]).epsilon(1e-3));
  }
}

TEST_CASE("attention matches a naive reference that materialises the causal softmax") {
  Rng rng;
  const int64_t B = 2, T = 11;
  const int NH = 3;
  const int64_t hd = 8, C = NH * hd;
  auto qkv = rng.vec(B * T * 3 * C, -2, 2);
  std::vector<double> out(B * T * C), lse(B * NH * T);
  be().attention(view(out, {B, T, C}), view(lse, {B, NH, T}), view(qkv, {B, T, 3 * C}), NH);
  std::vector<float> qkv32 = cast<float>(qkv), out32(out.size()), lse32(lse.size());
  be().attention(view(out32, {B, T, C}), view(lse32, {B, NH, T}), view(qkv32, {B, T, 3 * C}), NH);

  const double scale = 1 / std::sqrt(static_cast<double>(hd));
  for (int64_t b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      // S[t][j] for every j (masked later), then softmax row by row.
      std::vector<std::vector<double>> P(T, std::vector<double>(T, 0.0));
      for (int64_t t = 0; t < T; ++t) {
        double z = 0;
        for (int64_t j = 0; j < T; ++j) {
          double s = 0;
          for (int64_t i = 0; i < hd; ++i)
            s += qkv[(b * T + t) * 3 * C + h * hd + i] * qkv[(b * T + j) * 3 * C + C + h * hd + i];
          P[t][j] = j <= t ? std::exp(s * scale) : 0.0;
          z += P[t][j];
        }
        for (int64_t j = 0; j < T; ++j) P[t][j] /= z;
        CHECK(lse[(b * NH + h) * T + t] == doctest::Approx(std::log(z)).epsilon(1e-13));
        CHECK(lse32[(b * NH + h) * T + t] == doctest::Approx(std::log(z)).epsilon(1e-5));
        for (int64_t i = 0; i < hd; ++i) {
          double o = 0;
          for (int64_t j = 0; j < T; ++j)
            o += P[t][j] * qkv[(b * T + j) * 3 * C + 2 * C + h * hd + i];
          const int64_t at = (b * T + t) * C + h * hd + i;
          CHECK(out[at] == doctest::Approx(o).epsilon(1e-12));
          // f32: ~1e-7 per rounding over hd + T terms of size <= 4 gives < 1e-5 absolute.
          CHECK(std::abs(out32[at] - o) <= 1e-5);
        }
      }
    }
}

// ---------------------------------------------------------------------------------------------
// f32 against f64 on the same (f32-representable) inputs, at sizes that exercise oneDNN's
// blocking. Gradient buffers start from the same nonzero baseline so accumulation in f32
// (oneDNN with beta=1) is covered too. Tolerance per element:
//   |x32 - x64| <= 2e-5 * max(1, |x64|)
// f32 carries 6e-8 relative per rounding; the longest reductions here (K = 96 dot products,
// 256-wide layernorm rows, 500-way softmax) accumulate well under 1e-5 of the output's scale.
namespace {
struct OpInputs {
  int64_t N = 64, C = 96, OC = 80;  // matmul
  int64_t rows = 16, LC = 256;      // layernorm
  int64_t B = 2, T = 33, hd = 16;   // attention
  int NH = 4;
  int64_t V = 500, NE = 24;  // cross-entropy rows, embedding rows
  std::map<std::string, std::vector<double>> x;
  std::vector<int32_t> ids, targets;

  explicit OpInputs(Rng& rng) {
    auto put = [&](const char* k, size_t n, double lo = -1, double hi = 1) {
      auto v = rng.vec(n, lo, hi);
      for (double& e : v) e = static_cast<float>(e);  // representable in both dtypes
      x[k] = v;
    };
    const int64_t AC = NH * hd;
    put("mm.in", N * C), put("mm.w", OC * C), put("mm.b", OC), put("mm.dout", N * OC);
    put("mm.din0", N * C), put("mm.dw0", OC * C), put("mm.db0", OC);
    put("ln.in", rows * LC, -3, 3), put("ln.w", LC), put("ln.b", LC), put("ln.dout", rows * LC);
    put("ln.din0", rows * LC), put("ln.dw0", LC), put("ln.db0", LC);
    put("act.in", 1000, -4, 4), put("act.dout", 1000), put("act.din0", 1000);
    put("at.qkv", B * T * 3 * AC), put("at.dout", B * T * AC), put("at.dqkv0", B * T * 3 * AC);
    put("ce.logits", NE * V, -6, 6);
    put("em.table", V * LC), put("em.dout", NE * LC), put("em.dtable0", V * LC);
    put("ad.p", 300), put("ad.g", 300), put("ad.m", 300), put("ad.v", 300, 0, 1);
    ids = rng.ids(NE, static_cast<int32_t>(V));
    targets = rng.ids(NE, static_cast<int32_t>(V));
  }
};

template <class T>
std::map<std::string, std::vector<double>> run_all_ops(const OpInputs& I) {
  std::map<std::string, std::vector<T>> v;
  for (auto& [k, d] : I.x) v[k] = cast<T>(d);
  std::map<std::string, std::vector<double>> r;
  auto& b = be();
  {  // matmul
    const int64_t N = I.N, C = I.C, OC = I.OC;
    std::vector<T> out(N * OC);
    auto din = v["mm.din0"], dw = v["mm.dw0"], db = v["mm.db0"];
    b.matmul(view(out, {N, OC}), view(v["mm.in"], {N, C}), view(v["mm.w"], {OC, C}),
             view(v["mm.b"], {OC}));
    b.matmul_backward(view(din, {N, C}), view(dw, {OC, C}), view(db, {OC}),
                      view(v["mm.dout"], {N, OC}), view(v["mm.in"], {N, C}),
                      view(v["mm.w"], {OC, C}));
    r["matmul.out"] = to_double(out), r["matmul.din"] = to_double(din),
    r["matmul.dw"] = to_double(dw), r["matmul.dbias"] = to_double(db);
  }
  {  // layernorm
    const int64_t R = I.rows, C = I.LC;
    std::vector<T> out(R * C), mean(R), rstd(R);
    auto din = v["ln.din0"], dw = v["ln.dw0"], db = v["ln.db0"];
    b.layernorm(view(out, {R, C}), view(mean, {R}), view(rstd, {R}), view(v["ln.in"], {R, C}),
                view(v["ln.w"], {C}), view(v["ln.b"], {C}));
    b.layernorm_backward(view(din, {R, C}), view(dw, {C}), view(db, {C}),
                         view(v["ln.dout"], {R, C}), view(v["ln.in"], {R, C}), view(v["ln.w"], {C}),
                         view(mean, {R}), view(rstd, {R}));
    r["layernorm.out"] = to_double(out), r["layernorm.din"] = to_double(din),
    r["layernorm.dw"] = to_double(dw), r["layernorm.db"] = to_double(db),
    r["layernorm.rstd"] = to_double(rstd);
  }
  {  // activations, dropout
    const int64_t n = 1000;
    std::vector<T> out(n);
    auto din = v["act.din0"];
    b.gelu(view(out, {n}), view(v["act.in"], {n}));
    b.gelu_backward(view(din, {n}), view(v["act.dout"], {n}), view(v["act.in"], {n}));
    r["gelu.out"] = to_double(out), r["gelu.din"] = to_double(din);
    din = v["act.din0"];
    b.relu(view(out, {n}), view(v["act.in"], {n}));
    b.relu_backward(view(din, {n}), view(v["act.dout"], {n}), view(v["act.in"], {n}));
    r["relu.out"] = to_double(out), r["relu.din"] = to_double(din);
    din = v["act.din0"];
    b.dropout(view(out, {n}), view(v["act.in"], {n}), 0.25f, 9);
    b.dropout_backward(view(din, {n}), view(v["act.dout"], {n}), 0.25f, 9);
    r["dropout.out"] = to_double(out), r["dropout.din"] = to_double(din);
  }
  {  // attention
    const int64_t B = I.B, T_ = I.T, C = I.NH * I.hd;
    std::vector<T> out(B * T_ * C), lse(B * I.NH * T_);
    auto dqkv = v["at.dqkv0"];
    b.attention(view(out, {B, T_, C}), view(lse, {B, I.NH, T_}), view(v["at.qkv"], {B, T_, 3 * C}),
                I.NH);
    b.attention_backward(view(dqkv, {B, T_, 3 * C}), view(v["at.dout"], {B, T_, C}),
                         view(v["at.qkv"], {B, T_, 3 * C}), view(out, {B, T_, C}),
                         view(lse, {B, I.NH, T_}), I.NH);
    r["attention.out"] = to_double(out), r["attention.lse"] = to_double(lse),
    r["attention.dqkv"] = to_double(dqkv);
  }
  {  // embedding, cross-entropy
    const int64_t N = I.NE, V = I.V, C = I.LC;
    auto ids = I.ids, targets = I.targets;
    std::vector<T> out(N * C), losses(N), lse(N), dlogits(N * V);
    auto dt = v["em.dtable0"];
    b.embedding(view(out, {N, C}), view(ids, {N}), view(v["em.table"], {V, C}));
    b.embedding_backward(view(dt, {V, C}), view(v["em.dout"], {N, C}), view(ids, {N}));
    r["embedding.out"] = to_double(out), r["embedding.dtable"] = to_double(dt);
    b.cross_entropy(view(losses, {N}), view(lse, {N}), view(v["ce.logits"], {N, V}),
                    view(targets, {N}));
    b.cross_entropy_backward(view(dlogits, {N, V}), view(v["ce.logits"], {N, V}), view(lse, {N}),
                             view(targets, {N}), 1.0f / static_cast<float>(N));
    r["ce.losses"] = to_double(losses), r["ce.dlogits"] = to_double(dlogits);
  }
  {  // adamw, reductions
    AdamWParams hp;
    hp.lr = 0.01f, hp.weight_decay = 0.1f, hp.step = 5;
    const int64_t n = 300;
    b.adamw(view(v["ad.p"], {n}), view(v["ad.g"], {n}), view(v["ad.m"], {n}), view(v["ad.v"], {n}),
            hp);
    r["adamw.p"] = to_double(v["ad.p"]), r["adamw.m"] = to_double(v["ad.m"]),
    r["adamw.v"] = to_double(v["ad.v"]);
    r["sum"] = {b.sum(view(v["ln.in"], {I.rows * I.LC}))};
    r["sum_squares"] = {b.sum_squares(view(v["ln.in"], {I.rows * I.LC}))};
  }
  return r;
}
}  // namespace

TEST_CASE("f32 results agree with the f64 path") {
  Rng rng;
  OpInputs in(rng);
  auto r64 = run_all_ops<double>(in);
  auto r32 = run_all_ops<float>(in);
  REQUIRE(r64.size() == r32.size());
  for (auto& entry : r64) {
    // A named copy, not a structured binding: clang 14 cannot capture one in INFO's lambda.
    const std::string& name = entry.first;
    const auto& a64 = entry.second;
    const auto& a32 = r32.at(name);
    REQUIRE(a32.size() == a64.size());
    double worst = 0;
    for (size_t i = 0; i < a64.size(); ++i)
      worst = std::max(worst, std::abs(a32[i] - a64[i]) / std::max(1.0, std::abs(a64[i])));
    INFO(name << ": worst scaled difference " << worst);
    CHECK(worst <= 2e-5);
  }
}

TEST_CASE("adamw matches a scalar reference step, and step 1 moves by about lr*sign(g)") {
  Rng rng;
  const int64_t n = 37;
  auto p = rng.vec(n), g = rng.vec(n), m = rng.vec(n, -0.1, 0.1), v = rng.vec(n, 0, 0.01);
  AdamWParams hp;
  hp.lr = 0.02f, hp.beta1 = 0.8f, hp.beta2 = 0.95f, hp.eps = 1e-6f, hp.weight_decay = 0.1f;
  auto rp = p, rm = m, rv = v;
  for (int64_t step = 3; step <= 4; ++step) {
    hp.step = step;
    be().adamw(view(p, {n}), view(g, {n}), view(m, {n}), view(v, {n}), hp);
    const double b1 = hp.beta1, b2 = hp.beta2;
    for (int64_t i = 0; i < n; ++i) {
      rm[i] = b1 * rm[i] + (1 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1 - b2) * g[i] * g[i];
      const double mhat = rm[i] / (1 - std::pow(b1, step)), vhat = rv[i] / (1 - std::pow(b2, step));
      rp[i] = rp[i] - double(hp.lr) * (mhat / (std::sqrt(vhat) + double(hp.eps)) +
                                       double(hp.weight_decay) * rp[i]);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    CHECK(p[i] == doctest::Approx(rp[i]).epsilon(1e-13));
    CHECK(m[i] == doctest::Approx(rm[i]).epsilon(1e-13));
    CHECK(v[i] == doctest::Approx(rv[i]).epsilon(1e-13));
  }
  // From m = v = 0 with no decay, bias correction makes the first step exactly lr*g/(|g|+eps).
  std::vector<float> p1(n, 1.0f), g1 = cast<float>(g), m1(n, 0.0f), v1(n, 0.0f);
  AdamWParams first;
  first.lr = 0.01f, first.eps = 1e-8f, first.step = 1;
  be().adamw(view(p1, {n}), view(g1, {n}), view(m1, {n}), view(v1, {n}), first);
  for (int64_t i = 0; i < n; ++i)
    CHECK(p1[i] == doctest::Approx(1.0f - 0.01f * (g1[i] > 0 ? 1 : -1)).epsilon(1e-5));
}

TEST_CASE("dropout: p=0 is an exact copy; masks are reproducible, seed-dependent and ~p") {
  Rng rng;
  const int64_t n = 200000;
  std::vector<float> in = cast<float>(rng.vec(n, 0.5, 1.5)), out(n), out2(n);
  be().dropout(view(out, {n}), view(in, {n}), 0.0f, 123);
  CHECK(std::memcmp(out.data(), in.data(), n * sizeof(float)) == 0);
  std::vector<float> din(n, 0.0f), ones(n, 1.0f);
  be().dropout_backward(view(din, {n}), view(ones, {n}), 0.0f, 123);
  CHECK(std::all_of(din.begin(), din.end(), [](float d) { return d == 1.0f; }));

  const float p = 0.3f;
  be().dropout(view(out, {n}), view(in, {n}), p, 123);
  be().dropout(view(out2, {n}), view(in, {n}), p, 123);
  CHECK(std::memcmp(out.data(), out2.data(), n * sizeof(float)) == 0);
  int64_t dropped = 0, kept_ok = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (out[i] == 0.0f)
      ++dropped;
    else
      kept_ok += std::abs(out[i] - in[i] / (1 - p)) <= 1e-6f * out[i];
  }
  // Binomial sd of the fraction is sqrt(p(1-p)/n) = 0.001: 0.005 is five sd.
  CHECK(std::abs(static_cast<double>(dropped) / n - p) < 0.005);
  CHECK(kept_ok == n - dropped);
  // The backward recomputes the same mask.
  std::fill(din.begin(), din.end(), 0.0f);
  be().dropout_backward(view(din, {n}), view(ones, {n}), p, 123);
  for (int64_t i = 0; i < n; i += 97) CHECK((din[i] == 0.0f) == (out[i] == 0.0f));
  // Another seed draws another mask (expected agreement 0.58, far from 1).
  be().dropout(view(out2, {n}), view(in, {n}), p, 124);
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += (out[i] == 0.0f) == (out2[i] == 0.0f);
  CHECK(static_cast<double>(same) / n < 0.7);
}

TEST_CASE("reductions accumulate in double and propagate NaN") {
  const int64_t n = 1 << 20;
  std::vector<float> x(n, 0.1f);
  // A float accumulator drifts by ~1e-2 relative over 2^20 terms. In double, sum adds a 24-bit
  // value exactly; sum_squares rounds each add, n * 2^-53 ~ 1e-10 relative at worst.
  CHECK(be().sum(view(x, {n})) == doctest::Approx(double(0.1f) * n).epsilon(1e-12));
  CHECK(be().sum_squares(view(x, {n})) ==
        doctest::Approx(double(0.1f) * double(0.1f) * n).epsilon(1e-9));
  x[12345] = NAN;
  CHECK(std::isnan(be().sum_squares(view(x, {n}))));
  x[12345] = INFINITY;
  CHECK(std::isinf(be().sum_squares(view(x, {n}))));
}

TEST_CASE("elementwise, fill, copy, alloc") {
  Rng rng;
  auto a = rng.vec(50), b = rng.vec(50);
  std::vector<double> out(50);
  be().add(view(out, {50}), view(a, {50}), view(b, {50}));
  for (int i = 0; i < 50; ++i) CHECK(out[i] == a[i] + b[i]);
  auto a0 = a;
  be().add(view(a, {5, 10}), view(a, {5, 10}), view(b, {5, 10}));  // out aliases a
  for (int i = 0; i < 50; ++i) CHECK(a[i] == a0[i] + b[i]);
  be().accumulate(view(a, {50}), view(b, {50}));
  for (int i = 0; i < 50; ++i) CHECK(a[i] == a0[i] + b[i] + b[i]);
  const auto b0 = b;
  be().scale(view(b, {50}), -2.5);
  for (int i = 0; i < 50; ++i) CHECK(b[i] == b0[i] * -2.5);

  void* mem = be().alloc(1000);
  CHECK(reinterpret_cast<uintptr_t>(mem) % 64 == 0);
  Tensor f32(mem, DType::f32, Device::cpu, {250});
  be().fill(f32, 1.5);
  CHECK(be().sum(f32) == 375.0);
  Tensor i32(mem, DType::i32, Device::cpu, {250});
  be().fill(i32, 7);
  CHECK(static_cast<int32_t*>(mem)[249] == 7);
  Tensor bf(mem, DType::bf16, Device::cpu, {500});
  be().fill(bf, 1.0);
  CHECK(static_cast<uint16_t*>(mem)[499] == 0x3F80);  // bf16 1.0 = upper half of f32 0x3F800000
  std::vector<float> dst(250, 0.0f);
  be().fill(f32, -3.0);
  be().copy(view(dst, {250}), f32);
  CHECK(std::all_of(dst.begin(), dst.end(), [](float v) { return v == -3.0f; }));
  be().release(mem);
  CHECK(be().describe().find("oneDNN") != std::string::npos);
  CHECK(be().device() == Device::cpu);
}

TEST_CASE("scale multiplies") {
  std::vector<float> x = {1.0f, -2.0f, 4.0f};
  be().scale(view(x, {3}), -0.5);
  CHECK(x == std::vector<float>{-0.5f, 1.0f, -2.0f});
}

TEST_CASE("bad shapes, dtypes, devices and ids throw with a clear message") {
  std::vector<float> a(24), b(24), c(24);
  std::vector<double> d(24);
  std::vector<int32_t> ids(4, 0);
  auto& B = be();
  // matmul: in [4,6] . w [4,6]^T -> out must be [4,4]
  CHECK_THROWS_AS(B.matmul(view(c, {6, 4}), view(a, {4, 6}), view(b, {4, 6}), Tensor()),
                  std::invalid_argument);
  CHECK_THROWS_AS(B.matmul(view(c, {4, 6}), view(a, {4, 6}), view(b, {6, 4}), Tensor()),
                  std::invalid_argument);
  CHECK_THROWS_WITH_AS(B.matmul(view(c, {4, 6}), view(a, {4, 6}), view(d, {4, 6}), Tensor()),
                       doctest::Contains("mixed dtypes"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(B.matmul(view(c, {6, 4}), view(a, {4, 6}), view(b, {4, 6}), Tensor()),
                       doctest::Contains("[6,4]"), std::invalid_argument);
  CHECK_THROWS_AS(B.matmul_backward(Tensor(), view(c, {4, 5}), Tensor(), view(b, {6, 4}),
                                    view(a, {6, 4}), view(b, {6, 4})),
                  std::invalid_argument);
  CHECK_THROWS_AS(B.layernorm(view(c, {4, 6}), view(ids, {4}), view(ids, {4}), view(a, {4, 6}),
                              view(b, {6}), view(b, {6})),
                  std::invalid_argument);  // wrong dtype for mean/rstd
  CHECK_THROWS_AS(B.gelu(view(c, {24}), view(a, {4, 5})), std::invalid_argument);
  CHECK_THROWS_AS(B.gelu(view(ids, {4}), view(ids, {4})), std::invalid_argument);
  CHECK_THROWS_AS(B.add(view(c, {24}), view(a, {24}), view(d, {24})), std::invalid_argument);
  CHECK_THROWS_AS(B.dropout(view(c, {24}), view(a, {24}), 1.0f, 1), std::invalid_argument);
  CHECK_THROWS_AS(B.dropout(view(c, {24}), view(a, {24}), -0.1f, 1), std::invalid_argument);
  // attention: C = 4 not divisible by 3 heads; qkv must be 3-d
  std::vector<float> lse(6);
  CHECK_THROWS_WITH_AS(
      B.attention(view(c, {1, 2, 4}), view(lse, {1, 3, 2}), view(a, {1, 2, 12}), 3),
      doctest::Contains("n_head"), std::invalid_argument);
  CHECK_THROWS_AS(B.attention(view(c, {2, 4}), view(lse, {1, 2, 2, 1}), view(a, {2, 12}), 2),
                  std::invalid_argument);
  // cross-entropy: targets must be [N] i32 in [0, V)
  std::vector<float> losses(4), lse4(4);
  std::vector<int32_t> bad = {0, 1, 6, 2};
  CHECK_THROWS_AS(
      B.cross_entropy(view(losses, {4}), view(lse4, {4}), view(a, {4, 6}), view(bad, {4})),
      DataError);
  bad[2] = -2;
  CHECK_THROWS_AS(
      B.cross_entropy(view(losses, {4}), view(lse4, {4}), view(a, {4, 6}), view(bad, {4})),
      DataError);
  // kNoId (another vocabulary-parallel rank's target) is no target: the loss is the row's lse.
  bad[2] = kNoId;
  std::vector<float> logits(24);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.25f * static_cast<float>(i % 7);
  B.cross_entropy(view(losses, {4}), view(lse4, {4}), view(logits, {4, 6}), view(bad, {4}));
  CHECK(losses[2] == lse4[2]);
  CHECK(losses[1] == doctest::Approx(lse4[1] - logits[6 + 1]));
  CHECK_THROWS_AS(
      B.cross_entropy(view(losses, {3, 1}), view(lse4, {4}), view(a, {4, 6}), view(ids, {4})),
      std::invalid_argument);
  // embedding: id 7 outside a 6-row table
  std::vector<int32_t> eids = {0, 7};
  CHECK_THROWS_WITH_AS(B.embedding(view(c, {2, 4}), view(eids, {2}), view(a, {6, 4})),
                       doctest::Contains("ids[1] = 7"), DataError);
  CHECK_THROWS_AS(B.embedding_backward(view(c, {6, 4}), view(a, {3, 8}), view(ids, {3, 1})),
                  std::invalid_argument);
  // copy: sizes and devices
  CHECK_THROWS_AS(B.copy(view(c, {24}), view(d, {24})), std::invalid_argument);
  Tensor on_gpu(c.data(), DType::f32, Device::cuda, {24});
  CHECK_THROWS_AS(B.copy(on_gpu, view(a, {24})), std::invalid_argument);
  CHECK_THROWS_AS(B.accumulate(on_gpu, view(a, {24})), std::invalid_argument);
  AdamWParams hp;
  hp.step = 0;
  CHECK_THROWS_AS(B.adamw(view(a, {24}), view(b, {24}), view(c, {24}), view(c, {24}), hp),
                  std::invalid_argument);
}

TEST_CASE("measure_gemm_peak_gflops returns a finite positive rate") {
  const double g = measure_gemm_peak_gflops(be(), 128);
  CHECK(std::isfinite(g));
  CHECK(g > 0);
}

TEST_CASE(
    "gemm_peak keeps the best rate seen on this machine, so a busy start cannot inflate MFU") {
  TempDir tmp;
  const std::string cache = tmp / "sub/gemm-peak.tsv";
  // No cache yet: this run's measurement, written down.
  const GemmPeak first = gemm_peak(be(), 128, cache);
  CHECK(first.gflops > 0);
  CHECK(first.source.find("measured now") != std::string::npos);
  REQUIRE(std::filesystem::exists(cache));

  // A better rate recorded earlier (an idle machine) wins over a low measurement now.
  std::string text;
  {
    std::ifstream in(cache);
    std::getline(in, text);
  }
  const auto tab = text.rfind('\t');
  REQUIRE(tab != std::string::npos);
  const std::string key = text.substr(0, tab);
  CHECK(key.find(be().describe()) != std::string::npos);
  std::ofstream(cache) << key << "\t1e6\n"
                       << "other key\t5\n";
  const GemmPeak cached = gemm_peak(be(), 128, cache);
  CHECK(cached.gflops == doctest::Approx(1e6));
  CHECK(cached.source.find("best measured on this machine") != std::string::npos);

  // Another size is another key; a damaged file is ignored, not fatal.
  std::ofstream(cache) << "garbage without a tab\n" << key << "\tnot-a-number\n";
  const GemmPeak fresh = gemm_peak(be(), 128, cache);
  CHECK(fresh.gflops < 1e6);
  CHECK(fresh.source.find("measured now") != std::string::npos);
  // No cache file at all: measured, nothing written.
  CHECK(gemm_peak(be(), 64, "").source == "measured now, 64 GEMM");
}

// The f32 attention runs in blocks of 64 queries as GEMMs; f64 is the scalar loops. Lengths
// that span several blocks and end mid-block, grouped heads, the largest head dimension of the
// configs (128), and gradients that accumulate onto a nonzero baseline.
TEST_CASE("blocked f32 attention agrees with the scalar f64 path across blocks") {
  struct Shape {
    int64_t B, T;
    int NH, NKV;
    int64_t hd;
  };
  for (const Shape& s : {Shape{2, 150, 4, 2, 16}, Shape{1, 64, 2, 2, 8}, Shape{1, 65, 3, 1, 8},
                         Shape{1, 1, 2, 2, 4}, Shape{1, 130, 1, 1, 128}}) {
    CAPTURE(s.T);
    CAPTURE(s.NKV);
    CAPTURE(s.hd);
    Rng rng;
    const int64_t C = s.NH * s.hd, W = (s.NH + 2 * s.NKV) * s.hd;
    // f32-representable inputs, so the two paths differ only in their arithmetic.
    auto representable = [](std::vector<double> v) {
      for (double& e : v) e = static_cast<float>(e);
      return v;
    };
    auto qkv = representable(rng.vec(s.B * s.T * W, -1.5, 1.5));
    auto dout = representable(rng.vec(s.B * s.T * C));
    auto base = representable(rng.vec(s.B * s.T * W));
    std::vector<double> out(s.B * s.T * C), lse(s.B * s.NH * s.T), dqkv = base;
    be().attention(view(out, {s.B, s.T, C}), view(lse, {s.B, s.NH, s.T}), view(qkv, {s.B, s.T, W}),
                   s.NH, s.NKV);
    be().attention_backward(view(dqkv, {s.B, s.T, W}), view(dout, {s.B, s.T, C}),
                            view(qkv, {s.B, s.T, W}), view(out, {s.B, s.T, C}),
                            view(lse, {s.B, s.NH, s.T}), s.NH, s.NKV);
    auto qkv32 = cast<float>(qkv), dout32 = cast<float>(dout), dqkv32 = cast<float>(base);
    std::vector<float> out32(out.size()), lse32(lse.size());
    be().attention(view(out32, {s.B, s.T, C}), view(lse32, {s.B, s.NH, s.T}),
                   view(qkv32, {s.B, s.T, W}), s.NH, s.NKV);
    be().attention_backward(view(dqkv32, {s.B, s.T, W}), view(dout32, {s.B, s.T, C}),
                            view(qkv32, {s.B, s.T, W}), view(out32, {s.B, s.T, C}),
                            view(lse32, {s.B, s.NH, s.T}), s.NH, s.NKV);
    auto close = [](const std::vector<float>& got, const std::vector<double>& want) {
      double worst = 0;
      for (size_t i = 0; i < want.size(); ++i)
        worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
      return worst;
    };
    CHECK(close(out32, out) < 2e-5);
    CHECK(close(lse32, lse) < 2e-5);
    CHECK(close(dqkv32, dqkv) < 5e-5);
  }
}

// The f32 kernels' own exp and tanh (src/backend/cpu/vec_math.h) against libm in double, over
// every range they are used in: softmax and cross-entropy arguments (<= 0, down to where exp
// underflows), GELU's tanh (both signs), and the clamps; NaN passes through.
TEST_CASE("exp_vec and tanh_vec: relative 4e-7 / absolute 2e-7 against libm") {
  double worst_exp = 0, worst_tanh = 0;
  for (double x = -87.0; x <= 88.0; x += 0.001) {
    const float xf = static_cast<float>(x);
    const double want = std::exp(static_cast<double>(xf));
    worst_exp = std::max(worst_exp, std::abs(cpu::exp_vec(xf) - want) / want);
  }
  for (double u = -20.0; u <= 20.0; u += 0.0005) {
    const float uf = static_cast<float>(u);
    worst_tanh =
        std::max(worst_tanh, std::abs(cpu::tanh_vec(uf) - std::tanh(static_cast<double>(uf))));
  }
  CAPTURE(worst_exp);
  CAPTURE(worst_tanh);
  CHECK(worst_exp < 4e-7);
  CHECK(worst_tanh < 2e-7);
  CHECK(cpu::exp_vec(0.0f) == 1.0f);
  CHECK(cpu::exp_vec(-1000.0f) < 2e-38f);  // clamped: no NaN, no denormal
  CHECK(cpu::exp_vec(-1000.0f) >= 0.0f);
  CHECK(std::isnan(cpu::exp_vec(std::nanf(""))));
  CHECK(std::abs(cpu::tanh_vec(30.0f) - 1.0f) <= 6e-8f);  // saturated, within an ulp of 1
  CHECK(std::abs(cpu::tanh_vec(-30.0f) + 1.0f) <= 6e-8f);
}
