// CpuBackend: the reference implementation of the op set. Backend's public methods have already
// validated every call (backend.cpp); this file dispatches to the f32/f64 template kernels in
// cpu/, one file per op family. It computes in f32 and f64 (f64 for gradient checks), and on
// bf16 storage as the reference for mixed precision: the f32 kernels run on staged copies and
// what they write is rounded to bf16 (cpu/bf16_staging.h). It copies and fills any dtype and
// casts between f32 and bf16.
#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "cpu/bf16_staging.h"
#include "cpu/kernels.h"
#include "trainrun/backend/backend.h"
#include "trainrun/core/bf16.h"

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

// The same for ops on bf16 storage too: bf16 computes with T = float on tensors staged through
// `st`, and what the op wrote is rounded back when it returns (dropped if it throws).
template <class F>
void dispatch(cpu::Bf16Staging& st, DType dt, F&& f) {
  if (dt == DType::f64) {
    f(static_cast<double*>(nullptr));
    return;
  }
  try {
    f(static_cast<float*>(nullptr));
  } catch (...) {
    st.drop();
    throw;
  }
  st.store();
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data);
}

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu; }
  std::string describe() const override {
    // How idle threads wait decides how a shared core behaves (trainrun/runtime/omp_wait.h).
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const std::string wait = spin && *spin       ? fmt::format("spin {}", spin)
                             : policy && *policy ? fmt::format("wait policy {}", policy)
                                                 : std::string("libgomp's default spin");
    return fmt::format("cpu (oneDNN sgemm, {} OpenMP threads, {})", omp_get_max_threads(), wait);
  }
  bool supports(Op op, DType dt) const override {
    switch (op) {
      case Op::copy:
      case Op::fill:
        return true;
      case Op::cast:
        return dt == DType::f32 || dt == DType::bf16;
      case Op::adamw:  // master weights and moments stay f32 under bf16
        return dt == DType::f32 || dt == DType::f64;
      default:
        return dt == DType::f32 || dt == DType::f64 || dt == DType::bf16;
    }
  }
  bool f32_param_grads_with_bf16() const override { return true; }

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

  void cast_impl(Tensor dst, Tensor src) override {
    if (dst.dtype == DType::bf16)
      cpu::bf16_round(dst.as<uint16_t>(), src.as<float>(), dst.numel());
    else
      cpu::bf16_widen(dst.as<float>(), src.as<uint16_t>(), dst.numel());
  }

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
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::matmul_forward<T>(st_.out<T>(out), st_.in<T>(in), st_.in<T>(w), st_.in<T>(bias),
                             in.rows(), in.cols(), w.rows());
    });
  }

  void matmul_backward_impl(Tensor din, Tensor dw, Tensor dbias, Tensor dout, Tensor in, Tensor w,
                            GradWrite write, GradWrite param_write) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::matmul_backward<T>(st_.out<T>(din), st_.out<T>(dw), st_.out<T>(dbias), st_.in<T>(dout),
                              st_.in<T>(in), st_.in<T>(w), in.rows(), in.cols(), w.rows(),
                              write == GradWrite::accumulate, param_write == GradWrite::accumulate);
    });
  }

  void layernorm_impl(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor w,
                      Tensor b) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::layernorm_forward<T>(st_.out<T>(out), st_.out<T>(mean), st_.out<T>(rstd), st_.in<T>(in),
                                st_.in<T>(w), st_.in<T>(b), in.rows(), in.cols());
    });
  }

  void layernorm_backward_impl(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in, Tensor w,
                               Tensor mean, Tensor rstd, GradWrite param_write) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::layernorm_backward<T>(st_.out<T>(din), st_.out<T>(dw), st_.out<T>(db), st_.in<T>(dout),
                                 st_.in<T>(in), st_.in<T>(w), st_.in<T>(mean), st_.in<T>(rstd),
                                 in.rows(), in.cols(), param_write == GradWrite::accumulate);
    });
  }

  void rmsnorm_impl(Tensor out, Tensor rstd, Tensor in, Tensor w) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::rmsnorm_forward<T>(st_.out<T>(out), st_.out<T>(rstd), st_.in<T>(in), st_.in<T>(w),
                              in.rows(), in.cols());
    });
  }

  void rmsnorm_backward_impl(Tensor din, Tensor dw, Tensor dout, Tensor in, Tensor w, Tensor rstd,
                             GradWrite param_write) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::rmsnorm_backward<T>(st_.out<T>(din), st_.out<T>(dw), st_.in<T>(dout), st_.in<T>(in),
                               st_.in<T>(w), st_.in<T>(rstd), in.rows(), in.cols(),
                               param_write == GradWrite::accumulate);
    });
  }

  void gelu_impl(Tensor out, Tensor in) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::gelu_forward<T>(st_.out<T>(out), st_.in<T>(in), in.numel());
    });
  }
  void gelu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::gelu_backward<T>(st_.out<T>(din), st_.in<T>(dout), st_.in<T>(in), in.numel(),
                            write == GradWrite::accumulate);
    });
  }
  void relu_impl(Tensor out, Tensor in) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::relu_forward<T>(st_.out<T>(out), st_.in<T>(in), in.numel());
    });
  }
  void relu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::relu_backward<T>(st_.out<T>(din), st_.in<T>(dout), st_.in<T>(in), in.numel(),
                            write == GradWrite::accumulate);
    });
  }
  void dropout_impl(Tensor out, Tensor in, float p, uint64_t seed) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::dropout_forward<T>(st_.out<T>(out), st_.in<T>(in), in.numel(), p, seed);
    });
  }
  void dropout_backward_impl(Tensor din, Tensor dout, float p, uint64_t seed) override {
    dispatch(st_, din.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::dropout_backward<T>(st_.out<T>(din), st_.in<T>(dout), din.numel(), p, seed);
    });
  }

  void add_impl(Tensor out, Tensor a, Tensor b) override {
    dispatch(st_, out.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::add<T>(st_.out<T>(out), st_.in<T>(a), st_.in<T>(b), out.numel());
    });
  }
  void accumulate_impl(Tensor dst, Tensor src) override {
    dispatch(st_, dst.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::accumulate<T>(st_.out<T>(dst), st_.in<T>(src), dst.numel());
    });
  }
  void scale_impl(Tensor x, double s) override {
    dispatch(st_, x.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::scale<T>(st_.out<T>(x), static_cast<T>(s), x.numel());
    });
  }

  void attention_impl(Tensor out, Tensor lse, Tensor qkv, int n_head, int n_kv_head,
                      Tensor doc_start) override {
    dispatch(st_, qkv.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::attention_forward<T>(st_.out<T>(out), st_.out<T>(lse), st_.in<T>(qkv), qkv.dim(0),
                                qkv.dim(1), head_dim(qkv, n_head, n_kv_head), n_head, n_kv_head,
                                starts(doc_start));
    });
  }

  void attention_backward_impl(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                               int n_head, int n_kv_head, Tensor doc_start,
                               GradWrite write) override {
    if (write == GradWrite::overwrite) fill_impl(dqkv, 0.0);  // the kernel gathers into dqkv
    dispatch(st_, qkv.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::attention_backward<T>(st_.out<T>(dqkv), st_.in<T>(dout), st_.in<T>(qkv), st_.in<T>(out),
                                 st_.in<T>(lse), qkv.dim(0), qkv.dim(1),
                                 head_dim(qkv, n_head, n_kv_head), n_head, n_kv_head,
                                 starts(doc_start));
    });
  }

  void rope_impl(Tensor out, Tensor in, int n_head, int n_kv_head, float theta,
                 Tensor doc_start) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::rope_forward<T>(st_.out<T>(out), st_.in<T>(in), in.dim(0), in.dim(1), n_head, n_kv_head,
                           head_dim(in, n_head, n_kv_head), theta, starts(doc_start));
    });
  }

  void rope_backward_impl(Tensor din, Tensor dout, int n_head, int n_kv_head, float theta,
                          Tensor doc_start, GradWrite write) override {
    dispatch(st_, din.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::rope_backward<T>(st_.out<T>(din), st_.in<T>(dout), din.dim(0), din.dim(1), n_head,
                            n_kv_head, head_dim(din, n_head, n_kv_head), theta, starts(doc_start),
                            write == GradWrite::accumulate);
    });
  }

  static const int32_t* starts(const Tensor& doc_start) {
    return doc_start.empty() ? nullptr : doc_start.as<int32_t>();
  }

  void swiglu_impl(Tensor out, Tensor in) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::swiglu_forward<T>(st_.out<T>(out), st_.in<T>(in), out.rows(), out.cols());
    });
  }

  void swiglu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) override {
    dispatch(st_, in.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::swiglu_backward<T>(st_.out<T>(din), st_.in<T>(dout), st_.in<T>(in), dout.rows(),
                              dout.cols(), write == GradWrite::accumulate);
    });
  }

  void embedding_impl(Tensor out, Tensor ids, Tensor table) override {
    dispatch(st_, out.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::embedding_forward<T>(st_.out<T>(out), ids.as<int32_t>(), st_.in<T>(table), out.rows(),
                                out.cols());
    });
  }

  void embedding_backward_impl(Tensor dtable, Tensor dout, Tensor ids) override {
    dispatch(st_, dout.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::embedding_backward<T>(st_.out<T>(dtable), st_.in<T>(dout), ids.as<int32_t>(),
                                 dout.rows(), dout.cols());
    });
  }

  void cross_entropy_impl(Tensor losses, Tensor lse, Tensor logits, Tensor targets) override {
    dispatch(st_, logits.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::cross_entropy_forward<T>(st_.out<T>(losses), st_.out<T>(lse), st_.in<T>(logits),
                                    targets.as<int32_t>(), logits.rows(), logits.cols());
    });
  }

  void cross_entropy_backward_impl(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                                   float scale) override {
    dispatch(st_, logits.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::cross_entropy_backward<T>(st_.out<T>(dlogits), st_.in<T>(logits), st_.in<T>(lse),
                                     targets.as<int32_t>(), logits.rows(), logits.cols(),
                                     static_cast<T>(scale));
    });
  }

  double sum_impl(Tensor x, bool squares) override {
    double r = 0;
    dispatch(st_, x.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      r = squares ? cpu::sum_squares<T>(st_.in<T>(x), x.numel())
                  : cpu::sum<T>(st_.in<T>(x), x.numel());
    });
    return r;
  }

  void adamw_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp) override {
    dispatch(param.dtype, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::adamw<T>(ptr<T>(param), ptr<T>(grad), ptr<T>(m), ptr<T>(v), param.numel(),
                    AdamWStep<T>::make(hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.step,
                                       hp.grad_scale));
    });
  }

 private:
  cpu::Bf16Staging st_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace trainrun
