// CpuBackend: the reference implementation of the op set. Backend's public methods have already
// validated every call (backend.cpp); this file dispatches to the f32/f64 template kernels in
// cpu/, one file per op family. It computes in f32 and f64 (f64 for gradient checks); it copies
// and fills any dtype and casts none.
#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "cpu/kernels.h"
#include "trainrun/backend.h"
#include "trainrun/bf16.h"

namespace trainrun {
namespace {

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

// The head dimension of a qkv-shaped [B,T,(NH+2*NKV)*hd] tensor (NKV already resolved).
int64_t head_dim(const Tensor& qkv, int n_head, int n_kv_head) {
  return qkv.dim(2) / (n_head + 2 * int64_t{n_kv_head});
}

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu; }
  std::string describe() const override {
    return fmt::format("cpu (oneDNN sgemm, {} OpenMP threads)", omp_get_max_threads());
  }
  bool supports(Op op, DType dt) const override {
    switch (op) {
      case Op::copy:
      case Op::fill:
        return true;
      case Op::cast:
        return false;
      default:
        return dt == DType::f32 || dt == DType::f64;
    }
  }

  void* alloc(size_t bytes) override {
    // 64-byte alignment for AVX-512 loads; aligned_alloc wants a multiple of the alignment.
    const size_t rounded = ((bytes == 0 ? 1 : bytes) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void release(void* p) override { std::free(p); }

 protected:
  void copy_impl(Tensor dst, Tensor src) override { std::memmove(dst.data, src.data, dst.bytes()); }

  void fill_impl(Tensor x, double value) override {
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
      case DType::bf16:
        cpu::fill(x.as<uint16_t>(), bf16_from_f32(static_cast<float>(value)), n);
        break;
    }
  }

  void matmul_impl(Tensor out, Tensor in, Tensor w, Tensor bias) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::matmul_forward<T>(ptr<T>(out), ptr<T>(in), ptr<T>(w), ptr<T>(bias), in.rows(), in.cols(),
                             w.rows());
    });
  }

  void matmul_backward_impl(Tensor din, Tensor dw, Tensor dbias, Tensor dout, Tensor in,
                            Tensor w) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::matmul_backward<T>(ptr<T>(din), ptr<T>(dw), ptr<T>(dbias), ptr<T>(dout), ptr<T>(in),
                              ptr<T>(w), in.rows(), in.cols(), w.rows());
    });
  }

  void layernorm_impl(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor w,
                      Tensor b) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::layernorm_forward<T>(ptr<T>(out), ptr<T>(mean), ptr<T>(rstd), ptr<T>(in), ptr<T>(w),
                                ptr<T>(b), in.rows(), in.cols());
    });
  }

  void layernorm_backward_impl(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in, Tensor w,
                               Tensor mean, Tensor rstd) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::layernorm_backward<T>(ptr<T>(din), ptr<T>(dw), ptr<T>(db), ptr<T>(dout), ptr<T>(in),
                                 ptr<T>(w), ptr<T>(mean), ptr<T>(rstd), in.rows(), in.cols());
    });
  }

  void rmsnorm_impl(Tensor out, Tensor rstd, Tensor in, Tensor w) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::rmsnorm_forward<T>(ptr<T>(out), ptr<T>(rstd), ptr<T>(in), ptr<T>(w), in.rows(),
                              in.cols());
    });
  }

  void rmsnorm_backward_impl(Tensor din, Tensor dw, Tensor dout, Tensor in, Tensor w,
                             Tensor rstd) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::rmsnorm_backward<T>(ptr<T>(din), ptr<T>(dw), ptr<T>(dout), ptr<T>(in), ptr<T>(w),
                               ptr<T>(rstd), in.rows(), in.cols());
    });
  }

  void gelu_impl(Tensor out, Tensor in) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::gelu_forward<T>(ptr<T>(out), ptr<T>(in), in.numel());
    });
  }
  void gelu_backward_impl(Tensor din, Tensor dout, Tensor in) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::gelu_backward<T>(ptr<T>(din), ptr<T>(dout), ptr<T>(in), in.numel());
    });
  }
  void relu_impl(Tensor out, Tensor in) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::relu_forward<T>(ptr<T>(out), ptr<T>(in), in.numel());
    });
  }
  void relu_backward_impl(Tensor din, Tensor dout, Tensor in) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::relu_backward<T>(ptr<T>(din), ptr<T>(dout), ptr<T>(in), in.numel());
    });
  }
  void dropout_impl(Tensor out, Tensor in, float p, uint64_t seed) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::dropout_forward<T>(ptr<T>(out), ptr<T>(in), in.numel(), p, seed);
    });
  }
  void dropout_backward_impl(Tensor din, Tensor dout, float p, uint64_t seed) override {
    dispatch(din.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::dropout_backward<T>(ptr<T>(din), ptr<T>(dout), din.numel(), p, seed);
    });
  }

  void add_impl(Tensor out, Tensor a, Tensor b) override {
    dispatch(out.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::add<T>(ptr<T>(out), ptr<T>(a), ptr<T>(b), out.numel());
    });
  }
  void accumulate_impl(Tensor dst, Tensor src) override {
    dispatch(dst.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::accumulate<T>(ptr<T>(dst), ptr<T>(src), dst.numel());
    });
  }
  void scale_impl(Tensor x, double s) override {
    dispatch(x.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::scale<T>(ptr<T>(x), static_cast<T>(s), x.numel());
    });
  }

  void attention_impl(Tensor out, Tensor lse, Tensor qkv, int n_head, int n_kv_head) override {
    dispatch(qkv.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::attention_forward<T>(ptr<T>(out), ptr<T>(lse), ptr<T>(qkv), qkv.dim(0), qkv.dim(1),
                                head_dim(qkv, n_head, n_kv_head), n_head, n_kv_head);
    });
  }

  void attention_backward_impl(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                               int n_head, int n_kv_head) override {
    dispatch(qkv.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::attention_backward<T>(ptr<T>(dqkv), ptr<T>(dout), ptr<T>(qkv), ptr<T>(out), ptr<T>(lse),
                                 qkv.dim(0), qkv.dim(1), head_dim(qkv, n_head, n_kv_head), n_head,
                                 n_kv_head);
    });
  }

  void rope_impl(Tensor out, Tensor in, int n_head, int n_kv_head, float theta) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::rope_forward<T>(ptr<T>(out), ptr<T>(in), in.dim(0), in.dim(1), n_head, n_kv_head,
                           head_dim(in, n_head, n_kv_head), theta);
    });
  }

  void rope_backward_impl(Tensor din, Tensor dout, int n_head, int n_kv_head,
                          float theta) override {
    dispatch(din.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::rope_backward<T>(ptr<T>(din), ptr<T>(dout), din.dim(0), din.dim(1), n_head, n_kv_head,
                            head_dim(din, n_head, n_kv_head), theta);
    });
  }

  void swiglu_impl(Tensor out, Tensor in) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::swiglu_forward<T>(ptr<T>(out), ptr<T>(in), out.rows(), out.cols());
    });
  }

  void swiglu_backward_impl(Tensor din, Tensor dout, Tensor in) override {
    dispatch(in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::swiglu_backward<T>(ptr<T>(din), ptr<T>(dout), ptr<T>(in), dout.rows(), dout.cols());
    });
  }

  void embedding_impl(Tensor out, Tensor ids, Tensor table) override {
    dispatch(out.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::embedding_forward<T>(ptr<T>(out), ids.as<int32_t>(), ptr<T>(table), out.rows(),
                                out.cols());
    });
  }

  void embedding_backward_impl(Tensor dtable, Tensor dout, Tensor ids) override {
    dispatch(dout.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::embedding_backward<T>(ptr<T>(dtable), ptr<T>(dout), ids.as<int32_t>(), dout.rows(),
                                 dout.cols());
    });
  }

  void cross_entropy_impl(Tensor losses, Tensor lse, Tensor logits, Tensor targets) override {
    dispatch(logits.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::cross_entropy_forward<T>(ptr<T>(losses), ptr<T>(lse), ptr<T>(logits),
                                    targets.as<int32_t>(), logits.rows(), logits.cols());
    });
  }

  void cross_entropy_backward_impl(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                                   float scale) override {
    dispatch(logits.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::cross_entropy_backward<T>(ptr<T>(dlogits), ptr<T>(logits), ptr<T>(lse),
                                     targets.as<int32_t>(), logits.rows(), logits.cols(),
                                     static_cast<T>(scale));
    });
  }

  double sum_impl(Tensor x, bool squares) override {
    double r = 0;
    dispatch(x.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      r = squares ? cpu::sum_squares<T>(ptr<T>(x), x.numel()) : cpu::sum<T>(ptr<T>(x), x.numel());
    });
    return r;
  }

  void adamw_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp) override {
    dispatch(param.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::adamw<T>(ptr<T>(param), ptr<T>(grad), ptr<T>(m), ptr<T>(v), param.numel(), hp.lr,
                    hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.step);
    });
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace trainrun
