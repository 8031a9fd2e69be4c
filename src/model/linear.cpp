#include "trainrun/model/linear.h"

#include <memory>
#include <stdexcept>

#include "trainrun/comm/comm.h"

namespace trainrun {

Linear::Linear(ParamStore& ps, const std::string& name, int in, int out, bool bias, float init_std,
               bool decay, LinearTp tp)
    : ps_(ps), in_(in), out_(out), mode_(ps.tp().size > 1 ? tp.mode : TpMode::none) {
  const TpSplit weight = tp.mode == TpMode::column ? TpSplit::rows(tp.blocks)
                         : tp.mode == TpMode::row  ? TpSplit::cols()
                                                   : TpSplit{};
  w_ = ps.declare(name + ".weight", {out, in}, Init::normal, init_std, decay, weight);
  if (bias)
    b_ = ps.declare(name + ".bias", {out}, Init::zeros, 0.0f, false,
                    tp.mode == TpMode::column ? TpSplit::rows(tp.blocks) : TpSplit{});
  const std::vector<int64_t>& local = ps.infos()[static_cast<size_t>(w_)].shape;
  out_ = static_cast<int>(local[0]);
  in_ = static_cast<int>(local[1]);
}

Tensor Linear::bias_here() const {
  // A row-parallel layer's bias is whole on every rank: the all-reduce must add it once.
  if (b_ < 0 || (mode_ == TpMode::row && ps_.tp().rank != 0)) return Tensor{};
  return ps_.param(b_);
}

void Linear::forward(Tensor out, Tensor in) const {
  ps_.backend().matmul(out, in, ps_.param(w_), bias_here());
  if (mode_ == TpMode::row) ps_.tp().comm->allreduce_sum(out);
}

void Linear::forward_gelu(Tensor out, Tensor pre, Tensor in) const {
  if (mode_ == TpMode::row)
    throw std::logic_error("Linear::forward_gelu: a row-parallel layer's output is partial");
  ps_.backend().matmul_gelu(out, pre, in, ps_.param(w_), bias_here());
}

GradWrite Linear::param_write() const {
  const GradWrite pw = ps_.grad_write(w_);  // the bias is written with the weight, always
  if (b_ >= 0 && ps_.grad_write(b_) != pw)
    throw std::logic_error("Linear::backward: weight and bias gradients out of step");
  return pw;
}

void Linear::backward(Tensor din, Tensor dout, Tensor in, GradWrite write) const {
  const bool sum_din = mode_ == TpMode::column && !din.empty();
  if (sum_din && write != GradWrite::overwrite)
    throw std::logic_error("Linear::backward: a column-parallel layer overwrites its din");
  const Tensor dw = ps_.grad(w_), db = b_ >= 0 ? ps_.grad(b_) : Tensor{};
  if (sum_din)
    matmul_backward_tp_sum(ps_.tp(), ps_.backend(), din, dw, db, dout, in, ps_.param(w_), write,
                           param_write());
  else
    ps_.backend().matmul_backward(din, dw, db, dout, in, ps_.param(w_), write, param_write());
}

void matmul_backward_tp_sum(const TensorParallel& tp, Backend& be, Tensor din, Tensor dw,
                            Tensor dbias, Tensor dout, Tensor in, Tensor w, GradWrite write,
                            GradWrite param_write) {
  if (!tp.overlap) {
    be.matmul_backward(din, dw, dbias, dout, in, w, write, param_write);
    tp.comm->allreduce_sum(din);
    return;
  }
  // The input gradient first, so its all-reduce runs while the weight gradient is computed
  // (Megatron's overlap of the tp all-reduce with the wgrad GEMM). The two GEMMs are the ones a
  // single call makes, in the other order: the same bits.
  be.matmul_backward(din, Tensor{}, Tensor{}, dout, in, w, write);
  const std::unique_ptr<Communicator::Request> sum = tp.comm->iallreduce_sum(din);
  be.matmul_backward(Tensor{}, dw, dbias, dout, in, w, write, param_write);
  sum->wait();
}

void Linear::backward_gelu(Tensor dpre, Tensor dout, Tensor in, Tensor pre) const {
  ps_.backend().matmul_backward_gelu(dpre, ps_.grad(w_), b_ >= 0 ? ps_.grad(b_) : Tensor{}, dout,
                                     in, ps_.param(w_), pre, param_write());
}

}  // namespace trainrun
