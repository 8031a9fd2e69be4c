// The backend seam (include/trainrun/backend/backend.h): Backend's public op methods validate every
// call once, for every backend, and only then reach the backend's *_impl. Proven here with the CPU
// backend and a fake backend that records which implementations run: a wrong call is refused
// before any implementation code, with the same message on both; supports() and max_head_dim()
// are honoured; copy() routes raw copies and casts; token ids in host memory are range-checked
// for every backend, ids in device memory are left to the implementation, which words its error
// through fail_out_of_range_id exactly as the host check does.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "trainrun/backend/backend.h"
#include "trainrun/core/errors.h"

using namespace trainrun;

namespace {

// Records each *_impl it reaches; computes nothing. Its tensors may claim Device::cuda while
// pointing at host memory: nothing here dereferences them.
class FakeBackend final : public Backend {
 public:
  FakeBackend(Device d, std::set<DType> dtypes, int64_t max_hd = 0)
      : device_(d), dtypes_(std::move(dtypes)), max_hd_(max_hd) {}

  std::map<std::string, int> calls;
  bool cast_ok = false;
  std::function<void(Tensor)> on_embedding;  // what embedding_impl does besides recording

  Device device() const override { return device_; }
  std::string describe() const override { return "fake"; }
  bool supports(Op op, DType dt) const override {
    if (op == Op::copy || op == Op::fill) return true;
    if (op == Op::cast) return cast_ok && (dt == DType::f32 || dt == DType::bf16);
    return dtypes_.count(dt) > 0;
  }
  int64_t max_head_dim() const override { return max_hd_; }
  void* alloc(size_t) override { return nullptr; }
  void release(void*) override {}

 protected:
  void copy_impl(Tensor, Tensor) override { ++calls["copy"]; }
  void cast_impl(Tensor, Tensor) override { ++calls["cast"]; }
  void fill_impl(Tensor, double) override { ++calls["fill"]; }
  void matmul_impl(Tensor, Tensor, Tensor, Tensor) override { ++calls["matmul"]; }
  void matmul_backward_impl(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, GradWrite,
                            GradWrite) override {
    ++calls["matmul_backward"];
  }
  void layernorm_impl(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) override {
    ++calls["layernorm"];
  }
  void layernorm_backward_impl(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                               GradWrite) override {
    ++calls["layernorm_backward"];
  }
  void gelu_impl(Tensor, Tensor) override { ++calls["gelu"]; }
  void gelu_backward_impl(Tensor, Tensor, Tensor, GradWrite) override { ++calls["gelu_backward"]; }
  void relu_impl(Tensor, Tensor) override { ++calls["relu"]; }
  void relu_backward_impl(Tensor, Tensor, Tensor, GradWrite) override { ++calls["relu_backward"]; }
  void dropout_impl(Tensor, Tensor, float, uint64_t) override { ++calls["dropout"]; }
  void dropout_backward_impl(Tensor, Tensor, float, uint64_t) override {
    ++calls["dropout_backward"];
  }
  void add_impl(Tensor, Tensor, Tensor) override { ++calls["add"]; }
  void accumulate_impl(Tensor, Tensor) override { ++calls["accumulate"]; }
  void scale_impl(Tensor, double) override { ++calls["scale"]; }
  void attention_impl(Tensor, Tensor, Tensor, int, int, Tensor) override { ++calls["attention"]; }
  void attention_backward_impl(Tensor, Tensor, Tensor, Tensor, Tensor, int, int, Tensor,
                               GradWrite) override {
    ++calls["attention_backward"];
  }
  void rmsnorm_impl(Tensor, Tensor, Tensor, Tensor) override { ++calls["rmsnorm"]; }
  void rmsnorm_backward_impl(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, GradWrite) override {
    ++calls["rmsnorm_backward"];
  }
  void rope_impl(Tensor, Tensor, int, int, float, Tensor) override { ++calls["rope"]; }
  void rope_backward_impl(Tensor, Tensor, int, int, float, Tensor, GradWrite) override {
    ++calls["rope_backward"];
  }
  void swiglu_impl(Tensor, Tensor) override { ++calls["swiglu"]; }
  void swiglu_backward_impl(Tensor, Tensor, Tensor, GradWrite) override {
    ++calls["swiglu_backward"];
  }
  void embedding_impl(Tensor, Tensor ids, Tensor) override {
    ++calls["embedding"];
    if (on_embedding) on_embedding(ids);
  }
  void embedding_backward_impl(Tensor, Tensor, Tensor) override { ++calls["embedding_backward"]; }
  void cross_entropy_impl(Tensor, Tensor, Tensor, Tensor) override { ++calls["cross_entropy"]; }
  void cross_entropy_backward_impl(Tensor, Tensor, Tensor, Tensor, float) override {
    ++calls["cross_entropy_backward"];
  }
  double sum_impl(Tensor, bool) override {
    ++calls["sum"];
    return 0;
  }
  void adamw_impl(Tensor, Tensor, Tensor, Tensor, const AdamWParams&) override { ++calls["adamw"]; }

  // Device op timing, when device_timing: begin counts, end marks, report tells them in order
  // (op i from time i to i + 0.5).
  bool op_time_begin() override {
    if (device_timing) ++begun;
    return device_timing;
  }
  void op_time_end(Op op) override { marked.push_back(op); }
  void report_op_times_impl(OpObserver& o) override {
    for (size_t i = 0; i < marked.size(); ++i)
      o.op_done(marked[i], static_cast<double>(reported + i),
                static_cast<double>(reported + i) + 0.5, OpClock::device);
    reported += marked.size();
    marked.clear();
  }

 public:
  bool device_timing = false;
  int begun = 0;
  std::vector<Op> marked;
  size_t reported = 0;

 public:
  // Lets a test report a device-side bad id the way the CUDA backend does.
  [[noreturn]] static void report_bad_id(Op op, int64_t index, int64_t value, int64_t limit) {
    fail_out_of_range_id(op, "ids", index, value, limit);
  }

 private:
  Device device_;
  std::set<DType> dtypes_;
  int64_t max_hd_;
};

// Host memory for the tensors below, viewed with any dtype, shape and device: each view gets its
// own 2 KiB slot (16 in turn), so no two tensors of one call alias.
struct Mem {
  std::vector<double> f = std::vector<double>(16 * 256, 0.5);
  std::vector<int32_t> i = std::vector<int32_t>(64, 0);
  int next = 0;
  Tensor t(DType dt, std::initializer_list<int64_t> shape, Device dev = Device::cpu) {
    double* slot = f.data() + 256 * (next++ % 16);
    return Tensor(slot, dt, dev, shape);
  }
  Tensor ids(std::initializer_list<int64_t> shape, Device dev = Device::cpu) {
    return Tensor(i.data(), DType::i32, dev, shape);
  }
};

// An op observer that keeps what it is told.
struct OpLog : OpObserver {
  std::vector<Op> ops;
  std::vector<OpClock> clocks;
  bool ordered = true;  // every op's t0 <= t1, and no op starts before the previous one
  double last_t0 = -1e300;
  void op_done(Op op, double t0, double t1, OpClock clock) override {
    ops.push_back(op);
    clocks.push_back(clock);
    ordered = ordered && t0 <= t1 && t0 >= last_t0;
    last_t0 = t0;
  }
};

// The message `call` throws as E on `be`, or "" when it throws nothing.
template <class E>
std::string error_of(Backend& be, const std::function<void(Backend&)>& call) {
  try {
    call(be);
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a wrong call is refused before any implementation runs, in the same words everywhere") {
  Mem m;
  const DType f = DType::f32;
  auto cpu = make_cpu_backend();
  FakeBackend fake(Device::cpu, {DType::f32, DType::f64});
  const std::vector<std::pair<const char*, std::function<void(Backend&)>>> bad = {
      {"matmul",
       [&](Backend& b) {
         b.matmul(m.t(f, {6, 4}), m.t(f, {4, 6}), m.t(f, {4, 6}), {});
       }},
      {"matmul_backward",
       [&](Backend& b) {
         // din [6,4] has in's element count but not its shape [4,6]
         b.matmul_backward(m.t(f, {6, 4}), m.t(f, {4, 6}), {}, m.t(f, {4, 4}), m.t(f, {4, 6}),
                           m.t(f, {4, 6}));
       }},
      {"matmul_backward",  // neither din nor dw: nothing asked for
       [&](Backend& b) {
         b.matmul_backward({}, {}, {}, m.t(f, {4, 4}), m.t(f, {4, 6}), m.t(f, {4, 6}));
       }},
      {"matmul_backward",  // a bias gradient without its weight's
       [&](Backend& b) {
         b.matmul_backward(m.t(f, {4, 6}), {}, m.t(f, {4}), m.t(f, {4, 4}), m.t(f, {4, 6}),
                           m.t(f, {4, 6}));
       }},
      {"layernorm",
       [&](Backend& b) {
         b.layernorm(m.t(f, {4, 6}), m.t(f, {4}), m.t(f, {3}), m.t(f, {4, 6}), m.t(f, {6}),
                     m.t(f, {6}));
       }},
      {"layernorm",  // residual_layernorm: y [4,5] is not [4,6]
       [&](Backend& b) {
         b.residual_layernorm(m.t(f, {4, 6}), m.t(f, {4, 6}), m.t(f, {4}), m.t(f, {4}),
                              m.t(f, {4, 6}), m.t(f, {4, 5}), m.t(f, {6}), m.t(f, {6}));
       }},
      {"rmsnorm",  // residual_rmsnorm: rstd [3] for 4 rows
       [&](Backend& b) {
         b.residual_rmsnorm(m.t(f, {4, 6}), m.t(f, {4, 6}), m.t(f, {3}), m.t(f, {4, 6}),
                            m.t(f, {4, 6}), m.t(f, {6}));
       }},
      {"gelu",
       [&](Backend& b) {
         b.gelu(m.t(f, {24}), m.t(f, {4, 5}));
       }},
      {"add", [&](Backend& b) { b.add(m.t(f, {24}), m.t(f, {24}), m.t(DType::f64, {24})); }},
      {"dropout", [&](Backend& b) { b.dropout(m.t(f, {8}), m.t(f, {8}), 1.0f, 1); }},
      {"attention",
       [&](Backend& b) {
         b.attention(m.t(f, {1, 2, 4}), m.t(f, {1, 3, 2}), m.t(f, {1, 2, 12}), 3);
       }},
      {"embedding",
       [&](Backend& b) {
         b.embedding(m.t(f, {2, 4}), m.ids({3}), m.t(f, {6, 4}));
       }},
      {"cross_entropy",
       [&](Backend& b) {
         b.cross_entropy(m.t(f, {3}), m.t(f, {4}), m.t(f, {4, 6}), m.ids({4}));
       }},
      {"adamw",
       [&](Backend& b) {
         AdamWParams hp;
         hp.step = 0;
         b.adamw(m.t(f, {8}), m.t(f, {8}), m.t(f, {8}), m.t(f, {8}), hp);
       }},
      {"copy", [&](Backend& b) { b.copy(m.t(f, {24}), m.t(DType::f64, {24})); }},
  };
  for (const auto& entry : bad) {
    // Named copies, not structured bindings: clang 14 cannot capture those in the macro's lambda.
    const auto& op = entry.first;
    const auto& call = entry.second;
    CAPTURE(op);
    const std::string on_cpu = error_of<std::invalid_argument>(*cpu, call);
    const std::string on_fake = error_of<std::invalid_argument>(fake, call);
    CHECK(on_cpu.rfind(std::string(op) + ": ", 0) == 0);
    CHECK(on_fake == on_cpu);
  }
  CHECK(fake.calls.empty());
}

TEST_CASE("shape messages name every tensor, its shape and the expected layout") {
  Mem m;
  auto cpu = make_cpu_backend();
  const std::string e = error_of<std::invalid_argument>(*cpu, [&](Backend& b) {
    b.matmul(m.t(DType::f32, {6, 4}), m.t(DType::f32, {4, 6}), m.t(DType::f32, {4, 6}), {});
  });
  CHECK(e ==
        "matmul: out [6,4] in [4,6] w [4,6] bias none: expected out [N,OC] = in [N,C] . "
        "w [OC,C]^T + bias [OC]");
}

TEST_CASE("a valid call reaches the implementation exactly once") {
  Mem m;
  const DType f = DType::f32;
  FakeBackend fake(Device::cpu, {f});
  fake.matmul(m.t(f, {4, 4}), m.t(f, {4, 6}), m.t(f, {4, 6}), m.t(f, {4}));
  fake.gelu(m.t(f, {24}), m.t(f, {4, 6}));
  fake.attention(m.t(f, {1, 2, 4}), m.t(f, {1, 2, 2}), m.t(f, {1, 2, 12}), 2);
  CHECK(fake.sum(m.t(f, {5})) == 0.0);
  CHECK(fake.calls ==
        std::map<std::string, int>{{"matmul", 1}, {"gelu", 1}, {"attention", 1}, {"sum", 1}});
}

TEST_CASE("the residual norms default to add, then the norm, as one observed op") {
  OpLog log;
  Mem m;
  const DType f = DType::f32;
  FakeBackend fake(Device::cpu, {f});
  fake.set_op_observer(&log);
  fake.residual_layernorm(m.t(f, {4, 6}), m.t(f, {4, 6}), m.t(f, {4}), m.t(f, {4}), m.t(f, {4, 6}),
                          m.t(f, {4, 6}), m.t(f, {6}), m.t(f, {6}));
  fake.residual_rmsnorm(m.t(f, {4, 6}), m.t(f, {4, 6}), m.t(f, {4}), m.t(f, {4, 6}), m.t(f, {4, 6}),
                        m.t(f, {6}));
  CHECK(fake.calls == std::map<std::string, int>{{"add", 2}, {"layernorm", 1}, {"rmsnorm", 1}});
  CHECK(log.ops == std::vector<Op>{Op::layernorm, Op::rmsnorm});
}

TEST_CASE("an op observer is told every op that ran, once, and no refused call") {
  OpLog log;
  Mem m;
  const DType f = DType::f32;
  FakeBackend fake(Device::cpu, {f});
  fake.gelu(m.t(f, {24}), m.t(f, {4, 6}));  // before the observer: not told
  fake.set_op_observer(&log);
  fake.matmul(m.t(f, {4, 4}), m.t(f, {4, 6}), m.t(f, {4, 6}), m.t(f, {4}));
  fake.matmul_backward(m.t(f, {4, 6}), m.t(f, {4, 6}), {}, m.t(f, {4, 4}), m.t(f, {4, 6}),
                       m.t(f, {4, 6}), GradWrite::overwrite);
  CHECK(fake.sum_squares(m.t(f, {5})) == 0.0);
  CHECK_THROWS_AS(fake.gelu(m.t(f, {23}), m.t(f, {4, 6})), std::invalid_argument);
  fake.set_op_observer(nullptr);
  fake.relu(m.t(f, {24}), m.t(f, {4, 6}));  // after: not told
  CHECK(log.ops == std::vector<Op>{Op::matmul, Op::matmul_backward, Op::sum_squares});
  CHECK(log.ordered);
  CHECK(log.clocks == std::vector<OpClock>(3, OpClock::host));
}

TEST_CASE("device-timed ops reach the observer at report_op_times, in order, none that threw") {
  OpLog log;
  Mem m;
  const DType f = DType::f32;
  const Device d = Device::cuda;
  FakeBackend gpu(d, {f});
  gpu.device_timing = true;
  gpu.gelu(m.t(f, {24}, d), m.t(f, {4, 6}, d));  // unobserved: not timed at all
  CHECK(gpu.begun == 0);
  gpu.set_op_observer(&log);
  gpu.matmul(m.t(f, {4, 4}, d), m.t(f, {4, 6}, d), m.t(f, {4, 6}, d), {});
  gpu.on_embedding = [](Tensor) { FakeBackend::report_bad_id(Op::embedding, 1, 7, 6); };
  CHECK_THROWS_AS(gpu.embedding(m.t(f, {3, 4}, d), m.ids({3}, d), m.t(f, {6, 4}, d)), DataError);
  CHECK_THROWS_AS(gpu.gelu(m.t(f, {23}, d), m.t(f, {4, 6}, d)), std::invalid_argument);
  gpu.relu(m.t(f, {24}, d), m.t(f, {4, 6}, d));
  CHECK(log.ops.empty());  // nothing yet: the device's times come at the report
  CHECK(gpu.begun == 3);   // matmul, embedding (which threw), relu; the refused gelu never began
  gpu.report_op_times();
  CHECK(log.ops == std::vector<Op>{Op::matmul, Op::relu});
  gpu.add(m.t(f, {24}, d), m.t(f, {24}, d), m.t(f, {24}, d));
  gpu.set_op_observer(nullptr);  // reports the rest to the observer being replaced
  CHECK(log.ops == std::vector<Op>{Op::matmul, Op::relu, Op::add});
  CHECK(log.clocks == std::vector<OpClock>(3, OpClock::device));
  CHECK(log.ordered);
  gpu.report_op_times();  // no observer: nothing to tell, nothing marked
  CHECK(gpu.marked.empty());
}

TEST_CASE("supports() is the contract: an unsupported dtype is refused up front") {
  Mem m;
  FakeBackend fake(Device::cpu, {DType::f32});
  CHECK(fake.supports(Op::gelu, DType::f32));
  CHECK_FALSE(fake.supports(Op::gelu, DType::f64));
  const std::string e = error_of<std::invalid_argument>(
      fake, [&](Backend& b) { b.gelu(m.t(DType::f64, {4}), m.t(DType::f64, {4})); });
  CHECK(e == "gelu: the cpu backend does not compute it in f64 (see Backend::supports)");
  CHECK(fake.calls.empty());

  auto cpu = make_cpu_backend();
  CHECK(cpu->supports(Op::matmul, DType::f64));
  // The CPU computes bf16 as the mixed-precision reference, but AdamW only on f32 masters.
  CHECK(cpu->supports(Op::matmul, DType::bf16));
  CHECK(cpu->supports(Op::cast, DType::f32));
  CHECK_FALSE(cpu->supports(Op::adamw, DType::bf16));
  CHECK_THROWS_WITH_AS(cpu->adamw(m.t(DType::bf16, {4}), m.t(DType::bf16, {4}),
                                  m.t(DType::bf16, {4}), m.t(DType::bf16, {4}), AdamWParams{}),
                       doctest::Contains("does not compute it in bf16"), std::invalid_argument);
}

TEST_CASE("parameter gradients may be f32 under bf16 activations where the backend says so") {
  Mem m;
  const DType f = DType::f32, h = DType::bf16;
  FakeBackend fake(Device::cpu, {f, h});
  auto mixed = [&](Backend& b) {
    b.matmul_backward(m.t(h, {2, 3}), m.t(f, {4, 3}), m.t(f, {4}), m.t(h, {2, 4}), m.t(h, {2, 3}),
                      m.t(h, {4, 3}));
  };
  // Without f32_param_grads_with_bf16() the mixed call is refused before the implementation.
  CHECK(error_of<std::invalid_argument>(fake, mixed) ==
        "matmul_backward: dw [4,3] is f32 beside bf16 activations, which the cpu backend does "
        "not take (see Backend::f32_param_grads_with_bf16)");
  CHECK(fake.calls.empty());
  // f64 gradients beside bf16 activations, or gradients of two dtypes, are never taken.
  auto cpu = make_cpu_backend();
  CHECK_THROWS_WITH_AS(
      cpu->layernorm_backward(m.t(h, {2, 3}), m.t(DType::f64, {3}), m.t(DType::f64, {3}),
                              m.t(h, {2, 3}), m.t(h, {2, 3}), m.t(h, {3}), m.t(f, {2}),
                              m.t(f, {2})),
      doctest::Contains("parameter gradients take the activation dtype bf16 or f32"),
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(cpu->matmul_backward(m.t(h, {2, 3}), m.t(f, {4, 3}), m.t(h, {4}),
                                            m.t(h, {2, 4}), m.t(h, {2, 3}), m.t(h, {4, 3})),
                       doctest::Contains("must share one dtype"), std::invalid_argument);
  // bf16 activations with f32 gradients are fine on the CPU.
  CHECK_NOTHROW(cpu->embedding_backward(m.t(f, {6, 4}), m.t(h, {3, 4}), m.ids({3})));
}

TEST_CASE("tensors on another device are refused with a hint") {
  Mem m;
  FakeBackend gpu(Device::cuda, {DType::f32});
  const std::string e = error_of<std::invalid_argument>(gpu, [&](Backend& b) {
    b.accumulate(m.t(DType::f32, {4}, Device::cuda), m.t(DType::f32, {4}));
  });
  CHECK(e ==
        "accumulate: src [4] lives on cpu, but the cuda backend computes on cuda tensors (copy "
        "it with Backend::copy first)");
  CHECK(gpu.calls.empty());
}

TEST_CASE("ids in host memory are range-checked for every backend, in one wording") {
  Mem m;
  m.i = {0, 7, 1};
  auto cpu = make_cpu_backend();
  FakeBackend fake(Device::cpu, {DType::f32});
  auto call = [&](Backend& b) {
    b.embedding(m.t(DType::f32, {3, 4}), m.ids({3}), m.t(DType::f32, {6, 4}));
  };
  const std::string on_cpu = error_of<DataError>(*cpu, call);
  CHECK(on_cpu ==
        "embedding: ids[1] = 7 is outside [0, 6): the data holds a token the model's vocabulary "
        "does not (check vocab_size)");
  CHECK(error_of<DataError>(fake, call) == on_cpu);
  CHECK(fake.calls.empty());

  // Device ids cannot be read by the host: the implementation checks them and reports through
  // fail_out_of_range_id, which words the error exactly as the host check.
  FakeBackend gpu(Device::cuda, {DType::f32});
  gpu.on_embedding = [](Tensor) { FakeBackend::report_bad_id(Op::embedding, 1, 7, 6); };
  const std::string on_gpu = error_of<DataError>(gpu, [&](Backend& b) {
    b.embedding(m.t(DType::f32, {3, 4}, Device::cuda), m.ids({3}, Device::cuda),
                m.t(DType::f32, {6, 4}, Device::cuda));
  });
  CHECK(gpu.calls["embedding"] == 1);
  CHECK(on_gpu == on_cpu);
}

TEST_CASE("document starts: i32 [B,T], each in [0, t], checked before any implementation runs") {
  Mem m;
  FakeBackend fake(Device::cpu, {DType::f32});
  // qkv [1,3,6] (2 heads of hd 1), out [1,3,2], lse [1,2,3].
  auto attention = [&](Tensor starts) {
    return error_of<std::invalid_argument>(fake, [&](Backend& b) {
      b.attention(m.t(DType::f32, {1, 3, 2}), m.t(DType::f32, {1, 2, 3}),
                  m.t(DType::f32, {1, 3, 6}), 2, 0, starts);
    });
  };
  m.i = {0, 0, 2};
  CHECK(attention(m.ids({1, 3})).empty());
  CHECK(fake.calls["attention"] == 1);
  m.i = {0, 2, 2};  // position 1 cannot start after itself
  CHECK(attention(m.ids({1, 3})) ==
        "attention: doc_start[0, 1] = 2: a document start must lie in [0, 1] (the position itself "
        "or before it)");
  m.i = {0, 0, 0, 0};
  CHECK(attention(m.ids({4})) == "attention: doc_start [4] has 4 elements, expected B*T = 3");
  CHECK(attention(m.t(DType::f32, {1, 3})) ==
        "attention: doc_start must be an i32 tensor, got f32");
  m.i = {0, -1, 0};
  const std::string rope = error_of<std::invalid_argument>(fake, [&](Backend& b) {
    b.rope(m.t(DType::f32, {1, 3, 6}), m.t(DType::f32, {1, 3, 6}), 1, 1, 1e4f, m.ids({1, 3}));
  });
  CHECK(rope ==
        "rope: doc_start[0, 1] = -1: a document start must lie in [0, 1] (the position itself or "
        "before it)");
  CHECK(fake.calls["attention"] == 1);
  CHECK(fake.calls["rope"] == 0);
}

TEST_CASE("copy: raw bytes between host and device, a cast only where supported") {
  Mem m;
  FakeBackend gpu(Device::cuda, {DType::f32, DType::bf16});
  gpu.cast_ok = true;
  const Device d = Device::cuda;
  gpu.copy(m.t(DType::f32, {4}, d), m.t(DType::f32, {4}));      // upload
  gpu.copy(m.t(DType::f32, {2}), m.t(DType::bf16, {4}, d));     // equal bytes: raw
  gpu.copy(m.t(DType::bf16, {4}, d), m.t(DType::f32, {4}, d));  // cast on the device
  CHECK(gpu.calls == std::map<std::string, int>{{"copy", 2}, {"cast", 1}});
  // Unequal bytes and no cast possible (one side on the host): refused.
  CHECK_THROWS_WITH_AS(gpu.copy(m.t(DType::bf16, {4}, d), m.t(DType::f32, {4})),
                       doctest::Contains("differ in size"), std::invalid_argument);
  gpu.copy(m.t(DType::f32, {0}, d), m.t(DType::f32, {0}));  // nothing to copy
  CHECK(gpu.calls["copy"] == 2);

  FakeBackend cpu_like(Device::cpu, {DType::f32});
  CHECK_THROWS_WITH_AS(cpu_like.copy(m.t(DType::f32, {4}, d), m.t(DType::f32, {4})),
                       doctest::Contains("dst lives on cuda"), std::invalid_argument);
}

TEST_CASE("max_head_dim() bounds attention; saved statistics may be f32 under bf16") {
  Mem m;
  const DType f = DType::f32, h = DType::bf16;
  FakeBackend small(Device::cpu, {f, h}, 8);
  CHECK_THROWS_WITH_AS(
      small.attention(m.t(f, {1, 2, 32}), m.t(f, {1, 2, 2}), m.t(f, {1, 2, 96}), 2),
      doctest::Contains("head_dim 16 (C = 32 over 2 heads) exceeds the cpu backend's 8"),
      std::invalid_argument);
  small.attention(m.t(f, {1, 2, 16}), m.t(f, {1, 2, 2}), m.t(f, {1, 2, 48}), 2);
  CHECK(small.calls["attention"] == 1);

  small.layernorm(m.t(h, {4, 6}), m.t(f, {4}), m.t(f, {4}), m.t(h, {4, 6}), m.t(h, {6}),
                  m.t(h, {6}));
  small.layernorm(m.t(h, {4, 6}), m.t(h, {4}), m.t(h, {4}), m.t(h, {4, 6}), m.t(h, {6}),
                  m.t(h, {6}));
  CHECK(small.calls["layernorm"] == 2);
  CHECK_THROWS_WITH_AS(small.layernorm(m.t(h, {4, 6}), m.t(f, {4}), m.t(h, {4}), m.t(h, {4, 6}),
                                       m.t(h, {6}), m.t(h, {6})),
                       doctest::Contains("share one dtype"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(small.layernorm(m.t(f, {4, 6}), m.t(DType::f64, {4}), m.t(DType::f64, {4}),
                                       m.t(f, {4, 6}), m.t(f, {6}), m.t(f, {6})),
                       doctest::Contains("saved statistics take the activation dtype f32"),
                       std::invalid_argument);
}

TEST_CASE("fill of an empty tensor does nothing; op names are distinct") {
  FakeBackend fake(Device::cuda, {DType::f32});
  fake.fill(Tensor(), 1.0);
  CHECK(fake.calls.empty());
  std::set<std::string> names;
  for (int i = 0; i < kOpCount; ++i) names.insert(op_name(static_cast<Op>(i)));
  CHECK(names.size() == static_cast<size_t>(kOpCount));
  CHECK(names.count("?") == 0);
  CHECK(std::string(op_name(Op::cross_entropy_backward)) == "cross_entropy_backward");
}
