// The gpu suite's harness (tests/backend_ops/) must catch what it exists to catch, before it is
// trusted with GPU time: here it judges deliberately broken backends (the CPU backend with one
// fault injected) and must fail them, while the plain CPU backend passes every case.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend_ops/op_case.h"
#include "backend_ops/runner.h"
#include "trainrun/backend/backend.h"

using namespace trainrun;
using namespace trainrun::backend_ops;

namespace {

enum class Fault { none, overwrite_grad, ignore_overwrite, skip_last_element, off_by_a_bit };

// The CPU backend through its public methods, with one fault.
class Faulty final : public Backend {
 public:
  // f32_only: computes no op in bf16 (as the CPU did before its bf16 reference), fills alone.
  explicit Faulty(Fault f, bool f32_only = false) : fault_(f), f32_only_(f32_only) {}
  Device device() const override { return Device::cpu; }
  std::string describe() const override { return "faulty cpu"; }
  bool supports(Op op, DType dt) const override {
    if (f32_only_ && dt == DType::bf16 && op != Op::fill && op != Op::copy) return false;
    return cpu_->supports(op, dt);
  }
  bool f32_param_grads_with_bf16() const override { return cpu_->f32_param_grads_with_bf16(); }
  void* alloc(size_t bytes) override { return cpu_->alloc(bytes); }
  void release(void* p) override { cpu_->release(p); }

 protected:
  void copy_impl(Tensor d, Tensor s) override { cpu_->copy(d, s); }
  void cast_impl(Tensor d, Tensor s) override { cpu_->copy(d, s); }
  void fill_impl(Tensor x, double v) override { cpu_->fill(x, v); }
  void matmul_impl(Tensor out, Tensor in, Tensor w, Tensor b) override {
    cpu_->matmul(out, in, w, b);
    if (fault_ == Fault::off_by_a_bit) out.as<float>()[0] *= 1.001f;
  }
  void matmul_backward_impl(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in, Tensor w,
                            GradWrite write, GradWrite param_write) override {
    cpu_->matmul_backward(din, dw, db, dout, in, w, write, param_write);
  }
  void layernorm_impl(Tensor o, Tensor m, Tensor r, Tensor in, Tensor w, Tensor b) override {
    cpu_->layernorm(o, m, r, in, w, b);
  }
  void layernorm_backward_impl(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in, Tensor w,
                               Tensor m, Tensor r, GradWrite param_write) override {
    cpu_->layernorm_backward(din, dw, db, dout, in, w, m, r, param_write);
  }
  void gelu_impl(Tensor o, Tensor i) override { cpu_->gelu(o, i); }
  void gelu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) override {
    if (fault_ == Fault::overwrite_grad) cpu_->fill(din, 0.0);
    if (fault_ == Fault::ignore_overwrite) write = GradWrite::accumulate;
    cpu_->gelu_backward(din, dout, in, write);
  }
  void relu_impl(Tensor o, Tensor i) override {
    if (fault_ != Fault::skip_last_element) return cpu_->relu(o, i);
    const int64_t n = i.numel() - 1;
    cpu_->relu(o.slice(0, {n}), i.slice(0, {n}));
  }
  void relu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) override {
    cpu_->relu_backward(din, dout, in, write);
  }
  void dropout_impl(Tensor o, Tensor i, float p, uint64_t s) override { cpu_->dropout(o, i, p, s); }
  void dropout_backward_impl(Tensor din, Tensor dout, float p, uint64_t s) override {
    cpu_->dropout_backward(din, dout, p, s);
  }
  void add_impl(Tensor o, Tensor a, Tensor b) override { cpu_->add(o, a, b); }
  void accumulate_impl(Tensor d, Tensor s) override { cpu_->accumulate(d, s); }
  void scale_impl(Tensor x, double s) override { cpu_->scale(x, s); }
  void attention_impl(Tensor o, Tensor l, Tensor qkv, int nh, int nkv, Tensor ds) override {
    cpu_->attention(o, l, qkv, nh, nkv, ds);
  }
  void attention_backward_impl(Tensor dqkv, Tensor dout, Tensor qkv, Tensor o, Tensor l, int nh,
                               int nkv, Tensor ds, GradWrite w) override {
    cpu_->attention_backward(dqkv, dout, qkv, o, l, nh, nkv, ds, w);
  }
  void rmsnorm_impl(Tensor o, Tensor r, Tensor in, Tensor w) override {
    cpu_->rmsnorm(o, r, in, w);
  }
  void rmsnorm_backward_impl(Tensor din, Tensor dw, Tensor dout, Tensor in, Tensor w, Tensor r,
                             GradWrite param_write) override {
    cpu_->rmsnorm_backward(din, dw, dout, in, w, r, param_write);
  }
  void rope_impl(Tensor o, Tensor in, int nh, int nkv, float theta, Tensor ds) override {
    cpu_->rope(o, in, nh, nkv, theta, ds);
  }
  void rope_backward_impl(Tensor din, Tensor dout, int nh, int nkv, float theta, Tensor ds,
                          GradWrite write) override {
    cpu_->rope_backward(din, dout, nh, nkv, theta, ds, write);
  }
  void swiglu_impl(Tensor o, Tensor in) override { cpu_->swiglu(o, in); }
  void swiglu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) override {
    cpu_->swiglu_backward(din, dout, in, write);
  }
  void embedding_impl(Tensor o, Tensor ids, Tensor t) override { cpu_->embedding(o, ids, t); }
  void embedding_backward_impl(Tensor dt, Tensor dout, Tensor ids) override {
    cpu_->embedding_backward(dt, dout, ids);
  }
  void cross_entropy_impl(Tensor losses, Tensor lse, Tensor logits, Tensor t) override {
    cpu_->cross_entropy(losses, lse, logits, t);
  }
  void cross_entropy_backward_impl(Tensor d, Tensor logits, Tensor lse, Tensor t,
                                   float s) override {
    cpu_->cross_entropy_backward(d, logits, lse, t, s);
  }
  double sum_impl(Tensor x, bool squares) override {
    return squares ? cpu_->sum_squares(x) : cpu_->sum(x);
  }
  void adamw_impl(Tensor p, Tensor g, Tensor m, Tensor v, const AdamWParams& hp) override {
    cpu_->adamw(p, g, m, v, hp);
  }

 private:
  Fault fault_;
  bool f32_only_;
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

const ModelShape kShape{"odd", 2, 13, 24, 3, 37};

// The outcome of every case named `name` (at kShape, f32) on a backend with `fault`.
std::vector<Outcome> run(Fault fault, const std::string& name) {
  auto ref = make_cpu_backend();
  Faulty test(fault);
  Runner runner(*ref, test, false);
  std::vector<Outcome> out;
  for (OpCase& c : cases_for(kShape, DType::f32)) {
    if (c.name() != name) continue;
    c.seed = 7;
    out.push_back(runner.run(c));
  }
  REQUIRE(!out.empty());
  return out;
}

}  // namespace

TEST_CASE("a correct backend passes every case, and the error cases agree") {
  auto ref = make_cpu_backend();
  Faulty test(Fault::none);
  Runner runner(*ref, test, true);
  std::vector<OpCase> cases = cases_for(kShape, DType::f32);
  for (OpCase& c : error_cases()) cases.push_back(std::move(c));
  int ran = 0;
  for (OpCase& c : cases) {
    CAPTURE(c.name());
    const Outcome o = runner.run(c);
    REQUIRE(o.status != Outcome::unsupported);
    ++ran;
    CHECK(o.status == Outcome::pass);
    if (c.expect == Expect::match) CHECK(o.ms > 0);
  }
  CHECK(ran > 30);
}

TEST_CASE("a backward that overwrites its gradient fails") {
  const Outcome o = run(Fault::overwrite_grad, "gelu_backward").front();
  CHECK(o.status == Outcome::fail);
  CHECK(o.err > 1e-3);
}

TEST_CASE("a backward told to overwrite that adds to the old gradient fails") {
  const Outcome o = run(Fault::ignore_overwrite, "gelu_backward overwrite").front();
  CHECK(o.status == Outcome::fail);
  CHECK(o.err == INFINITY);  // the overwritten gradient starts as NaN
}

TEST_CASE("an element the op forgets to write fails (outputs start as NaN)") {
  const Outcome o = run(Fault::skip_last_element, "relu").front();
  CHECK(o.status == Outcome::fail);
  CHECK(o.err == INFINITY);
}

TEST_CASE("a result off by 0.1% in one element fails the GEMM tolerance") {
  for (const Outcome& o : run(Fault::off_by_a_bit, "matmul")) {
    CHECK(o.status == Outcome::fail);
    CHECK(o.err > 1e-4);
  }
}

TEST_CASE("a case the backend does not support is reported, not failed") {
  auto ref = make_cpu_backend();
  Faulty test(Fault::none, true);
  Runner runner(*ref, test, false);
  for (const OpCase& c : cases_for(kShape, DType::bf16)) {
    CAPTURE(c.name());
    // This backend computes no op in bf16 but fills bf16 tensors (rounding as the host's bf16.h).
    CHECK(runner.run(c).status == (c.op == Op::fill ? Outcome::pass : Outcome::unsupported));
  }
}
