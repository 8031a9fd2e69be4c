// Backend's public op methods: the contract of each op, checked once for every backend (see
// backend.h), then the backend's *_impl. The generic checks are in op_check.cpp.
#include <fmt/format.h>

#include <cmath>
#include <exception>
#include <stdexcept>

#include "op_check.h"
#include "trainrun/backend/backend.h"
#include "trainrun/core/clock.h"

namespace trainrun {

const char* op_name(Op op) {
  static constexpr const char* kNames[kOpCount] = {
      "copy",
      "cast",
      "fill",
      "matmul",
      "matmul_backward",
      "layernorm",
      "layernorm_backward",
      "gelu",
      "gelu_backward",
      "relu",
      "relu_backward",
      "dropout",
      "dropout_backward",
      "add",
      "accumulate",
      "scale",
      "attention",
      "attention_backward",
      "embedding",
      "embedding_backward",
      "cross_entropy",
      "cross_entropy_backward",
      "rmsnorm",
      "rmsnorm_backward",
      "rope",
      "rope_backward",
      "swiglu",
      "swiglu_backward",
      "sum",
      "sum_squares",
      "adamw",
  };
  const int i = static_cast<int>(op);
  return i >= 0 && i < kOpCount ? kNames[i] : "?";
}

void Backend::fail_out_of_range_id(Op op, const char* name, int64_t index, int64_t value,
                                   int64_t limit) {
  throw out_of_range_id(op, name, index, value, limit);
}

// Reports one op's time to the backend's observer (trainrun --profile), if it has one: marked on
// the device where the backend times ops there (reported later, report_op_times), else the wall
// time around the call, a device backend synchronised first so the time is the op's and not its
// launch's. Unobserved, this costs a pointer test. The op is also a profiler range named for it
// (range_push). An op that throws is not reported.
class OpTimer {
 public:
  OpTimer(Backend& be, Op op)
      : be_(be),
        op_(op),
        device_(be.op_observer() && be.op_time_begin()),
        t0_(be.op_observer() && !device_ ? OpObserver::now() : 0.0) {
    be_.range_push(op_name(op));
  }
  ~OpTimer() {
    be_.range_pop();
    OpObserver* o = be_.op_observer();
    if (!o || std::uncaught_exceptions() > 0) return;
    if (device_) {
      be_.op_time_end(op_);
      return;
    }
    if (be_.device() != Device::cpu) be_.synchronize();
    o->op_done(op_, t0_, OpObserver::now(), OpClock::host);
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  Backend& be_;
  Op op_;
  bool device_;
  double t0_;
};

void Backend::report_op_times() {
  if (observer_) report_op_times_impl(*observer_);
}

double OpObserver::now() {
  return trainrun::now();
}

void Backend::cast_impl(Tensor, Tensor) {
  throw std::logic_error("Backend::cast_impl: reached although supports(Op::cast) is false");
}

// ---- memory ----

void Backend::copy(Tensor dst, Tensor src) {
  OpCheck c(*this, Op::copy);
  auto reachable = [&](const char* name, const Tensor& t) {
    if (t.device != Device::cpu && t.device != device())
      c.fail(fmt::format("{} lives on {}; the {} backend copies between the host and {}", name,
                         device_name(t.device), device_name(device()), device_name(device())));
  };
  reachable("dst", dst);
  reachable("src", src);
  const bool cast = dst.dtype != src.dtype && dst.numel() == src.numel() && dst.numel() > 0 &&
                    dst.device == device() && src.device == device() &&
                    supports(Op::cast, dst.dtype) && supports(Op::cast, src.dtype);
  if (cast) {
    const OpTimer timer(*this, Op::cast);
    cast_impl(dst, src);
    return;
  }
  if (dst.bytes() != src.bytes())
    c.fail(fmt::format("dst {} {} ({} bytes) and src {} {} ({} bytes) differ in size",
                       dtype_name(dst.dtype), dst.shape_str(), dst.bytes(), dtype_name(src.dtype),
                       src.shape_str(), src.bytes()));
  if (dst.bytes() == 0 || dst.data == src.data) return;
  const OpTimer timer(*this, Op::copy);
  copy_impl(dst, src);
}

void Backend::fill(Tensor x, double value) {
  if (x.empty() || x.numel() == 0) return;
  OpCheck c(*this, Op::fill);
  c.on_device({"x", x});
  if (!supports(Op::fill, x.dtype))
    c.fail(fmt::format("the {} backend cannot fill {} tensors", device_name(device()),
                       dtype_name(x.dtype)));
  const OpTimer timer(*this, Op::fill);
  fill_impl(x, value);
}

// ---- dense ----

namespace {

// matmul's checks (shared with matmul_gelu).
void check_matmul(OpCheck& c, Tensor out, Tensor in, Tensor w, Tensor bias) {
  c.floats({{"out", out}, {"in", in}, {"w", w}}, {{"bias", bias}});
  const int64_t N = in.rows(), C = in.cols(), OC = w.rows();
  c.shapes(
      w.cols() == C && out.rows() == N && out.cols() == OC && (bias.empty() || bias.numel() == OC),
      {{"out", out}, {"in", in}, {"w", w}, {"bias", bias}},
      "out [N,OC] = in [N,C] . w [OC,C]^T + bias [OC]");
}

// matmul_backward's checks (shared with matmul_backward_gelu).
void check_matmul_backward(OpCheck& c, Tensor din, Tensor dw, Tensor dbias, Tensor dout, Tensor in,
                           Tensor w) {
  const DType dt = c.floats({{"dout", dout}, {"in", in}, {"w", w}}, {{"din", din}});
  if (dw.empty()) {  // the input gradient alone
    if (din.empty()) c.fail("din and dw are both empty: nothing to compute");
    if (!dbias.empty()) c.fail("dbias without dw: a bias gradient comes with its weight's");
  } else {
    c.param_grads(dt, {{"dw", dw}}, {{"dbias", dbias}});
  }
  const int64_t N = in.rows(), C = in.cols(), OC = w.rows();
  c.shapes(w.cols() == C && (dw.empty() || (dw.rows() == OC && dw.cols() == C)) &&
               dout.rows() == N && dout.cols() == OC &&
               (din.empty() || (din.rows() == N && din.cols() == C)) &&
               (dbias.empty() || dbias.numel() == OC),
           {{"din", din}, {"dw", dw}, {"dbias", dbias}, {"dout", dout}, {"in", in}, {"w", w}},
           "in/din [N,C], w/dw [OC,C], dout [N,OC], dbias [OC]");
}

// The GELU's input beside the tensor `like` it must match (out or dpre), in a dtype the backend
// computes `gelu_op` on.
void check_pre(const Backend& be, OpCheck& c, Op gelu_op, const char* name, Tensor like,
               Tensor pre) {
  c.floats({{name, like}, {"pre", pre}});
  c.shapes(pre.rows() == like.rows() && pre.cols() == like.cols(), {{name, like}, {"pre", pre}},
           "pre of the same shape");
  if (!be.supports(gelu_op, like.dtype))
    c.fail(fmt::format("the {} backend cannot compute {} on {}", device_name(be.device()),
                       op_name(gelu_op), dtype_name(like.dtype)));
}

}  // namespace

void Backend::matmul(Tensor out, Tensor in, Tensor w, Tensor bias) {
  OpCheck c(*this, Op::matmul);
  check_matmul(c, out, in, w, bias);
  const OpTimer timer(*this, Op::matmul);
  matmul_impl(out, in, w, bias);
}

void Backend::matmul_backward(Tensor din, Tensor dw, Tensor dbias, Tensor dout, Tensor in, Tensor w,
                              GradWrite write, GradWrite param_write) {
  OpCheck c(*this, Op::matmul_backward);
  check_matmul_backward(c, din, dw, dbias, dout, in, w);
  const OpTimer timer(*this, Op::matmul_backward);
  matmul_backward_impl(din, dw, dbias, dout, in, w, write, param_write);
}

void Backend::matmul_gelu(Tensor out, Tensor pre, Tensor in, Tensor w, Tensor bias) {
  OpCheck c(*this, Op::matmul);
  check_matmul(c, pre, in, w, bias);
  check_pre(*this, c, Op::gelu, "out", out, pre);
  const OpTimer timer(*this, Op::matmul);
  matmul_gelu_impl(out, pre, in, w, bias);
}

void Backend::matmul_backward_gelu(Tensor dpre, Tensor dw, Tensor dbias, Tensor dout, Tensor in,
                                   Tensor w, Tensor pre, GradWrite param_write) {
  OpCheck c(*this, Op::matmul_backward);
  c.present({"dpre", dpre});
  c.present({"dw", dw});
  check_matmul_backward(c, dpre, dw, dbias, dout, in, w);
  check_pre(*this, c, Op::gelu_backward, "dpre", dpre, pre);
  const OpTimer timer(*this, Op::matmul_backward);
  matmul_backward_gelu_impl(dpre, dw, dbias, dout, in, w, pre, param_write);
}

void Backend::matmul_gelu_impl(Tensor out, Tensor pre, Tensor in, Tensor w, Tensor bias) {
  matmul_impl(pre, in, w, bias);
  gelu_impl(out, pre);
}

void Backend::matmul_backward_gelu_impl(Tensor dpre, Tensor dw, Tensor dbias, Tensor dout,
                                        Tensor in, Tensor w, Tensor pre, GradWrite param_write) {
  matmul_backward_impl(dpre, dw, dbias, dout, in, w, GradWrite::overwrite, param_write);
  gelu_backward_impl(dpre, dpre, pre, GradWrite::overwrite);
}

// ---- normalisation and activations ----

namespace {

// layernorm's checks (shared with residual_layernorm).
void check_layernorm(OpCheck& c, Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor w,
                     Tensor b) {
  const DType dt = c.floats({{"out", out}, {"in", in}, {"w", w}, {"b", b}});
  c.stats(dt, {{"mean", mean}, {"rstd", rstd}});
  const int64_t rows = in.rows(), C = in.cols();
  c.shapes(out.numel() == in.numel() && out.cols() == C && mean.numel() == rows &&
               rstd.numel() == rows && w.numel() == C && b.numel() == C,
           {{"out", out}, {"mean", mean}, {"rstd", rstd}, {"in", in}, {"w", w}, {"b", b}},
           "out like in [rows,C], mean/rstd [rows], w/b [C]");
}

// rmsnorm's checks (shared with residual_rmsnorm).
void check_rmsnorm(OpCheck& c, Tensor out, Tensor rstd, Tensor in, Tensor w) {
  const DType dt = c.floats({{"out", out}, {"in", in}, {"w", w}});
  c.stats(dt, {{"rstd", rstd}});
  const int64_t rows = in.rows(), C = in.cols();
  c.shapes(out.numel() == in.numel() && out.cols() == C && rstd.numel() == rows && w.numel() == C,
           {{"out", out}, {"rstd", rstd}, {"in", in}, {"w", w}},
           "out like in [rows,C], rstd [rows], w [C]");
}

// The residual add in front of a norm: sum, x and y of one dtype and shape (the norm checks the
// rest against sum), in a dtype the backend adds.
void check_residual(const Backend& be, OpCheck& c, Tensor sum, Tensor x, Tensor y) {
  c.floats({{"sum", sum}, {"x", x}, {"y", y}});
  c.shapes(x.numel() == sum.numel() && y.numel() == sum.numel() && x.cols() == sum.cols() &&
               y.cols() == sum.cols(),
           {{"sum", sum}, {"x", x}, {"y", y}}, "sum = x + y, all [rows,C]");
  if (!be.supports(Op::add, sum.dtype))
    c.fail(fmt::format("the {} backend cannot add {} tensors", device_name(be.device()),
                       dtype_name(sum.dtype)));
}

}  // namespace

void Backend::layernorm(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor w, Tensor b) {
  OpCheck c(*this, Op::layernorm);
  check_layernorm(c, out, mean, rstd, in, w, b);
  const OpTimer timer(*this, Op::layernorm);
  layernorm_impl(out, mean, rstd, in, w, b);
}

void Backend::residual_layernorm(Tensor sum, Tensor out, Tensor mean, Tensor rstd, Tensor x,
                                 Tensor y, Tensor w, Tensor b) {
  OpCheck c(*this, Op::layernorm);
  check_residual(*this, c, sum, x, y);
  check_layernorm(c, out, mean, rstd, sum, w, b);
  const OpTimer timer(*this, Op::layernorm);
  residual_layernorm_impl(sum, out, mean, rstd, x, y, w, b);
}

void Backend::residual_layernorm_impl(Tensor sum, Tensor out, Tensor mean, Tensor rstd, Tensor x,
                                      Tensor y, Tensor w, Tensor b) {
  add_impl(sum, x, y);
  layernorm_impl(out, mean, rstd, sum, w, b);
}

void Backend::layernorm_backward(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in, Tensor w,
                                 Tensor mean, Tensor rstd, GradWrite param_write) {
  OpCheck c(*this, Op::layernorm_backward);
  const DType dt = c.floats({{"din", din}, {"dout", dout}, {"in", in}, {"w", w}});
  c.param_grads(dt, {{"dw", dw}, {"db", db}});
  c.stats(dt, {{"mean", mean}, {"rstd", rstd}});
  const int64_t rows = in.rows(), C = in.cols();
  c.shapes(din.numel() == in.numel() && dout.numel() == in.numel() && mean.numel() == rows &&
               rstd.numel() == rows && w.numel() == C && dw.numel() == C && db.numel() == C,
           {{"din", din},
            {"dw", dw},
            {"db", db},
            {"dout", dout},
            {"in", in},
            {"w", w},
            {"mean", mean},
            {"rstd", rstd}},
           "din/dout like in [rows,C], w/dw/db [C], mean/rstd [rows]");
  const OpTimer timer(*this, Op::layernorm_backward);
  layernorm_backward_impl(din, dw, db, dout, in, w, mean, rstd, param_write);
}

void Backend::rmsnorm(Tensor out, Tensor rstd, Tensor in, Tensor w) {
  OpCheck c(*this, Op::rmsnorm);
  check_rmsnorm(c, out, rstd, in, w);
  const OpTimer timer(*this, Op::rmsnorm);
  rmsnorm_impl(out, rstd, in, w);
}

void Backend::residual_rmsnorm(Tensor sum, Tensor out, Tensor rstd, Tensor x, Tensor y, Tensor w) {
  OpCheck c(*this, Op::rmsnorm);
  check_residual(*this, c, sum, x, y);
  check_rmsnorm(c, out, rstd, sum, w);
  const OpTimer timer(*this, Op::rmsnorm);
  residual_rmsnorm_impl(sum, out, rstd, x, y, w);
}

void Backend::residual_rmsnorm_impl(Tensor sum, Tensor out, Tensor rstd, Tensor x, Tensor y,
                                    Tensor w) {
  add_impl(sum, x, y);
  rmsnorm_impl(out, rstd, sum, w);
}

void Backend::rmsnorm_backward(Tensor din, Tensor dw, Tensor dout, Tensor in, Tensor w, Tensor rstd,
                               GradWrite param_write) {
  OpCheck c(*this, Op::rmsnorm_backward);
  const DType dt = c.floats({{"din", din}, {"dout", dout}, {"in", in}, {"w", w}});
  c.param_grads(dt, {{"dw", dw}});
  c.stats(dt, {{"rstd", rstd}});
  const int64_t rows = in.rows(), C = in.cols();
  c.shapes(din.numel() == in.numel() && dout.numel() == in.numel() && rstd.numel() == rows &&
               w.numel() == C && dw.numel() == C,
           {{"din", din}, {"dw", dw}, {"dout", dout}, {"in", in}, {"w", w}, {"rstd", rstd}},
           "din/dout like in [rows,C], w/dw [C], rstd [rows]");
  const OpTimer timer(*this, Op::rmsnorm_backward);
  rmsnorm_backward_impl(din, dw, dout, in, w, rstd, param_write);
}

namespace {

// Pointwise ops: every tensor present, of one supported float dtype and one element count.
void pointwise(const Backend& be, Op op, std::initializer_list<Named> ts) {
  OpCheck c(be, op);
  c.floats(ts);
  c.same_numel(ts);
}

void check_dropout_p(const Backend& be, Op op, float p) {
  if (!(p >= 0.0f && p < 1.0f)) OpCheck(be, op).fail(fmt::format("p = {} must be in [0, 1)", p));
}

}  // namespace

void Backend::gelu(Tensor out, Tensor in) {
  pointwise(*this, Op::gelu, {{"out", out}, {"in", in}});
  const OpTimer timer(*this, Op::gelu);
  gelu_impl(out, in);
}

void Backend::gelu_backward(Tensor din, Tensor dout, Tensor in, GradWrite write) {
  pointwise(*this, Op::gelu_backward, {{"din", din}, {"dout", dout}, {"in", in}});
  const OpTimer timer(*this, Op::gelu_backward);
  gelu_backward_impl(din, dout, in, write);
}

void Backend::relu(Tensor out, Tensor in) {
  pointwise(*this, Op::relu, {{"out", out}, {"in", in}});
  const OpTimer timer(*this, Op::relu);
  relu_impl(out, in);
}

void Backend::relu_backward(Tensor din, Tensor dout, Tensor in, GradWrite write) {
  pointwise(*this, Op::relu_backward, {{"din", din}, {"dout", dout}, {"in", in}});
  const OpTimer timer(*this, Op::relu_backward);
  relu_backward_impl(din, dout, in, write);
}

void Backend::dropout(Tensor out, Tensor in, float p, uint64_t seed) {
  pointwise(*this, Op::dropout, {{"out", out}, {"in", in}});
  check_dropout_p(*this, Op::dropout, p);
  const OpTimer timer(*this, Op::dropout);
  dropout_impl(out, in, p, seed);
}

void Backend::dropout_backward(Tensor din, Tensor dout, float p, uint64_t seed) {
  pointwise(*this, Op::dropout_backward, {{"din", din}, {"dout", dout}});
  check_dropout_p(*this, Op::dropout_backward, p);
  const OpTimer timer(*this, Op::dropout_backward);
  dropout_backward_impl(din, dout, p, seed);
}

// ---- elementwise ----

void Backend::add(Tensor out, Tensor a, Tensor b) {
  pointwise(*this, Op::add, {{"out", out}, {"a", a}, {"b", b}});
  const OpTimer timer(*this, Op::add);
  add_impl(out, a, b);
}

void Backend::accumulate(Tensor dst, Tensor src) {
  pointwise(*this, Op::accumulate, {{"dst", dst}, {"src", src}});
  const OpTimer timer(*this, Op::accumulate);
  accumulate_impl(dst, src);
}

void Backend::scale(Tensor x, double s) {
  pointwise(*this, Op::scale, {{"x", x}});
  const OpTimer timer(*this, Op::scale);
  scale_impl(x, s);
}

// ---- attention ----

namespace {

struct AttentionDims {
  int64_t B, T, hd;
  int n_kv_head;  // resolved: never 0
};

// Multi-head attention (n_kv_head 0 or n_head) keeps its [B,T,3C] wording; grouped-query
// attention names the general layout.
AttentionDims attention_dims(const Backend& be, OpCheck& c, const Tensor& qkv, int n_head,
                             int n_kv_head) {
  const int nkv = n_kv_head == 0 ? n_head : n_kv_head;
  int64_t hd = 0;
  if (nkv == n_head) {
    c.shapes(qkv.ndim == 3 && qkv.dim(2) % 3 == 0, {{"qkv", qkv}}, "qkv [B,T,3C]");
    const int64_t C = qkv.dim(2) / 3;
    if (n_head <= 0 || C % n_head != 0)
      c.fail(fmt::format("C = {} (qkv {}) is not divisible by n_head = {}", C, qkv.shape_str(),
                         n_head));
    hd = Backend::head_dim(qkv, n_head, nkv);
  } else {
    if (n_head <= 0 || nkv <= 0 || n_head % nkv != 0)
      c.fail(fmt::format("n_kv_head = {} does not divide n_head = {}", n_kv_head, n_head));
    c.shapes(qkv.ndim == 3 && qkv.dim(2) % (n_head + 2 * nkv) == 0, {{"qkv", qkv}},
             "qkv [B,T,(n_head+2*n_kv_head)*hd]");
    hd = Backend::head_dim(qkv, n_head, nkv);
  }
  const int64_t max_hd = be.max_head_dim();
  if (max_hd > 0 && hd > max_hd)
    c.fail(fmt::format("head_dim {} (C = {} over {} heads) exceeds the {} backend's {}", hd,
                       hd * n_head, n_head, device_name(be.device()), max_hd));
  return {qkv.dim(0), qkv.dim(1), hd, nkv};
}

const char* attention_layout(bool gqa, bool backward) {
  if (backward)
    return gqa ? "dqkv like qkv [B,T,(n_head+2*n_kv_head)*hd], dout/out [B,T,n_head*hd], "
                 "lse [B,n_head,T]"
               : "dqkv like qkv [B,T,3C], dout/out [B,T,C], lse [B,NH,T]";
  return gqa ? "out [B,T,n_head*hd], lse [B,n_head,T] for qkv [B,T,(n_head+2*n_kv_head)*hd]"
             : "out [B,T,C], lse [B,NH,T] for qkv [B,T,3C]";
}

}  // namespace

void Backend::attention(Tensor out, Tensor lse, Tensor qkv, int n_head, int n_kv_head,
                        Tensor doc_start) {
  OpCheck c(*this, Op::attention);
  const DType dt = c.floats({{"out", out}, {"qkv", qkv}});
  c.stats(dt, {{"lse", lse}});
  const AttentionDims d = attention_dims(*this, c, qkv, n_head, n_kv_head);
  const int64_t C = n_head * d.hd;
  c.shapes(out.numel() == d.B * d.T * C && out.cols() == C && lse.numel() == d.B * n_head * d.T,
           {{"out", out}, {"lse", lse}, {"qkv", qkv}},
           attention_layout(d.n_kv_head != n_head, false));
  c.doc_starts({"doc_start", doc_start}, d.B, d.T);
  const OpTimer timer(*this, Op::attention);
  attention_impl(out, lse, qkv, n_head, d.n_kv_head, doc_start);
}

void Backend::attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                                 int n_head, int n_kv_head, Tensor doc_start, GradWrite write) {
  OpCheck c(*this, Op::attention_backward);
  const DType dt = c.floats({{"dqkv", dqkv}, {"dout", dout}, {"qkv", qkv}, {"out", out}});
  c.stats(dt, {{"lse", lse}});
  const AttentionDims d = attention_dims(*this, c, qkv, n_head, n_kv_head);
  const int64_t C = n_head * d.hd;
  c.shapes(dqkv.numel() == qkv.numel() && out.numel() == d.B * d.T * C && out.cols() == C &&
               dout.numel() == out.numel() && dout.cols() == C && lse.numel() == d.B * n_head * d.T,
           {{"dqkv", dqkv}, {"dout", dout}, {"qkv", qkv}, {"out", out}, {"lse", lse}},
           attention_layout(d.n_kv_head != n_head, true));
  c.doc_starts({"doc_start", doc_start}, d.B, d.T);
  const OpTimer timer(*this, Op::attention_backward);
  attention_backward_impl(dqkv, dout, qkv, out, lse, n_head, d.n_kv_head, doc_start, write);
}

namespace {

// rope's tensors: a and b of qkv's shape [B,T,(n_head+2*n_kv_head)*hd], hd even, theta > 0.
// Returns n_kv_head resolved (0 = n_head).
int rope_check(OpCheck& c, Named a, Named b, int n_head, int n_kv_head, float theta) {
  c.floats({a, b});
  const Tensor& t = a.t;
  c.shapes(t.ndim == 3 && b.t.ndim == 3 && b.t.dim(0) == t.dim(0) && b.t.dim(1) == t.dim(1) &&
               b.t.dim(2) == t.dim(2),
           {a, b}, "both [B,T,(n_head+2*n_kv_head)*hd]");
  const int nkv = n_kv_head == 0 ? n_head : n_kv_head;
  if (n_head <= 0 || nkv <= 0 || n_head % nkv != 0)
    c.fail(fmt::format("n_kv_head = {} does not divide n_head = {}", n_kv_head, n_head));
  const int64_t heads = n_head + 2 * int64_t{nkv};
  if (t.dim(2) % heads != 0 || (t.dim(2) / heads) % 2 != 0)
    c.fail(fmt::format("{} {}: width {} is not (n_head {} + 2 * n_kv_head {}) * hd with hd even",
                       a.name, t.shape_str(), t.dim(2), n_head, nkv));
  if (!(theta > 0.0f) || !std::isfinite(theta))
    c.fail(fmt::format("theta = {} must be a positive finite number", theta));
  return nkv;
}

}  // namespace

void Backend::rope(Tensor out, Tensor in, int n_head, int n_kv_head, float theta,
                   Tensor doc_start) {
  OpCheck c(*this, Op::rope);
  const int nkv = rope_check(c, {"out", out}, {"in", in}, n_head, n_kv_head, theta);
  c.doc_starts({"doc_start", doc_start}, in.dim(0), in.dim(1));
  const OpTimer timer(*this, Op::rope);
  rope_impl(out, in, n_head, nkv, theta, doc_start);
}

void Backend::rope_backward(Tensor din, Tensor dout, int n_head, int n_kv_head, float theta,
                            Tensor doc_start, GradWrite write) {
  OpCheck c(*this, Op::rope_backward);
  const int nkv = rope_check(c, {"din", din}, {"dout", dout}, n_head, n_kv_head, theta);
  c.doc_starts({"doc_start", doc_start}, din.dim(0), din.dim(1));
  c.require(write == GradWrite::overwrite || din.data != dout.data,
            "din is dout: in place needs GradWrite::overwrite (din += R^T din is no gradient)");
  const OpTimer timer(*this, Op::rope_backward);
  rope_backward_impl(din, dout, n_head, nkv, theta, doc_start, write);
}

// ---- gated MLP ----

void Backend::swiglu(Tensor out, Tensor in) {
  OpCheck c(*this, Op::swiglu);
  c.floats({{"out", out}, {"in", in}});
  c.shapes(in.cols() % 2 == 0 && out.cols() * 2 == in.cols() && out.numel() * 2 == in.numel(),
           {{"out", out}, {"in", in}}, "in [N,2H] = (gate | up), out [N,H]");
  const OpTimer timer(*this, Op::swiglu);
  swiglu_impl(out, in);
}

void Backend::swiglu_backward(Tensor din, Tensor dout, Tensor in, GradWrite write) {
  OpCheck c(*this, Op::swiglu_backward);
  c.floats({{"din", din}, {"dout", dout}, {"in", in}});
  c.shapes(in.cols() % 2 == 0 && din.numel() == in.numel() && din.cols() == in.cols() &&
               dout.cols() * 2 == in.cols() && dout.numel() * 2 == in.numel(),
           {{"din", din}, {"dout", dout}, {"in", in}}, "din like in [N,2H], dout [N,H]");
  const OpTimer timer(*this, Op::swiglu_backward);
  swiglu_backward_impl(din, dout, in, write);
}

// ---- embedding ----

void Backend::embedding(Tensor out, Tensor ids, Tensor table) {
  OpCheck c(*this, Op::embedding);
  c.floats({{"out", out}, {"table", table}});
  c.shapes(table.cols() == out.cols(), {{"out", out}, {"table", table}},
           "out [N,C] and table [V,C] of one row length");
  c.ids({"ids", ids}, out.rows(), table.rows());
  const OpTimer timer(*this, Op::embedding);
  embedding_impl(out, ids, table);
}

void Backend::embedding_backward(Tensor dtable, Tensor dout, Tensor ids) {
  OpCheck c(*this, Op::embedding_backward);
  c.param_grads(c.floats({{"dout", dout}}), {{"dtable", dtable}});
  c.shapes(dtable.cols() == dout.cols(), {{"dtable", dtable}, {"dout", dout}},
           "dout [N,C] and dtable [V,C] of one row length");
  c.ids({"ids", ids}, dout.rows(), dtable.rows());
  const OpTimer timer(*this, Op::embedding_backward);
  embedding_backward_impl(dtable, dout, ids);
}

// ---- loss ----

namespace {

// cross_entropy's checks (shared with the fused op): returns the logits' dtype.
DType check_cross_entropy(OpCheck& c, Tensor losses, Tensor lse, Tensor logits, Tensor targets) {
  const DType dt = c.floats({{"logits", logits}});
  c.stats(dt, {{"losses", losses}, {"lse", lse}});
  const int64_t N = logits.rows(), V = logits.cols();
  c.shapes(losses.numel() == N && lse.numel() == N,
           {{"losses", losses}, {"lse", lse}, {"logits", logits}},
           "losses [N], lse [N] for logits [N,V]");
  c.ids({"targets", targets}, N, V);
  return dt;
}

void check_dlogits(OpCheck& c, Tensor dlogits, Tensor logits) {
  c.floats({{"dlogits", dlogits}, {"logits", logits}});
  c.shapes(dlogits.numel() == logits.numel() && dlogits.cols() == logits.cols(),
           {{"dlogits", dlogits}, {"logits", logits}}, "dlogits like logits [N,V]");
}

}  // namespace

void Backend::cross_entropy(Tensor losses, Tensor lse, Tensor logits, Tensor targets) {
  OpCheck c(*this, Op::cross_entropy);
  check_cross_entropy(c, losses, lse, logits, targets);
  const OpTimer timer(*this, Op::cross_entropy);
  cross_entropy_impl(losses, lse, logits, targets);
}

void Backend::cross_entropy_backward(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                                     float scale) {
  OpCheck c(*this, Op::cross_entropy_backward);
  check_dlogits(c, dlogits, logits);
  const DType dt = logits.dtype;
  c.stats(dt, {{"lse", lse}});
  const int64_t N = logits.rows(), V = logits.cols();
  c.shapes(lse.numel() == N, {{"logits", logits}, {"lse", lse}}, "lse [N] for logits [N,V]");
  c.ids({"targets", targets}, N, V);
  const OpTimer timer(*this, Op::cross_entropy_backward);
  cross_entropy_backward_impl(dlogits, logits, lse, targets, scale);
}

void Backend::cross_entropy_fused(Tensor losses, Tensor lse, Tensor dlogits, Tensor logits,
                                  Tensor targets, float scale) {
  OpCheck c(*this, Op::cross_entropy);
  check_cross_entropy(c, losses, lse, logits, targets);
  check_dlogits(c, dlogits, logits);
  const OpTimer timer(*this, Op::cross_entropy);
  cross_entropy_fused_impl(losses, lse, dlogits, logits, targets, scale);
}

void Backend::cross_entropy_fused_impl(Tensor losses, Tensor lse, Tensor dlogits, Tensor logits,
                                       Tensor targets, float scale) {
  cross_entropy_impl(losses, lse, logits, targets);
  cross_entropy_backward_impl(dlogits, logits, lse, targets, scale);
}

// ---- reductions and optimizer ----

double Backend::sum(Tensor x) {
  OpCheck(*this, Op::sum).floats({{"x", x}});
  const OpTimer timer(*this, Op::sum);
  return sum_impl(x, false);
}

double Backend::sum_squares(Tensor x) {
  OpCheck(*this, Op::sum_squares).floats({{"x", x}});
  const OpTimer timer(*this, Op::sum_squares);
  return sum_impl(x, true);
}

void Backend::sum_to(Tensor out, Tensor x) {
  OpCheck c(*this, Op::sum);
  c.floats({{"x", x}});
  c.on_device({"out", out});
  c.shapes(out.dtype == DType::f64 && out.numel() == 1, {{"out", out}}, "out one f64 element");
  const OpTimer timer(*this, Op::sum);
  sum_to_impl(out, x);
}

void Backend::sum_to_impl(Tensor out, Tensor x) {
  double s = sum_impl(x, false);
  copy_impl(out, Tensor(&s, DType::f64, Device::cpu, {1}));
}

void Backend::adamw(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp) {
  pointwise(*this, Op::adamw, {{"param", param}, {"grad", grad}, {"m", m}, {"v", v}});
  if (hp.step < 1)
    OpCheck(*this, Op::adamw).fail(fmt::format("step is {}, must be >= 1 (1-based)", hp.step));
  const OpTimer timer(*this, Op::adamw);
  adamw_impl(param, grad, m, v, hp);
}

void Backend::adamw_runs(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp,
                         const std::vector<AdamWRun>& runs) {
  pointwise(*this, Op::adamw, {{"param", param}, {"grad", grad}, {"m", m}, {"v", v}});
  OpCheck c(*this, Op::adamw);
  if (hp.step < 1) c.fail(fmt::format("step is {}, must be >= 1 (1-based)", hp.step));
  int64_t end = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const AdamWRun& r = runs[i];
    if (r.begin < end || r.n < 0 || r.begin + r.n > param.numel())
      c.fail(fmt::format("run {} [{}, {}) is not sorted, disjoint and inside the {} elements", i,
                         r.begin, r.begin + r.n, param.numel()));
    end = r.begin + r.n;
  }
  const OpTimer timer(*this, Op::adamw);
  adamw_runs_impl(param, grad, m, v, hp, runs);
}

BackendRange::BackendRange(Backend& be, const char* name) : be_(be) {
  be_.range_push(name);
}

BackendRange::~BackendRange() {
  be_.range_pop();
}

DeviceBuffer::DeviceBuffer(Backend& be, size_t bytes) : be_(&be), p_(be.alloc(bytes)) {}

DeviceBuffer::~DeviceBuffer() {
  if (be_) be_->release(p_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : be_(o.be_), p_(o.p_) {
  o.be_ = nullptr;
  o.p_ = nullptr;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (be_) be_->release(p_);
    be_ = o.be_;
    p_ = o.p_;
    o.be_ = nullptr;
    o.p_ = nullptr;
  }
  return *this;
}

void Backend::adamw_runs_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp,
                              const std::vector<AdamWRun>& runs) {
  for (const AdamWRun& r : runs) {
    if (r.n == 0) continue;
    AdamWParams h = hp;
    if (!r.decay) h.weight_decay = 0.0f;
    adamw_impl(param.slice(r.begin, {r.n}), grad.slice(r.begin, {r.n}), m.slice(r.begin, {r.n}),
               v.slice(r.begin, {r.n}), h);
  }
}

}  // namespace trainrun
