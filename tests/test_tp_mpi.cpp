// The tensor-parallel modules on 2 MPI ranks (tests/meson.build runs this under mpirun -np 2),
// in double precision: each sharded module (attention with and without grouped-query heads,
// RoPE and documents, both MLPs, both blocks with dropout) is checked by finite differences of
// the loss every rank computes, perturbing each sampled element of a split parameter on the rank
// that holds it; and against the same module on one rank (whose own finite-difference checks
// are test_modules.cpp's): the same output, input gradient, and every parameter gradient at its
// global position. Plain checks, not doctest: every rank must run every collective.
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../src/model/classifier_loss.h"
#include "trainrun/backend/backend.h"
#include "trainrun/comm/comm.h"
#include "trainrun/core/no_id.h"
#include "trainrun/core/shard.h"
#include "trainrun/model/attention.h"
#include "trainrun/model/block.h"
#include "trainrun/model/llama_block.h"
#include "trainrun/model/mlp.h"
#include "trainrun/model/swiglu_mlp.h"

namespace {

using namespace trainrun;

int failures = 0;

void check(bool ok, int rank, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
}

bool close(double a, double b, double rel, double abs_tol) {
  return std::fabs(a - b) <= abs_tol + rel * std::max(std::fabs(a), std::fabs(b));
}

// A module under test, built over a store: its arenas' binding and its two passes.
struct Module {
  std::shared_ptr<void> keep;  // the module itself
  std::function<void(Arena& acts, Arena& scratch)> bind;
  std::function<void(Tensor out, Tensor in)> forward;
  // din = d(loss)/d(in) for d(loss)/d(out) = dout (din overwritten).
  std::function<void(Tensor din, Tensor dout, Tensor in)> backward;
};
using Make = std::function<Module(ParamStore&)>;

// A built module with its store and arenas.
struct Built {
  std::unique_ptr<ParamStore> ps;
  std::unique_ptr<Arena> acts, scratch;
  Module m;
  Built(Backend& be, TensorParallel tp, const Make& make) {
    ps = std::make_unique<ParamStore>(be, DType::f64, ParamStorage::flat, tp);
    acts = std::make_unique<Arena>(be);
    scratch = std::make_unique<Arena>(be);
    m = make(*ps);
    ps->allocate();
    ps->initialize(2024);  // each rank draws its slice at its global positions
    m.bind(*acts, *scratch);
    acts->allocate();
    scratch->allocate();
    acts->restart();
    scratch->restart();
    m.bind(*acts, *scratch);
  }
};

Tensor view(std::vector<double>& v, int64_t rows, int64_t cols) {
  return Tensor(v.data(), DType::f64, Device::cpu, {rows, cols});
}

// Where global flat element g of `e` is held here: its local flat index, or -1.
int64_t local_index(const ParamEntry& e, int64_t g) {
  if (e.pieces.empty()) return g;
  const std::vector<int64_t>& shape = e.global();
  std::vector<int64_t> at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    at[d] = g % shape[d];
    g /= shape[d];
  }
  int64_t first = 0;
  for (const Box& b : e.pieces) {
    bool inside = true;
    int64_t within = 0;
    for (size_t d = 0; d < at.size(); ++d) {
      inside = inside && at[d] >= b.offsets[d] && at[d] < b.offsets[d] + b.sizes[d];
      within = within * b.sizes[d] + (at[d] - b.offsets[d]);
    }
    if (inside) return first + within;
    first += box_numel(b);
  }
  return -1;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

void check_module(Communicator& comm, const std::string& name, int64_t rows, int64_t width,
                  const Make& make) {
  const int rank = comm.rank();
  const auto be = make_cpu_backend();
  Built tp(*be, TensorParallel{comm.size(), rank, &comm}, make);
  Built one(*be, TensorParallel{}, make);
  std::mt19937_64 g(7);  // the same draws on every rank
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> in(static_cast<size_t>(rows * width)), r(in.size()), out(in.size()),
      out1(in.size()), din(in.size()), din1(in.size());
  for (double& x : in) x = u(g);
  for (double& x : r) x = u(g);
  auto loss = [&] {
    tp.m.forward(view(out, rows, width), view(in, rows, width));
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * r[i];
    return s;
  };
  loss();
  one.m.forward(view(out1, rows, width), view(in, rows, width));
  bool same = true;
  for (size_t i = 0; i < out.size(); ++i) same = same && close(out[i], out1[i], 1e-10, 1e-12);
  check(same, rank, name + ": the output equals one rank's");
  tp.m.backward(view(din, rows, width), view(r, rows, width), view(in, rows, width));
  one.m.backward(view(din1, rows, width), view(r, rows, width), view(in, rows, width));
  same = true;
  for (size_t i = 0; i < din.size(); ++i) same = same && close(din[i], din1[i], 1e-10, 1e-12);
  check(same, rank, name + ": the input gradient equals one rank's");
  {
    // Without the overlap (the input gradient's all-reduce after the weight-gradient GEMM, not
    // during it): the same GEMMs and sums, so the same bits.
    Built serial(*be, TensorParallel{comm.size(), rank, &comm, /*overlap=*/false}, make);
    std::vector<double> out_s(in.size()), din_s(in.size());
    serial.m.forward(view(out_s, rows, width), view(in, rows, width));
    serial.m.backward(view(din_s, rows, width), view(r, rows, width), view(in, rows, width));
    bool bits = din_s == din;
    for (size_t i = 0; i < serial.ps->entries().size(); ++i) {
      const Tensor a = serial.ps->grad(static_cast<int>(i)), b = tp.ps->grad(static_cast<int>(i));
      for (int64_t k = 0; k < a.numel(); ++k) bits = bits && a.as<double>()[k] == b.as<double>()[k];
    }
    check(bits, rank, name + ": the gradients without the overlap are the same bits");
  }

  const std::vector<ParamEntry> entries = tp.ps->entries();
  int split = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const ParamEntry& e = entries[i];
    split += e.pieces.empty() ? 0 : 1;
    const double* grad = tp.ps->grad(static_cast<int>(i)).as<double>();
    const double* grad1 = one.ps->grad(static_cast<int>(i)).as<double>();
    // Every element this rank holds: its gradient is one rank's at that global position.
    bool match = true;
    for (int64_t k = 0, n = numel(e.global()); k < n; ++k)
      if (const int64_t at = local_index(e, k); at >= 0)
        match = match && close(grad[at], grad1[k], 1e-9, 1e-12);
    check(match, rank, name + ": " + e.name + "'s gradient equals one rank's at its slice");
    // Finite differences of the loss every rank computes, the element perturbed where it is.
    double* value = tp.ps->param(static_cast<int>(i)).as<double>();
    for (int sample = 0; sample < 6; ++sample) {
      const int64_t k = static_cast<int64_t>(g() % static_cast<uint64_t>(numel(e.global())));
      const int64_t at = local_index(e, k);
      constexpr double h = 1e-5;
      const double v = at >= 0 ? value[at] : 0;
      if (at >= 0) value[at] = v + h;
      const double plus = loss();
      if (at >= 0) value[at] = v - h;
      const double minus = loss();
      if (at >= 0) value[at] = v;
      if (at >= 0)
        check(close((plus - minus) / (2 * h), grad[at], 1e-5, 1e-7), rank,
              name + ": finite differences of " + e.name + " at " + std::to_string(k));
    }
  }
  check(split > 0, rank, name + ": some parameter is split over the ranks");
  for (int sample = 0; sample < 8; ++sample) {  // the input, whole on every rank
    const auto k = static_cast<size_t>(g() % in.size());
    constexpr double h = 1e-5;
    const double v = in[k];
    in[k] = v + h;
    const double plus = loss();
    in[k] = v - h;
    const double minus = loss();
    in[k] = v;
    check(close((plus - minus) / (2 * h), din[k], 1e-5, 1e-7), rank,
          name + ": finite differences of the input at " + std::to_string(k));
  }
}

// The vocabulary-parallel cross-entropy (classifier_loss.h) against the whole one: each rank
// holds shard_of(V) of the logits' columns and its targets (kNoId for another rank's); the loss
// sum, every row's lse and every rank's columns of the gradient equal one rank's.
void check_vocab_parallel_loss(Communicator& comm, int64_t N, int64_t V) {
  const int rank = comm.rank();
  const std::string name =
      "vocabulary-parallel cross-entropy N=" + std::to_string(N) + " V=" + std::to_string(V);
  const auto be = make_cpu_backend();
  std::mt19937_64 g(11);
  std::uniform_real_distribution<double> u(-4, 4);
  std::vector<double> whole(static_cast<size_t>(N * V));
  for (double& x : whole) x = u(g);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int32_t& t : targets) t = static_cast<int32_t>(g() % static_cast<uint64_t>(V));
  const Shard part = shard_of(V, comm.size(), rank);
  std::vector<double> mine(static_cast<size_t>(N * part.size()));
  std::vector<int32_t> my_targets(targets.size());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = 0; v < part.size(); ++v)
      mine[static_cast<size_t>(n * part.size() + v)] =
          whole[static_cast<size_t>(n * V + part.begin + v)];
    const int32_t t = targets[static_cast<size_t>(n)];
    my_targets[static_cast<size_t>(n)] =
        t >= part.begin && t < part.end ? static_cast<int32_t>(t - part.begin) : kNoId;
  }
  // The loss sum; the gradient (scale 0.5) overwrites the logits.
  auto run = [&](std::vector<double>& logits, std::vector<int32_t>& tgt, int64_t cols,
                 TensorParallel tp) {
    Arena acts(*be);
    ClassifierLoss loss;
    for (int pass = 0; pass < 2; ++pass) {
      acts.restart();
      loss.bind(acts, N, DType::f64, tp);
      if (pass == 0) acts.allocate();
    }
    double sum = 0;
    const Tensor x(logits.data(), DType::f64, Device::cpu, {N, cols});
    const Tensor t(tgt.data(), DType::i32, Device::cpu, {N});
    loss.forward(*be, x, t, Tensor(&sum, DType::f64, Device::cpu, {1}), 0.0f);
    loss.backward(*be, x, t, 0.5f);
    return sum;
  };
  const double one = run(whole, targets, V, TensorParallel{});
  const double tp = run(mine, my_targets, part.size(), TensorParallel{comm.size(), rank, &comm});
  check(close(tp, one, 1e-12, 1e-12), rank, name + ": the loss sum equals one rank's");
  bool same = true;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < part.size(); ++v)
      same = same && close(mine[static_cast<size_t>(n * part.size() + v)],
                           whole[static_cast<size_t>(n * V + part.begin + v)], 1e-12, 1e-14);
  check(same, rank, name + ": this rank's columns of the gradient equal one rank's");
}

const Tensor kOneDocument;

template <class M>
Module module(std::shared_ptr<M> m, std::function<void(M&, Arena&, Arena&)> bind) {
  Module out;
  out.keep = m;
  out.bind = [m, bind](Arena& a, Arena& s) { bind(*m, a, s); };
  out.forward = [m](Tensor o, Tensor i) { m->forward(o, i); };
  out.backward = [m](Tensor d, Tensor dout, Tensor i) {
    m->backward(d, dout, i, GradWrite::overwrite);
  };
  return out;
}

// A block: its backward turns the stream's gradient into d(in) in place.
template <class B>
Module block(std::shared_ptr<B> b, Backend& be, int64_t batch, int64_t seq, float dropout) {
  Module out;
  out.keep = b;
  out.bind = [b, batch, seq](Arena& a, Arena& s) {
    b->bind_kept(a, batch * seq);
    b->bind({a, a}, s, batch, seq, &kOneDocument);
  };
  out.forward = [b, dropout](Tensor o, Tensor i) { b->forward(o, i, dropout, 7); };
  out.backward = [b, &be, dropout](Tensor d, Tensor dout, Tensor i) {
    be.copy(d, dout);
    b->backward(d, i, dropout, 7);
  };
  return out;
}

}  // namespace

int main() {
  auto comm = make_mpi_communicator();
  const int B = 2, T = 5;
  // Row 0: documents [0,2) and [2,5); row 1: [0,1), [1,4) and [4,5).
  static std::vector<int32_t> starts = {0, 0, 2, 2, 2, 0, 1, 1, 1, 4};
  static const Tensor docs(starts.data(), DType::i32, Device::cpu, {B, T});
  auto attention = [&](int nh, int nkv, bool bias, bool rope, const Tensor* doc) {
    return [=](ParamStore& ps) {
      auto a = std::make_shared<CausalSelfAttention>(
          ps, "attn", 16, nh, 0.02f,
          AttentionOptions{.n_kv_head = nkv, .bias = bias, .rope = rope, .rope_theta = 100.0f});
      return module<CausalSelfAttention>(
          a, [doc](CausalSelfAttention& m, Arena& x, Arena& s) { m.bind(x, s, B, T, doc); });
    };
  };
  check_module(*comm, "attention (gpt: 4 heads, biases)", B * T, 16,
               attention(4, 4, true, false, &kOneDocument));
  check_module(*comm, "attention (4 heads, 2 kv heads, RoPE, documents)", B * T, 16,
               attention(4, 2, false, true, &docs));
  check_module(*comm, "attention (4 heads, 4 kv heads, RoPE)", B * T, 16,
               attention(4, 4, false, true, &kOneDocument));
  check_module(*comm, "MLP", B * T, 8, [](ParamStore& ps) {
    return module<MLP>(std::make_shared<MLP>(ps, "mlp", 8, 0.02f),
                       [](MLP& m, Arena& a, Arena& s) { m.bind(a, s, B * T); });
  });
  check_module(*comm, "SwiGluMLP", B * T, 8, [](ParamStore& ps) {
    return module<SwiGluMLP>(std::make_shared<SwiGluMLP>(ps, "mlp", 8, 6, 0.02f),
                             [](SwiGluMLP& m, Arena& a, Arena& s) { m.bind(a, s, B * T); });
  });
  for (float p : {0.0f, 0.3f}) {
    const std::string drop = p > 0 ? " with dropout" : "";
    check_module(*comm, "TransformerBlock" + drop, B * T, 8, [p](ParamStore& ps) {
      return block(std::make_shared<TransformerBlock>(ps, "blk", 8, 2, 2), ps.backend(), B, T, p);
    });
    check_module(*comm, "LlamaBlock (GQA)" + drop, B * T, 8, [p](ParamStore& ps) {
      ModelConfig cfg;
      cfg.d_model = 8;
      cfg.n_head = 4;
      cfg.n_kv_head = 2;
      cfg.ffn_hidden = 12;
      cfg.n_layer = 2;
      return block(std::make_shared<LlamaBlock>(ps, "blk", cfg), ps.backend(), B, T, p);
    });
  }
  for (const auto& [n, v] : {std::pair<int64_t, int64_t>{1, 37}, {6, 37}, {5, 64}})
    check_vocab_parallel_loss(*comm, n, v);
  double total = failures;
  comm->allreduce_sum(Tensor(&total, DType::f64, Device::cpu, {1}));
  if (comm->rank() == 0)
    std::printf("tensor-parallel module checks on %d ranks: %s\n", comm->size(),
                total == 0 ? "passed" : "FAILED");
  return total == 0 ? 0 : 1;
}
