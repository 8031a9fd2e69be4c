// The CPU bf16 reference (mixed precision, docs/cuda.md): every op on bf16 storage equals the f32
// op on the same bf16-rounded inputs with each written tensor rounded once, nearest even; f32
// parameter gradients and saved statistics beside bf16 activations equal the f32 run's exactly.
// Accumulating outputs start non-zero so the "load, add in f32, round once" rule is checked.
// Independently of the staging: a bf16 matmul against a double reference, the cast's rounding
// (ties to even, round trips), and the contract's refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cpu_gradcheck.h"
#include "trainrun/backend/backend.h"
#include "trainrun/core/bf16.h"

using namespace trainrun;
using namespace trainrun::testing;

namespace {

// act: the activation dtype of the run (bf16 or f32); f32: always f32 (parameter gradients,
// saved statistics); ids: i32 token ids.
enum class Kind { act, f32, ids };

struct Buf {
  Kind kind;
  std::vector<int64_t> shape;
  std::vector<float> f;     // the f32 run's buffer (bf16-representable values to start)
  std::vector<uint16_t> h;  // the bf16 run's act buffer
  std::vector<float> fb;    // the bf16 run's f32 buffer
  std::vector<int32_t> i;
  int64_t numel() const { return static_cast<int64_t>(kind == Kind::ids ? i.size() : f.size()); }
};

class Bf16Case {
 public:
  explicit Bf16Case(uint64_t seed) { rng_.g.seed(seed); }
  // A buffer of random bf16-representable values in [lo, hi); returns its index.
  int add(Kind k, std::vector<int64_t> shape, double lo = -1, double hi = 1) {
    Buf b{k, std::move(shape), {}, {}, {}, {}};
    int64_t n = 1;
    for (int64_t d : b.shape) n *= d;
    for (double v : rng_.vec(static_cast<size_t>(n), lo, hi)) {
      b.f.push_back(round_to_bf16(static_cast<float>(v)));
      b.h.push_back(bf16_from_f32(b.f.back()));
    }
    b.fb = b.f;
    bufs_.push_back(std::move(b));
    return static_cast<int>(bufs_.size()) - 1;
  }
  int add_ids(int64_t n, int32_t limit) {
    bufs_.push_back(Buf{Kind::ids, {n}, {}, {}, {}, rng_.ids(static_cast<size_t>(n), limit)});
    return static_cast<int>(bufs_.size()) - 1;
  }
  // Runs `op` in f32 and in bf16 and compares every buffer, then gives the f32 run the bf16 run's
  // values, so that a following check() starts both runs from the same inputs; max_ulps for act
  // buffers whose sum order may differ between the runs (a GEMM's blocking), 0 elsewhere.
  void check(const std::function<void(const std::function<Tensor(int)>&)>& op, int max_ulps = 0) {
    op([&](int i) { return tensor(i, false); });
    op([&](int i) { return tensor(i, true); });
    for (size_t b = 0; b < bufs_.size(); ++b) {
      const Buf& x = bufs_[b];
      int bad = 0;
      for (size_t j = 0; j < x.f.size(); ++j) {
        if (x.kind == Kind::act) {
          const int ulps = std::abs(int(bf16_from_f32(x.f[j])) - int(x.h[j]));
          bad += ulps > max_ulps;
        } else if (x.kind == Kind::f32) {
          bad += x.f[j] != x.fb[j];
        }
      }
      CAPTURE(b);
      CHECK(bad == 0);
    }
    // The next op of the case reads what this one stored in bf16, in both runs.
    for (Buf& x : bufs_)
      if (x.kind == Kind::act)
        for (size_t j = 0; j < x.h.size(); ++j) x.f[j] = bf16_to_f32(x.h[j]);
  }

 private:
  Tensor tensor(int i, bool bf16) {
    Buf& b = bufs_.at(static_cast<size_t>(i));
    Tensor t;
    if (b.kind == Kind::ids)
      t = Tensor(b.i.data(), DType::i32, Device::cpu, {b.numel()});
    else if (b.kind == Kind::act && bf16)
      t = Tensor(b.h.data(), DType::bf16, Device::cpu, {b.numel()});
    else if (b.kind == Kind::f32 && bf16)
      t = Tensor(b.fb.data(), DType::f32, Device::cpu, {b.numel()});
    else
      t = Tensor(b.f.data(), DType::f32, Device::cpu, {b.numel()});
    t.ndim = static_cast<int>(b.shape.size());
    for (int d = 0; d < t.ndim; ++d) t.dims[d] = b.shape[d];
    return t;
  }

  Rng rng_;
  std::vector<Buf> bufs_;
};

}  // namespace

using T = std::function<Tensor(int)>;
constexpr Kind A = Kind::act, F = Kind::f32;

TEST_CASE("bf16 dense and normalisation ops equal f32 on rounded inputs, rounded once") {
  const int64_t N = 37, C = 70, OC = 45;
  SUBCASE("matmul, bias and none") {
    Bf16Case c(1);
    const int out = c.add(A, {N, OC}), in = c.add(A, {N, C}), w = c.add(A, {OC, C}),
              b = c.add(A, {OC}), out2 = c.add(A, {N, OC});
    c.check(
        [&](const T& t) {
          be().matmul(t(out), t(in), t(w), t(b));
          be().matmul(t(out2), t(in), t(w), Tensor());
        },
        1);
  }
  SUBCASE("matmul_backward: din bf16 +=, dw and dbias f32 +=") {
    Bf16Case c(2);
    const int din = c.add(A, {N, C}), dw = c.add(F, {OC, C}), db = c.add(F, {OC}),
              dout = c.add(A, {N, OC}), in = c.add(A, {N, C}), w = c.add(A, {OC, C});
    c.check([&](const T& t) { be().matmul_backward(t(din), t(dw), t(db), t(dout), t(in), t(w)); },
            1);
  }
  SUBCASE("layernorm forward (f32 statistics) and backward") {
    Bf16Case c(3);
    const int out = c.add(A, {N, C}), mean = c.add(F, {N}), rstd = c.add(F, {N}),
              in = c.add(A, {N, C}, -2, 3), w = c.add(A, {C}), b = c.add(A, {C}),
              din = c.add(A, {N, C}), dw = c.add(F, {C}), db = c.add(F, {C}),
              dout = c.add(A, {N, C});
    c.check([&](const T& t) { be().layernorm(t(out), t(mean), t(rstd), t(in), t(w), t(b)); });
    c.check([&](const T& t) {
      be().layernorm_backward(t(din), t(dw), t(db), t(dout), t(in), t(w), t(mean), t(rstd));
    });
  }
  SUBCASE("rmsnorm forward and backward, bf16 statistics") {
    Bf16Case c(4);
    const int out = c.add(A, {N, C}), rstd = c.add(A, {N}), in = c.add(A, {N, C}, -2, 3),
              w = c.add(A, {C}), din = c.add(A, {N, C}), dw = c.add(F, {C}),
              dout = c.add(A, {N, C});
    c.check([&](const T& t) { be().rmsnorm(t(out), t(rstd), t(in), t(w)); });
    c.check(
        [&](const T& t) { be().rmsnorm_backward(t(din), t(dw), t(dout), t(in), t(w), t(rstd)); });
  }
}

TEST_CASE("bf16 pointwise and elementwise ops equal f32 on rounded inputs, rounded once") {
  const int64_t n = 1001;
  Bf16Case c(5);
  const int out = c.add(A, {n}), in = c.add(A, {n}, -4, 4), din = c.add(A, {n}),
            dout = c.add(A, {n}), a = c.add(A, {n}), b = c.add(A, {n}), gate = c.add(A, {7, 2 * n}),
            sw = c.add(A, {7, n}), dsw = c.add(A, {7, 2 * n});
  SUBCASE("gelu, relu") {
    c.check([&](const T& t) { be().gelu(t(out), t(in)); });
    c.check([&](const T& t) { be().gelu_backward(t(din), t(dout), t(in)); });
    c.check([&](const T& t) { be().relu(t(a), t(in)); });
    c.check([&](const T& t) { be().relu_backward(t(b), t(dout), t(in)); });
  }
  SUBCASE("dropout") {
    c.check([&](const T& t) { be().dropout(t(out), t(in), 0.3f, 99); });
    c.check([&](const T& t) { be().dropout_backward(t(din), t(dout), 0.3f, 99); });
  }
  SUBCASE("add aliasing its input, accumulate, scale") {
    c.check([&](const T& t) { be().add(t(a), t(a), t(b)); });
    c.check([&](const T& t) { be().accumulate(t(out), t(in)); });
    c.check([&](const T& t) { be().scale(t(din), 0.3); });
  }
  SUBCASE("swiglu") {
    c.check([&](const T& t) { be().swiglu(t(sw), t(gate)); });
    c.check([&](const T& t) { be().swiglu_backward(t(dsw), t(sw), t(gate)); });
  }
}

TEST_CASE("bf16 attention, rope, embedding and loss equal f32 on rounded inputs") {
  const int64_t B = 2, Tn = 9, hd = 8;
  const int NH = 4, NKV = 2;
  const int64_t W = (NH + 2 * NKV) * hd, C = NH * hd;
  SUBCASE("grouped-query attention forward and backward, f32 lse") {
    Bf16Case c(6);
    const int out = c.add(A, {B, Tn, C}), lse = c.add(F, {B, NH, Tn}), qkv = c.add(A, {B, Tn, W}),
              dqkv = c.add(A, {B, Tn, W}), dout = c.add(A, {B, Tn, C});
    c.check([&](const T& t) { be().attention(t(out), t(lse), t(qkv), NH, NKV); });
    c.check([&](const T& t) {
      be().attention_backward(t(dqkv), t(dout), t(qkv), t(out), t(lse), NH, NKV);
    });
  }
  SUBCASE("rope in place, and its backward") {
    Bf16Case c(7);
    const int x = c.add(A, {B, Tn, W}), din = c.add(A, {B, Tn, W}), dout = c.add(A, {B, Tn, W});
    c.check([&](const T& t) { be().rope(t(x), t(x), NH, NKV, 10000.0f); });
    c.check([&](const T& t) { be().rope_backward(t(din), t(dout), NH, NKV, 10000.0f); });
  }
  SUBCASE("embedding (table bf16, dtable f32)") {
    Bf16Case c(8);
    const int64_t V = 11, Nn = 23, Cc = 13;
    const int out = c.add(A, {Nn, Cc}), ids = c.add_ids(Nn, V), table = c.add(A, {V, Cc}),
              dtable = c.add(F, {V, Cc}), dout = c.add(A, {Nn, Cc});
    c.check([&](const T& t) { be().embedding(t(out), t(ids), t(table)); });
    c.check([&](const T& t) { be().embedding_backward(t(dtable), t(dout), t(ids)); });
  }
  SUBCASE("cross-entropy, f32 losses and lse; the backward overwrites the logits in place") {
    Bf16Case c(9);
    const int64_t Nn = 17, V = 67;
    const int losses = c.add(F, {Nn}), lse = c.add(F, {Nn}), logits = c.add(A, {Nn, V}, -5, 5),
              targets = c.add_ids(Nn, V);
    c.check([&](const T& t) { be().cross_entropy(t(losses), t(lse), t(logits), t(targets)); });
    c.check([&](const T& t) {
      be().cross_entropy_backward(t(logits), t(logits), t(lse), t(targets), 1.0f / Nn);
    });
  }
}

TEST_CASE("bf16 matmul is within one bf16 ulp of the exact product of its rounded inputs") {
  const int64_t N = 5, C = 300, OC = 7;
  Rng rng;
  std::vector<uint16_t> in(N * C), w(OC * C), out(N * OC);
  const auto xi = rng.vec(in.size()), xw = rng.vec(w.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = bf16_from_f32(static_cast<float>(xi[i]));
  for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_from_f32(static_cast<float>(xw[i]));
  be().matmul(Tensor(out.data(), DType::bf16, Device::cpu, {N, OC}),
              Tensor(in.data(), DType::bf16, Device::cpu, {N, C}),
              Tensor(w.data(), DType::bf16, Device::cpu, {OC, C}), Tensor());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double ref = 0;
      for (int64_t k = 0; k < C; ++k)
        ref += double(bf16_to_f32(in[n * C + k])) * double(bf16_to_f32(w[o * C + k]));
      const float got = bf16_to_f32(out[n * OC + o]);
      const double ulp = std::ldexp(1.0, std::ilogb(ref) - 7);  // bf16 keeps 8 bits
      CHECK(std::abs(got - ref) <= ulp);
    }
}

TEST_CASE("cast rounds f32 to bf16 nearest even and widens exactly") {
  auto cpu = make_cpu_backend();
  CHECK(cpu->supports(Op::cast, DType::bf16));
  CHECK(cpu->supports(Op::matmul, DType::bf16));
  CHECK_FALSE(cpu->supports(Op::adamw, DType::bf16));  // master weights and moments stay f32
  CHECK(cpu->f32_param_grads_with_bf16());
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even 1; 1 + 3*2^-8 goes up to
  // 1 + 2^-6; just above a tie rounds up; -0, inf and NaN survive.
  std::vector<float> src = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f,
                            -0.0f,          INFINITY,           NAN,
                            3.14159265f};
  const int64_t n = static_cast<int64_t>(src.size());
  std::vector<uint16_t> h(src.size());
  std::vector<float> back(src.size());
  cpu->copy(Tensor(h.data(), DType::bf16, Device::cpu, {n}),
            Tensor(src.data(), DType::f32, Device::cpu, {n}));
  cpu->copy(Tensor(back.data(), DType::f32, Device::cpu, {n}),
            Tensor(h.data(), DType::bf16, Device::cpu, {n}));
  CHECK(back[0] == 1.0f);
  CHECK(back[1] == 1.0f + 0x1p-6f);
  CHECK(back[2] == 1.0f + 0x1p-7f);
  CHECK(std::signbit(back[3]));
  CHECK(back[3] == 0.0f);
  CHECK(back[4] == INFINITY);
  CHECK(std::isnan(back[5]));
  CHECK(back[6] == 3.140625f);
  // bf16 -> f32 -> bf16 is the identity on every finite bf16.
  std::vector<uint16_t> all, again(65536);
  for (uint32_t b = 0; b < 65536; ++b)
    if ((b & 0x7f80u) != 0x7f80u) all.push_back(static_cast<uint16_t>(b));
  const int64_t m = static_cast<int64_t>(all.size());
  std::vector<float> wide(all.size());
  cpu->copy(Tensor(wide.data(), DType::f32, Device::cpu, {m}),
            Tensor(all.data(), DType::bf16, Device::cpu, {m}));
  cpu->copy(Tensor(again.data(), DType::bf16, Device::cpu, {m}),
            Tensor(wide.data(), DType::f32, Device::cpu, {m}));
  again.resize(all.size());
  CHECK(again == all);
}

TEST_CASE("bf16 sum reduces the stored values in double") {
  std::vector<uint16_t> h = {bf16_from_f32(1.5f), bf16_from_f32(-0.25f), bf16_from_f32(1e3f)};
  CHECK(be().sum(Tensor(h.data(), DType::bf16, Device::cpu, {3})) == 1.5 - 0.25 + 1000.0);
}
