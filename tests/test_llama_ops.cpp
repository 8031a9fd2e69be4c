// The Llama family's backend ops on the CPU reference (include/trainrun/backend/backend.h):
// RMSNorm, rotary position embedding, the SwiGLU gate and grouped-query attention. Each forward is
// checked against a scalar formula written out here (independent of src/backend/cpu/), every
// backward by finite differences in double (cpu_gradcheck.h, which also proves it accumulates),
// f32 against f64, and every shape rule by the error it raises.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "cpu_gradcheck.h"
#include "trainrun/backend/backend.h"

using namespace trainrun;
using namespace trainrun::testing;

TEST_CASE("rmsnorm: out = x * rstd * w with rstd = 1/sqrt(mean(x^2) + 1e-5); gradcheck din, dw") {
  Rng rng;
  const int64_t rows = 5, C = 9;
  auto in = rng.vec(rows * C, -2, 2), w = rng.vec(C, 0.5, 1.5);
  std::vector<double> out(rows * C), rstd(rows), din(rows * C), dw(C);
  GradCase c;
  c.inputs = {&in, &w};
  c.grads = {&din, &dw};
  c.out = &out;
  c.forward = [&] {
    be().rmsnorm(view(out, {rows, C}), view(rstd, {rows}), view(in, {rows, C}), view(w, {C}));
  };
  c.backward = [&](std::vector<double>& d) {
    be().rmsnorm_backward(view(din, {rows, C}), view(dw, {C}), view(d, {rows, C}),
                          view(in, {rows, C}), view(w, {C}), view(rstd, {rows}));
  };
  check_gradients(c, rng);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < C; ++i) ss += in[r * C + i] * in[r * C + i];
    const double s = 1 / std::sqrt(ss / C + 1e-5);
    CHECK(rstd[r] == doctest::Approx(s).epsilon(1e-14));
    for (int64_t i = 0; i < C; ++i)
      CHECK(out[r * C + i] == doctest::Approx(in[r * C + i] * s * w[i]).epsilon(1e-14));
  }
}

namespace {

// The rope of backend.h, written out: position t, head dim hd, pair (i, i + hd/2).
std::vector<double> rope_reference(const std::vector<double>& x, int64_t B, int64_t T, int NH,
                                   int NKV, int64_t hd, double theta) {
  std::vector<double> y = x;
  const int64_t W = (NH + 2 * NKV) * hd;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < NH + NKV; ++h)  // q heads then k heads; v untouched
        for (int64_t i = 0; i < hd / 2; ++i) {
          const double a = t * std::pow(theta, -2.0 * i / hd);
          const int64_t lo = (b * T + t) * W + h * hd + i, hi = lo + hd / 2;
          y[lo] = x[lo] * std::cos(a) - x[hi] * std::sin(a);
          y[hi] = x[hi] * std::cos(a) + x[lo] * std::sin(a);
        }
  return y;
}

}  // namespace

TEST_CASE("rope: a hand case, the written-out formula, in place, v unchanged; gradcheck") {
  SUBCASE("hd = 2: the single pair turns by t radians whatever theta is") {
    // NH = NKV = 1: q, k, v heads of 2 values; position 1 turns by 1 rad, position 2 by 2 rad.
    std::vector<double> x = {1, 0, 0, 1, 5, 6,  // t = 0: unchanged
                             1, 0, 0, 1, 5, 6,  // t = 1
                             1, 0, 0, 1, 5, 6};
    std::vector<double> y(x.size());
    be().rope(view(y, {1, 3, 6}), view(x, {1, 3, 6}), 1, 1, 500000.0f);
    const std::vector<double> expect = {1,
                                        0,
                                        0,
                                        1,
                                        5,
                                        6,
                                        std::cos(1.0),
                                        std::sin(1.0),
                                        -std::sin(1.0),
                                        std::cos(1.0),
                                        5,
                                        6,
                                        std::cos(2.0),
                                        std::sin(2.0),
                                        -std::sin(2.0),
                                        std::cos(2.0),
                                        5,
                                        6};
    for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == doctest::Approx(expect[i]).epsilon(1e-15));
  }

  Rng rng;
  const int64_t B = 2, T = 5, hd = 6;
  const int NH = 4, NKV = 2;
  const int64_t W = (NH + 2 * NKV) * hd;
  const float theta = 10000.0f;
  auto in = rng.vec(B * T * W);
  std::vector<double> out(in.size()), din(in.size());
  GradCase c;
  c.inputs = {&in};
  c.grads = {&din};
  c.out = &out;
  c.forward = [&] { be().rope(view(out, {B, T, W}), view(in, {B, T, W}), NH, NKV, theta); };
  c.backward = [&](std::vector<double>& d) {
    be().rope_backward(view(din, {B, T, W}), view(d, {B, T, W}), NH, NKV, theta);
  };
  check_gradients(c, rng);

  const auto ref = rope_reference(in, B, T, NH, NKV, hd, theta);
  for (size_t i = 0; i < out.size(); ++i) CHECK(out[i] == doctest::Approx(ref[i]).epsilon(1e-14));
  // In place, as the model calls it, gives the same; v columns are copied bit for bit.
  std::vector<double> x = in;
  be().rope(view(x, {B, T, W}), view(x, {B, T, W}), NH, NKV, theta);
  CHECK(x == out);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t j = (NH + NKV) * hd; j < W; ++j) CHECK(out[r * W + j] == in[r * W + j]);
  // n_kv_head = 0 means n_head.
  std::vector<double> mha = rng.vec(T * 3 * NH * hd), y0(mha.size()), y1(mha.size());
  be().rope(view(y0, {1, T, 3 * NH * hd}), view(mha, {1, T, 3 * NH * hd}), NH, 0, theta);
  be().rope(view(y1, {1, T, 3 * NH * hd}), view(mha, {1, T, 3 * NH * hd}), NH, NH, theta);
  CHECK(y0 == y1);
  // The backward overwriting (old contents never read) and in place, as the model calls it, give
  // what accumulating onto zeros gives, bit for bit.
  auto d = rng.vec(in.size());
  std::vector<double> acc(in.size(), 0.0), over(in.size(), NAN), inplace = d;
  be().rope_backward(view(acc, {B, T, W}), view(d, {B, T, W}), NH, NKV, theta);
  be().rope_backward(view(over, {B, T, W}), view(d, {B, T, W}), NH, NKV, theta, {},
                     GradWrite::overwrite);
  be().rope_backward(view(inplace, {B, T, W}), view(inplace, {B, T, W}), NH, NKV, theta, {},
                     GradWrite::overwrite);
  CHECK(over == acc);
  CHECK(inplace == acc);
}

TEST_CASE("swiglu: out = silu(gate) * up; gradcheck; no NaN for large |gate|") {
  Rng rng;
  const int64_t N = 4, H = 7;
  auto in = rng.vec(N * 2 * H, -4, 4);
  std::vector<double> out(N * H), din(in.size());
  GradCase c;
  c.inputs = {&in};
  c.grads = {&din};
  c.out = &out;
  c.forward = [&] { be().swiglu(view(out, {N, H}), view(in, {N, 2 * H})); };
  c.backward = [&](std::vector<double>& d) {
    be().swiglu_backward(view(din, {N, 2 * H}), view(d, {N, H}), view(in, {N, 2 * H}));
  };
  check_gradients(c, rng);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < H; ++i) {
      const double g = in[n * 2 * H + i], u = in[n * 2 * H + H + i];
      CHECK(out[n * H + i] == doctest::Approx(g / (1 + std::exp(-g)) * u).epsilon(1e-14));
    }

  std::vector<float> big = {-1000.0f, 1000.0f, 2.0f, 3.0f}, o(2), d = {1.0f, 1.0f}, g(4, 0.0f);
  be().swiglu(view(o, {1, 2}), view(big, {1, 4}));
  be().swiglu_backward(view(g, {1, 4}), view(d, {1, 2}), view(big, {1, 4}));
  CHECK(o[0] == 0.0f);
  CHECK(o[1] == doctest::Approx(3000.0f));
  for (float v : g) CHECK(std::isfinite(v));
  CHECK(g[0] == 0.0f);
  CHECK(g[1] == doctest::Approx(3.0f));
}

namespace {

// qkv [B,T,(NH+2*NKV)*hd] -> [B,T,3*NH*hd] with kv head g repeated for its NH/NKV q heads.
std::vector<double> repeat_kv(const std::vector<double>& qkv, int64_t BT, int NH, int NKV,
                              int64_t hd) {
  const int64_t W = (NH + 2 * NKV) * hd, C = NH * hd, group = NH / NKV;
  std::vector<double> e(BT * 3 * C);
  for (int64_t r = 0; r < BT; ++r)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < hd; ++i) {
        const int64_t g = h / group;
        e[r * 3 * C + h * hd + i] = qkv[r * W + h * hd + i];
        e[r * 3 * C + C + h * hd + i] = qkv[r * W + C + g * hd + i];
        e[r * 3 * C + 2 * C + h * hd + i] = qkv[r * W + C + NKV * hd + g * hd + i];
      }
  return e;
}

void gqa_case(int64_t B, int64_t T, int NH, int NKV, int64_t hd) {
  Rng rng;
  const int64_t W = (NH + 2 * NKV) * hd, C = NH * hd, group = NH / NKV;
  auto qkv = rng.vec(B * T * W, -1.5, 1.5);
  std::vector<double> out(B * T * C), lse(B * NH * T), dqkv(qkv.size());
  GradCase c;
  c.inputs = {&qkv};
  c.grads = {&dqkv};
  c.out = &out;
  c.forward = [&] {
    be().attention(view(out, {B, T, C}), view(lse, {B, NH, T}), view(qkv, {B, T, W}), NH, NKV);
  };
  c.backward = [&](std::vector<double>& d) {
    be().attention_backward(view(dqkv, {B, T, W}), view(d, {B, T, C}), view(qkv, {B, T, W}),
                            view(out, {B, T, C}), view(lse, {B, NH, T}), NH, NKV);
  };
  check_gradients(c, rng);

  // Ordinary multi-head attention on the repeated kv heads computes the same out and lse; its
  // k/v gradients, summed over each group, are the shared heads' gradients.
  auto e = repeat_kv(qkv, B * T, NH, NKV, hd);
  std::vector<double> rep_out(out.size()), rep_lse(lse.size()), rep_dqkv(e.size(), 0.0);
  be().attention(view(rep_out, {B, T, C}), view(rep_lse, {B, NH, T}), view(e, {B, T, 3 * C}), NH);
  for (size_t i = 0; i < out.size(); ++i)
    CHECK(out[i] == doctest::Approx(rep_out[i]).epsilon(1e-13));
  for (size_t i = 0; i < lse.size(); ++i)
    CHECK(lse[i] == doctest::Approx(rep_lse[i]).epsilon(1e-13));
  auto dout = rng.vec(out.size());
  std::vector<double> g(qkv.size(), 0.0);
  be().attention_backward(view(g, {B, T, W}), view(dout, {B, T, C}), view(qkv, {B, T, W}),
                          view(out, {B, T, C}), view(lse, {B, NH, T}), NH, NKV);
  be().attention_backward(view(rep_dqkv, {B, T, 3 * C}), view(dout, {B, T, C}),
                          view(e, {B, T, 3 * C}), view(rep_out, {B, T, C}),
                          view(rep_lse, {B, NH, T}), NH);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t i = 0; i < hd; ++i) {
      for (int64_t h = 0; h < NH; ++h)
        CHECK(g[r * W + h * hd + i] ==
              doctest::Approx(rep_dqkv[r * 3 * C + h * hd + i]).epsilon(1e-12));
      for (int64_t kv = 0; kv < NKV; ++kv)
        for (int part = 1; part <= 2; ++part) {
          double sum = 0;
          for (int64_t h = kv * group; h < (kv + 1) * group; ++h)
            sum += rep_dqkv[r * 3 * C + part * C + h * hd + i];
          CHECK(g[r * W + C + (part - 1) * NKV * hd + kv * hd + i] ==
                doctest::Approx(sum).epsilon(1e-12));
        }
    }
}

}  // namespace

TEST_CASE("grouped-query attention equals attention on repeated kv heads; gradcheck") {
  SUBCASE("NH=4 NKV=2") {
    gqa_case(2, 6, 4, 2, 4);
  }
  SUBCASE("multi-query: NKV=1") {
    gqa_case(1, 7, 3, 1, 5);
  }
  SUBCASE("NKV = NH is ordinary attention") {
    gqa_case(1, 5, 2, 2, 3);
  }
}

TEST_CASE("llama ops: f32 agrees with f64") {
  Rng rng;
  const int64_t B = 2, T = 9, hd = 8;
  const int NH = 4, NKV = 2;
  const int64_t W = (NH + 2 * NKV) * hd, C = NH * hd;
  auto x = rng.vec(B * T * W, -2, 2), w = rng.vec(W, 0.5, 1.5), d = rng.vec(B * T * W);
  auto x32 = cast<float>(x), w32 = cast<float>(w), d32 = cast<float>(d);
  auto close = [](const std::vector<float>& a, const std::vector<double>& b) {
    for (size_t i = 0; i < b.size(); ++i)
      CHECK(std::abs(a[i] - b[i]) <= 2e-5 * std::max(1.0, std::abs(b[i])));
  };
  const int64_t rows = B * T;
  {  // rmsnorm and its backward
    std::vector<double> o(x.size()), r(rows), dx(x.size(), 0.0), dw(W, 0.0);
    std::vector<float> o32(x.size()), r32(rows), dx32(x.size(), 0.0f), dw32(W, 0.0f);
    be().rmsnorm(view(o, {rows, W}), view(r, {rows}), view(x, {rows, W}), view(w, {W}));
    be().rmsnorm(view(o32, {rows, W}), view(r32, {rows}), view(x32, {rows, W}), view(w32, {W}));
    be().rmsnorm_backward(view(dx, {rows, W}), view(dw, {W}), view(d, {rows, W}),
                          view(x, {rows, W}), view(w, {W}), view(r, {rows}));
    be().rmsnorm_backward(view(dx32, {rows, W}), view(dw32, {W}), view(d32, {rows, W}),
                          view(x32, {rows, W}), view(w32, {W}), view(r32, {rows}));
    close(o32, o);
    close(r32, r);
    close(dx32, dx);
    close(dw32, dw);
  }
  {  // rope at a large theta and position (angles up to T rad) and its backward
    std::vector<double> o(x.size()), dx(x.size(), 0.0);
    std::vector<float> o32(x.size()), dx32(x.size(), 0.0f);
    be().rope(view(o, {B, T, W}), view(x, {B, T, W}), NH, NKV, 500000.0f);
    be().rope(view(o32, {B, T, W}), view(x32, {B, T, W}), NH, NKV, 500000.0f);
    be().rope_backward(view(dx, {B, T, W}), view(d, {B, T, W}), NH, NKV, 500000.0f);
    be().rope_backward(view(dx32, {B, T, W}), view(d32, {B, T, W}), NH, NKV, 500000.0f);
    close(o32, o);
    close(dx32, dx);
  }
  {  // swiglu over the same buffer as [rows, W] = (gate | up)
    std::vector<double> o(x.size() / 2), dx(x.size(), 0.0);
    std::vector<float> o32(x.size() / 2), dx32(x.size(), 0.0f);
    be().swiglu(view(o, {rows, W / 2}), view(x, {rows, W}));
    be().swiglu(view(o32, {rows, W / 2}), view(x32, {rows, W}));
    be().swiglu_backward(view(dx, {rows, W}), view(d, {rows, W / 2}), view(x, {rows, W}));
    be().swiglu_backward(view(dx32, {rows, W}), view(d32, {rows, W / 2}), view(x32, {rows, W}));
    close(o32, o);
    close(dx32, dx);
  }
  {  // GQA attention
    std::vector<double> o(rows * C), l(B * NH * T);
    std::vector<float> o32(rows * C), l32(B * NH * T);
    be().attention(view(o, {B, T, C}), view(l, {B, NH, T}), view(x, {B, T, W}), NH, NKV);
    be().attention(view(o32, {B, T, C}), view(l32, {B, NH, T}), view(x32, {B, T, W}), NH, NKV);
    close(o32, o);
    close(l32, l);
  }
}

TEST_CASE("llama ops refuse bad shapes and arguments, naming the op") {
  std::vector<float> a(96), b(96), c(96), r(8);
  auto& B = be();
  auto refuses = [](const std::function<void()>& call, const char* what) {
    CHECK_THROWS_WITH_AS(call(), doctest::Contains(what), std::invalid_argument);
  };
  // rmsnorm: w must be [C], rstd [rows]
  refuses(
      [&] {
        B.rmsnorm(view(c, {4, 6}), view(r, {4}), view(a, {4, 6}), view(b, {5}));
      },
      "rmsnorm: ");
  refuses(
      [&] {
        B.rmsnorm(view(c, {4, 6}), view(r, {3}), view(a, {4, 6}), view(b, {6}));
      },
      "rstd [3]");
  refuses(
      [&] {
        B.rmsnorm_backward(view(c, {4, 6}), view(b, {6}), view(a, {4, 5}), view(a, {4, 6}),
                           view(b, {6}), view(r, {4}));
      },
      "rmsnorm_backward: ");
  // rope: hd must be even, n_kv_head must divide n_head, theta > 0, tensors [B,T,W]
  refuses([&] { B.rope(view(c, {1, 2, 9}), view(a, {1, 2, 9}), 1, 1, 1e4f); }, "hd even");
  refuses(
      [&] {
        B.rope(view(c, {1, 2, 40}), view(a, {1, 2, 40}), 3, 2, 1e4f);
      },
      "n_kv_head = 2 does not divide n_head = 3");
  refuses([&] { B.rope(view(c, {1, 2, 12}), view(a, {1, 2, 12}), 1, 1, 0.0f); }, "theta");
  refuses([&] { B.rope(view(c, {1, 2, 12}), view(a, {1, 2, 12}), 1, 1, NAN); }, "theta");
  refuses([&] { B.rope(view(c, {2, 12}), view(a, {2, 12}), 1, 1, 1e4f); }, "rope: ");
  refuses([&] { B.rope(view(c, {1, 3, 12}), view(a, {1, 2, 12}), 1, 1, 1e4f); }, "rope: ");
  refuses(
      [&] {
        B.rope_backward(view(c, {1, 2, 12}), view(a, {1, 2, 12}), 2, -1, 1e4f);
      },
      "rope_backward: n_kv_head = -1");
  refuses(
      [&] {
        B.rope_backward(view(c, {1, 2, 12}), view(c, {1, 2, 12}), 1, 1, 1e4f);
      },
      "rope_backward: din is dout: in place needs GradWrite::overwrite");
  // swiglu: in [N,2H], out [N,H]
  refuses([&] { B.swiglu(view(c, {4, 3}), view(a, {4, 7})); }, "swiglu: ");
  refuses([&] { B.swiglu(view(c, {4, 4}), view(a, {4, 6})); }, "(gate | up)");
  refuses(
      [&] {
        B.swiglu_backward(view(c, {4, 5}), view(b, {4, 3}), view(a, {4, 6}));
      },
      "swiglu_backward: ");
  // attention: n_kv_head must divide n_head; qkv width must be (n_head + 2 n_kv_head) * hd
  std::vector<float> lse(16);
  refuses(
      [&] {
        B.attention(view(c, {1, 2, 12}), view(lse, {1, 3, 2}), view(a, {1, 2, 28}), 3, 2);
      },
      "n_kv_head = 2 does not divide n_head = 3");
  refuses(
      [&] {
        B.attention(view(c, {1, 2, 16}), view(lse, {1, 4, 2}), view(a, {1, 2, 23}), 4, 2);
      },
      "(n_head+2*n_kv_head)*hd");
  refuses(
      [&] {
        B.attention(view(c, {1, 2, 10}), view(lse, {1, 4, 2}), view(a, {1, 2, 24}), 4, 2);
      },
      "attention: out [1,2,10]");
  refuses(
      [&] {
        B.attention_backward(view(c, {1, 2, 24}), view(b, {1, 2, 16}), view(a, {1, 2, 24}),
                             view(b, {1, 2, 16}), view(lse, {1, 4, 2}), 4, -2);
      },
      "attention_backward: n_kv_head = -2");
  // f64 with f32 is refused as for every op
  std::vector<double> d(96);
  CHECK_THROWS_WITH_AS(B.swiglu(view(d, {4, 3}), view(a, {4, 6})),
                       doctest::Contains("mixed dtypes"), std::invalid_argument);
}

TEST_CASE("op_name names the llama ops") {
  CHECK(std::string(op_name(Op::rmsnorm)) == "rmsnorm");
  CHECK(std::string(op_name(Op::rope_backward)) == "rope_backward");
  CHECK(std::string(op_name(Op::swiglu_backward)) == "swiglu_backward");
  CHECK(std::string(op_name(Op::sum)) == "sum");
}
