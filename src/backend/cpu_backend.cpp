// CpuBackend: the reference implementation of the op set. This file only validates (dtype,
// device, shapes: std::invalid_argument naming the op and the shapes; out-of-range token ids:
// DataError) and dispatches to the f32/f64 template kernels in cpu/, one file per op family.
#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <stdexcept>

#include "cpu/kernels.h"
#include "trainrun/backend.h"
#include "trainrun/errors.h"

namespace trainrun {
namespace {

void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(fmt::format("{}: {}", op, what));
}

// All non-empty tensors live on the host and share one float dtype (f32 or f64); returns it.
DType float_dtype(const char* op, std::initializer_list<const Tensor*> ts) {
  DType dt = DType::f32;
  bool seen = false;
  for (const Tensor* t : ts) {
    if (t->empty()) continue;
    require(
        t->device == Device::cpu, op,
        fmt::format("tensor {} lives on {}, not the cpu", t->shape_str(), device_name(t->device)));
    require(t->dtype == DType::f32 || t->dtype == DType::f64, op,
            fmt::format("tensor {} has dtype {}; the cpu backend computes in f32 or f64",
                        t->shape_str(), dtype_name(t->dtype)));
    if (seen)
      require(t->dtype == dt, op,
              fmt::format("mixed dtypes {} and {}", dtype_name(dt), dtype_name(t->dtype)));
    dt = t->dtype;
    seen = true;
  }
  require(seen, op, "no tensors given");
  return dt;
}

void require_present(const char* op, const char* name, const Tensor& t) {
  require(!t.empty(), op, fmt::format("{} is empty (null data)", name));
}

void require_ids(const char* op, const char* name, const Tensor& ids, int64_t n, int64_t limit) {
  require_present(op, name, ids);
  require(ids.device == Device::cpu && ids.dtype == DType::i32, op,
          fmt::format("{} must be an i32 cpu tensor, got {} on {}", name, dtype_name(ids.dtype),
                      device_name(ids.device)));
  require(ids.numel() == n, op,
          fmt::format("{} {} has {} elements, expected {}", name, ids.shape_str(), ids.numel(), n));
  const int32_t* p = ids.as<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    if (p[i] < 0 || p[i] >= limit)
      throw DataError(
          fmt::format("{}: {}[{}] = {} is outside [0, {}): the data holds a token "
                      "the model's vocabulary does not (check vocab_size)",
                      op, name, i, p[i], limit));
}

// Calls f with a null pointer of the element type so the lambda can name T = decltype(*p).
template <class F>
void dispatch(DType dt, F&& f) {
  if (dt == DType::f32)
    f(static_cast<float*>(nullptr));
  else
    f(static_cast<double*>(nullptr));
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data);
}

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu; }
  std::string describe() const override {
    return fmt::format("cpu (oneDNN sgemm, {} OpenMP threads)", omp_get_max_threads());
  }

  void* alloc(size_t bytes) override {
    // 64-byte alignment for AVX-512 loads; aligned_alloc wants a multiple of the alignment.
    const size_t rounded = ((bytes == 0 ? 1 : bytes) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void release(void* p) override { std::free(p); }

  void copy(Tensor dst, Tensor src) override {
    require(dst.device == Device::cpu && src.device == Device::cpu, "copy",
            fmt::format("cpu backend cannot copy {} -> {}", device_name(src.device),
                        device_name(dst.device)));
    require(dst.bytes() == src.bytes(), "copy",
            fmt::format("dst {} {} ({} bytes) and src {} {} ({} bytes) differ in size",
                        dtype_name(dst.dtype), dst.shape_str(), dst.bytes(), dtype_name(src.dtype),
                        src.shape_str(), src.bytes()));
    if (dst.bytes() > 0 && dst.data != src.data) std::memmove(dst.data, src.data, dst.bytes());
  }

  void fill(Tensor x, double value) override {
    require(x.device == Device::cpu, "fill", "tensor is not on the cpu");
    const int64_t n = x.numel();
    switch (x.dtype) {
      case DType::f32:
        cpu::fill(x.as<float>(), static_cast<float>(value), n);
        break;
      case DType::f64:
        cpu::fill(x.as<double>(), value, n);
        break;
      case DType::i32:
        cpu::fill(x.as<int32_t>(), static_cast<int32_t>(value), n);
        break;
      case DType::bf16: {
        // Round to nearest even on the upper 16 bits of the f32 pattern.
        const float f = static_cast<float>(value);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        u += 0x7FFFu + ((u >> 16) & 1u);
        cpu::fill(x.as<uint16_t>(), static_cast<uint16_t>(u >> 16), n);
        break;
      }
    }
  }

  void matmul(Tensor out, Tensor in, Tensor w, Tensor bias) override {
    const char* op = "matmul";
    const DType dt = float_dtype(op, {&out, &in, &w, &bias});
    require_present(op, "out", out);
    require_present(op, "in", in);
    require_present(op, "w", w);
    const int64_t N = in.rows(), C = in.cols(), OC = w.rows();
    require(w.cols() == C && out.rows() == N && out.cols() == OC &&
                (bias.empty() || bias.numel() == OC),
            op,
            fmt::format("out {} = in {} . w {}^T + bias {}: expected in [N,C], w [OC,C], "
                        "out [N,OC], bias [OC]",
                        out.shape_str(), in.shape_str(), w.shape_str(), bias.shape_str()));
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::matmul_forward<T>(ptr<T>(out), ptr<T>(in), ptr<T>(w), ptr<T>(bias), N, C, OC);
    });
  }

  void matmul_backward(Tensor din, Tensor dw, Tensor dbias, Tensor dout, Tensor in,
                       Tensor w) override {
    const char* op = "matmul_backward";
    const DType dt = float_dtype(op, {&din, &dw, &dbias, &dout, &in, &w});
    require_present(op, "dw", dw);
    require_present(op, "dout", dout);
    require_present(op, "in", in);
    require_present(op, "w", w);
    const int64_t N = in.rows(), C = in.cols(), OC = w.rows();
    require(w.cols() == C && dw.rows() == OC && dw.cols() == C && dout.rows() == N &&
                dout.cols() == OC && (din.empty() || (din.rows() == N && din.cols() == C)) &&
                (dbias.empty() || dbias.numel() == OC),
            op,
            fmt::format("din {} dw {} dbias {} dout {} in {} w {}: expected in/din [N,C], "
                        "w/dw [OC,C], dout [N,OC], dbias [OC]",
                        din.shape_str(), dw.shape_str(), dbias.shape_str(), dout.shape_str(),
                        in.shape_str(), w.shape_str()));
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::matmul_backward<T>(ptr<T>(din), ptr<T>(dw), ptr<T>(dbias), ptr<T>(dout), ptr<T>(in),
                              ptr<T>(w), N, C, OC);
    });
  }

  void layernorm(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor w, Tensor b) override {
    const char* op = "layernorm";
    const DType dt = float_dtype(op, {&out, &mean, &rstd, &in, &w, &b});
    for (auto [name, t] : {std::pair{"out", &out},
                           {"mean", &mean},
                           {"rstd", &rstd},
                           {"in", &in},
                           {"w", &w},
                           {"b", &b}})
      require_present(op, name, *t);
    const int64_t rows = in.rows(), C = in.cols();
    require(out.numel() == in.numel() && out.cols() == C && mean.numel() == rows &&
                rstd.numel() == rows && w.numel() == C && b.numel() == C,
            op,
            fmt::format("out {} mean {} rstd {} in {} w {} b {}: expected out like in [rows,C], "
                        "mean/rstd [rows], w/b [C]",
                        out.shape_str(), mean.shape_str(), rstd.shape_str(), in.shape_str(),
                        w.shape_str(), b.shape_str()));
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::layernorm_forward<T>(ptr<T>(out), ptr<T>(mean), ptr<T>(rstd), ptr<T>(in), ptr<T>(w),
                                ptr<T>(b), rows, C);
    });
  }

  void layernorm_backward(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in, Tensor w,
                          Tensor mean, Tensor rstd) override {
    const char* op = "layernorm_backward";
    const DType dt = float_dtype(op, {&din, &dw, &db, &dout, &in, &w, &mean, &rstd});
    for (auto [name, t] : {std::pair{"din", &din},
                           {"dw", &dw},
                           {"db", &db},
                           {"dout", &dout},
                           {"in", &in},
                           {"w", &w},
                           {"mean", &mean},
                           {"rstd", &rstd}})
      require_present(op, name, *t);
    const int64_t rows = in.rows(), C = in.cols();
    require(din.numel() == in.numel() && dout.numel() == in.numel() && mean.numel() == rows &&
                rstd.numel() == rows && w.numel() == C && dw.numel() == C && db.numel() == C,
            op,
            fmt::format("din {} dw {} db {} dout {} in {} w {} mean {} rstd {}: expected "
                        "din/dout like in [rows,C], w/dw/db [C], mean/rstd [rows]",
                        din.shape_str(), dw.shape_str(), db.shape_str(), dout.shape_str(),
                        in.shape_str(), w.shape_str(), mean.shape_str(), rstd.shape_str()));
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::layernorm_backward<T>(ptr<T>(din), ptr<T>(dw), ptr<T>(db), ptr<T>(dout), ptr<T>(in),
                                 ptr<T>(w), ptr<T>(mean), ptr<T>(rstd), rows, C);
    });
  }

  void gelu(Tensor out, Tensor in) override {
    const DType dt = pointwise("gelu", {{"out", &out}, {"in", &in}});
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::gelu_forward<T>(ptr<T>(out), ptr<T>(in), in.numel());
    });
  }
  void gelu_backward(Tensor din, Tensor dout, Tensor in) override {
    const DType dt = pointwise("gelu_backward", {{"din", &din}, {"dout", &dout}, {"in", &in}});
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::gelu_backward<T>(ptr<T>(din), ptr<T>(dout), ptr<T>(in), in.numel());
    });
  }
  void relu(Tensor out, Tensor in) override {
    const DType dt = pointwise("relu", {{"out", &out}, {"in", &in}});
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::relu_forward<T>(ptr<T>(out), ptr<T>(in), in.numel());
    });
  }
  void relu_backward(Tensor din, Tensor dout, Tensor in) override {
    const DType dt = pointwise("relu_backward", {{"din", &din}, {"dout", &dout}, {"in", &in}});
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::relu_backward<T>(ptr<T>(din), ptr<T>(dout), ptr<T>(in), in.numel());
    });
  }

  void dropout(Tensor out, Tensor in, float p, uint64_t seed) override {
    const DType dt = pointwise("dropout", {{"out", &out}, {"in", &in}});
    check_dropout_p("dropout", p);
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::dropout_forward<T>(ptr<T>(out), ptr<T>(in), in.numel(), p, seed);
    });
  }
  void dropout_backward(Tensor din, Tensor dout, float p, uint64_t seed) override {
    const DType dt = pointwise("dropout_backward", {{"din", &din}, {"dout", &dout}});
    check_dropout_p("dropout_backward", p);
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::dropout_backward<T>(ptr<T>(din), ptr<T>(dout), din.numel(), p, seed);
    });
  }

  void add(Tensor out, Tensor a, Tensor b) override {
    const DType dt = pointwise("add", {{"out", &out}, {"a", &a}, {"b", &b}});
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::add<T>(ptr<T>(out), ptr<T>(a), ptr<T>(b), out.numel());
    });
  }
  void accumulate(Tensor dst, Tensor src) override {
    const DType dt = pointwise("accumulate", {{"dst", &dst}, {"src", &src}});
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::accumulate<T>(ptr<T>(dst), ptr<T>(src), dst.numel());
    });
  }
  void scale(Tensor x, double s) override {
    const DType dt = pointwise("scale", {{"x", &x}});
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::scale<T>(ptr<T>(x), static_cast<T>(s), x.numel());
    });
  }

  void attention(Tensor out, Tensor lse, Tensor qkv, int n_head) override {
    const char* op = "attention";
    const DType dt = float_dtype(op, {&out, &lse, &qkv});
    const auto [B, T_, C] = attention_shape(op, qkv, n_head);
    require_present(op, "out", out);
    require_present(op, "lse", lse);
    require(out.numel() == B * T_ * C && out.cols() == C && lse.numel() == B * n_head * T_, op,
            fmt::format("out {} lse {} for qkv {} with {} heads: expected out [B,T,C], "
                        "lse [B,NH,T]",
                        out.shape_str(), lse.shape_str(), qkv.shape_str(), n_head));
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::attention_forward<T>(ptr<T>(out), ptr<T>(lse), ptr<T>(qkv), B, T_, C, n_head);
    });
  }

  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                          int n_head) override {
    const char* op = "attention_backward";
    const DType dt = float_dtype(op, {&dqkv, &dout, &qkv, &out, &lse});
    const auto [B, T_, C] = attention_shape(op, qkv, n_head);
    for (auto [name, t] : {std::pair{"dqkv", &dqkv}, {"dout", &dout}, {"out", &out}, {"lse", &lse}})
      require_present(op, name, *t);
    require(dqkv.numel() == qkv.numel() && out.numel() == B * T_ * C && out.cols() == C &&
                dout.numel() == out.numel() && dout.cols() == C && lse.numel() == B * n_head * T_,
            op,
            fmt::format("dqkv {} dout {} out {} lse {} for qkv {} with {} heads: expected "
                        "dqkv like qkv, dout/out [B,T,C], lse [B,NH,T]",
                        dqkv.shape_str(), dout.shape_str(), out.shape_str(), lse.shape_str(),
                        qkv.shape_str(), n_head));
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::attention_backward<T>(ptr<T>(dqkv), ptr<T>(dout), ptr<T>(qkv), ptr<T>(out), ptr<T>(lse),
                                 B, T_, C, n_head);
    });
  }

  void embedding(Tensor out, Tensor ids, Tensor table) override {
    const char* op = "embedding";
    const DType dt = float_dtype(op, {&out, &table});
    require_present(op, "out", out);
    require_present(op, "table", table);
    const int64_t N = out.rows(), C = out.cols();
    require(table.cols() == C, op,
            fmt::format("out {} and table {} differ in row length", out.shape_str(),
                        table.shape_str()));
    require_ids(op, "ids", ids, N, table.rows());
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::embedding_forward<T>(ptr<T>(out), ids.as<int32_t>(), ptr<T>(table), N, C);
    });
  }

  void embedding_backward(Tensor dtable, Tensor dout, Tensor ids) override {
    const char* op = "embedding_backward";
    const DType dt = float_dtype(op, {&dtable, &dout});
    require_present(op, "dtable", dtable);
    require_present(op, "dout", dout);
    const int64_t N = dout.rows(), C = dout.cols();
    require(dtable.cols() == C, op,
            fmt::format("dout {} and dtable {} differ in row length", dout.shape_str(),
                        dtable.shape_str()));
    require_ids(op, "ids", ids, N, dtable.rows());
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::embedding_backward<T>(ptr<T>(dtable), ptr<T>(dout), ids.as<int32_t>(), N, C);
    });
  }

  void cross_entropy(Tensor losses, Tensor lse, Tensor logits, Tensor targets) override {
    const char* op = "cross_entropy";
    const DType dt = float_dtype(op, {&losses, &lse, &logits});
    require_present(op, "losses", losses);
    require_present(op, "lse", lse);
    require_present(op, "logits", logits);
    const int64_t N = logits.rows(), V = logits.cols();
    require(losses.numel() == N && lse.numel() == N, op,
            fmt::format("losses {} lse {} for logits {}: expected [N] each", losses.shape_str(),
                        lse.shape_str(), logits.shape_str()));
    require_ids(op, "targets", targets, N, V);
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::cross_entropy_forward<T>(ptr<T>(losses), ptr<T>(lse), ptr<T>(logits),
                                    targets.as<int32_t>(), N, V);
    });
  }

  void cross_entropy_backward(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                              float scale) override {
    const char* op = "cross_entropy_backward";
    const DType dt = float_dtype(op, {&dlogits, &logits, &lse});
    require_present(op, "dlogits", dlogits);
    require_present(op, "logits", logits);
    require_present(op, "lse", lse);
    const int64_t N = logits.rows(), V = logits.cols();
    require(dlogits.numel() == logits.numel() && dlogits.cols() == V && lse.numel() == N, op,
            fmt::format("dlogits {} logits {} lse {}: expected dlogits like logits [N,V], "
                        "lse [N]",
                        dlogits.shape_str(), logits.shape_str(), lse.shape_str()));
    require_ids(op, "targets", targets, N, V);
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::cross_entropy_backward<T>(ptr<T>(dlogits), ptr<T>(logits), ptr<T>(lse),
                                     targets.as<int32_t>(), N, V, static_cast<T>(scale));
    });
  }

  double sum(Tensor x) override {
    const DType dt = pointwise("sum", {{"x", &x}});
    double r = 0;
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      r = cpu::sum<T>(ptr<T>(x), x.numel());
    });
    return r;
  }
  double sum_squares(Tensor x) override {
    const DType dt = pointwise("sum_squares", {{"x", &x}});
    double r = 0;
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      r = cpu::sum_squares<T>(ptr<T>(x), x.numel());
    });
    return r;
  }

  void adamw(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp) override {
    const DType dt = pointwise("adamw", {{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}});
    require(hp.step >= 1, "adamw", fmt::format("step is {}, must be >= 1", hp.step));
    dispatch(dt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::adamw<T>(ptr<T>(param), ptr<T>(grad), ptr<T>(m), ptr<T>(v), param.numel(), hp.lr,
                    hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.step);
    });
  }

 private:
  struct Named {
    const char* name;
    const Tensor* t;
  };

  // Pointwise ops: every tensor present and of the first one's element count.
  static DType pointwise(const char* op, std::initializer_list<Named> ts) {
    const Tensor* first = ts.begin()->t;
    for (const Named& n : ts) {
      require_present(op, n.name, *n.t);
      require(n.t->numel() == first->numel(), op,
              fmt::format("{} {} and {} {} differ in element count", ts.begin()->name,
                          first->shape_str(), n.name, n.t->shape_str()));
    }
    DType dt = DType::f32;
    bool seen = false;
    for (const Named& n : ts) {
      const DType d = float_dtype(op, {n.t});
      require(!seen || d == dt, op,
              fmt::format("mixed dtypes {} and {}", dtype_name(dt), dtype_name(d)));
      dt = d;
      seen = true;
    }
    return dt;
  }

  static void check_dropout_p(const char* op, float p) {
    require(p >= 0.0f && p < 1.0f, op, fmt::format("p = {} must be in [0, 1)", p));
  }

  struct AttnShape {
    int64_t B, T, C;
  };
  static AttnShape attention_shape(const char* op, const Tensor& qkv, int n_head) {
    require_present(op, "qkv", qkv);
    require(qkv.ndim == 3 && qkv.dim(2) % 3 == 0, op,
            fmt::format("qkv {} must be [B,T,3C]", qkv.shape_str()));
    const int64_t C = qkv.dim(2) / 3;
    require(
        n_head > 0 && C % n_head == 0, op,
        fmt::format("C = {} (qkv {}) is not divisible by n_head = {}", C, qkv.shape_str(), n_head));
    return {qkv.dim(0), qkv.dim(1), C};
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace trainrun
