#include "runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "trainrun/core/bf16.h"
#include "trainrun/core/clock.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/rng.h"

namespace trainrun::backend_ops {

Tensor Args::operator[](std::string_view name) const {
  for (const auto& [n, t] : items_)
    if (n == name) return t;
  throw std::logic_error("backend_ops: the case has no tensor named " + std::string(name));
}

namespace {

// The reference computes bf16 tensors in f32, on the same (bf16-rounded) values.
DType ref_dtype(DType dt) {
  return dt == DType::bf16 ? DType::f32 : dt;
}

float round_to(DType dt, float v) {
  return dt == DType::bf16 ? round_to_bf16(v) : v;
}

void round_all(DType dt, std::vector<float>& v) {
  if (dt != DType::bf16) return;
  const int64_t n = static_cast<int64_t>(v.size());
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = round_to_bf16(v[size_t(i)]);
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor make_tensor(void* p, DType dt, Device dev, const std::vector<int64_t>& shape) {
  Tensor t;
  t.data = p;
  t.dtype = dt;
  t.device = dev;
  t.ndim = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.dims[i] = shape[i];
  return t;
}

// The starting values of one tensor (floats, or ids), from the case's seed.
struct HostValues {
  std::vector<float> f;
  std::vector<int32_t> ids;
};

// A boundary of row 0's forced documents near position `at`: never on a multiple of 32, so it
// falls inside a tile of the CUDA kernels (32 rows CUDA-core, 64 tensor-core).
int64_t inside_tile(int64_t at) {
  return at % 32 == 0 ? at + 1 : at;
}

// Document starts [B,T]: position 0 starts a document and position t > 0 a new one with
// probability 4/T (draw t of the row from the seed); row 0 also starts documents near T/4 and
// 5T/8, so it holds at least three with boundaries inside tiles whatever the draws, and, when T
// is long enough, at 63: a document whose first key is the last of a 64-key tile, so a block of
// queries from 64 must not skip that tile for its one key. Each value is the start of its
// position's document.
std::vector<int32_t> document_starts(int64_t B, int64_t T, uint64_t seed) {
  std::vector<int32_t> starts(static_cast<size_t>(B * T));
  const int64_t forced[3] = {inside_tile(std::max<int64_t>(1, T / 4)), inside_tile(T * 5 / 8),
                             T > 96 ? 63 : 0};
  for (int64_t b = 0; b < B; ++b) {
    int32_t start = 0;
    for (int64_t t = 0; t < T; ++t) {
      const bool drawn = splitmix64(seed + b * T + t) % uint64_t(T) < 4;
      const bool force = b == 0 && (t == forced[0] || t == forced[1] || t == forced[2]);
      if (t > 0 && (drawn || force)) start = static_cast<int32_t>(t);
      starts[size_t(b * T + t)] = start;
    }
  }
  return starts;
}

// Element i draws from splitmix64(seed + i) (what Rng(seed) gives as its i-th draw), so the
// GPT-2-sized tensors fill in parallel.
HostValues generate(const TensorSpec& s, uint64_t seed) {
  HostValues h;
  const int64_t n = s.shape.empty() ? 0 : numel(s.shape);
  if (s.role == Role::doc_starts) {
    if (n > 0) h.ids = document_starts(s.shape[0], s.shape[1], seed);
    return h;
  }
  if (s.role == Role::ids) {
    h.ids.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      h.ids[size_t(i)] =
          static_cast<int32_t>(s.id_base + splitmix64(seed + i) % uint64_t(s.id_limit));
    for (const auto& [pos, value] : s.bad_ids) h.ids[static_cast<size_t>(pos)] = value;
    return h;
  }
  const bool random = s.role == Role::input || s.role == Role::grad || s.role == Role::inout;
  h.f.resize(static_cast<size_t>(n));
  float* f = h.f.data();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(splitmix64(seed + i) >> 11) * 0x1.0p-53;  // [0, 1)
    f[i] = random ? round_to(s.dtype, s.lo + (s.hi - s.lo) * static_cast<float>(u)) : NAN;
  }
  const auto [first, last] = s.neg_inf_cols;
  if (last > first) {
    const int64_t cols = s.shape.back();
    for (int64_t row = 0; row < n / cols; ++row)
      for (int64_t c = first; c < last; ++c) f[row * cols + c] = -INFINITY;
  }
  return h;
}

// Element conversions between host floats and a tensor's dtype (f32 needs none).
void to_dtype(const float* in, DType dt, void* out, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    if (dt == DType::bf16)
      static_cast<uint16_t*>(out)[i] = bf16_from_f32(in[i]);
    else if (dt == DType::f64)
      static_cast<double*>(out)[i] = in[i];
    else
      static_cast<float*>(out)[i] = in[i];
  }
}

void from_dtype(const void* in, DType dt, float* out, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    if (dt == DType::bf16)
      out[i] = bf16_to_f32(static_cast<const uint16_t*>(in)[i]);
    else if (dt == DType::f64)
      out[i] = static_cast<float>(static_cast<const double*>(in)[i]);
    else
      out[i] = static_cast<const float*>(in)[i];
  }
}

// A case's tensors allocated on one backend; released on destruction.
class Bound {
 public:
  Bound(Backend& be, bool reference, const OpCase& c, const std::vector<HostValues>& host)
      : be_(be), reference_(reference), c_(c) {
    for (size_t i = 0; i < c.tensors.size(); ++i) {
      const TensorSpec& s = c.tensors[i];
      if (s.shape.empty()) {
        tensors_.push_back(Tensor());
        args_.add(s.name, Tensor());
        continue;
      }
      const DType dt = dtype(i);
      void* p = be.alloc(static_cast<size_t>(numel(s.shape)) * dtype_size(dt));
      buffers_.push_back(p);
      tensors_.push_back(make_tensor(p, dt, be.device(), s.shape));
      args_.add(s.name, tensors_.back());
      upload(i, host[i]);
    }
  }
  ~Bound() {
    for (void* p : buffers_) be_.release(p);
  }
  Bound(const Bound&) = delete;
  Bound& operator=(const Bound&) = delete;

  const Args& args() const { return args_; }
  DType dtype(size_t i) const {
    return reference_ ? ref_dtype(c_.tensors[i].dtype) : c_.tensors[i].dtype;
  }

  void upload(size_t i, const HostValues& h) {
    const Tensor& t = tensors_[i];
    if (t.empty()) return;
    const std::vector<int64_t>& shape = c_.tensors[i].shape;
    if (t.dtype == DType::i32) {
      be_.copy(t, make_tensor(const_cast<int32_t*>(h.ids.data()), DType::i32, Device::cpu, shape));
    } else if (t.dtype == DType::f32) {
      be_.copy(t, make_tensor(const_cast<float*>(h.f.data()), DType::f32, Device::cpu, shape));
    } else {
      std::vector<unsigned char> b(t.bytes());
      to_dtype(h.f.data(), t.dtype, b.data(), t.numel());
      be_.copy(t, make_tensor(b.data(), t.dtype, Device::cpu, shape));
    }
  }

  std::vector<float> download(size_t i) const {
    const Tensor& t = tensors_[i];
    const std::vector<int64_t>& shape = c_.tensors[i].shape;
    std::vector<float> v(static_cast<size_t>(t.numel()));
    if (t.dtype == DType::f32) {
      be_.copy(make_tensor(v.data(), DType::f32, Device::cpu, shape), t);
    } else {
      std::vector<unsigned char> b(t.bytes());
      be_.copy(make_tensor(b.data(), t.dtype, Device::cpu, shape), t);
      from_dtype(b.data(), t.dtype, v.data(), t.numel());
    }
    return v;
  }

 private:
  Backend& be_;
  bool reference_;
  const OpCase& c_;
  std::vector<void*> buffers_;
  std::vector<Tensor> tensors_;
  Args args_;
};

// max_i |x_i - ref_i| / (|ref_i| + rms(ref)): relative, with the tensor's RMS as the floor so
// values near zero do not dominate. Infinite when x has a NaN/Inf the reference does not.
double rel_err(const std::vector<float>& x, const std::vector<float>& ref) {
  const int64_t n = static_cast<int64_t>(ref.size());
  double ss = 0;
#pragma omp parallel for reduction(+ : ss)
  for (int64_t i = 0; i < n; ++i) ss += double(ref[i]) * ref[i];
  const double rms = n == 0 ? 0.0 : std::sqrt(ss / double(n));
  const double floor = rms > 0 ? rms : 1e-30;
  double worst = 0;
#pragma omp parallel for reduction(max : worst)
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::isfinite(x[i]) && std::isfinite(ref[i])
                         ? std::fabs(double(x[i]) - ref[i]) / (std::fabs(double(ref[i])) + floor)
                         : INFINITY;
    worst = std::max(worst, e);
  }
  return worst;
}

bool compared(Role r) {
  return r == Role::output || r == Role::grad || r == Role::inout;
}

std::vector<HostValues> generate_all(const OpCase& c) {
  std::vector<HostValues> host;
  for (size_t i = 0; i < c.tensors.size(); ++i)
    host.push_back(generate(c.tensors[i], hash_combine(c.seed, i)));
  return host;
}

// Runs prepare() on the reference and hands its derived tensors, rounded to their dtype, to both.
void prepare_derived(const OpCase& c, Backend& ref, Bound& rb, Bound& tb) {
  if (!c.prepare) return;
  c.prepare(ref, rb.args());
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    if (c.tensors[i].role != Role::derived) continue;
    HostValues h;
    h.f = rb.download(i);
    round_all(c.tensors[i].dtype, h.f);
    rb.upload(i, h);
    tb.upload(i, h);
  }
}

}  // namespace

bool Runner::supported(const OpCase& c) const {
  if (c.op == Op::cast)
    return test_.supports(Op::cast, DType::f32) && test_.supports(Op::cast, DType::bf16);
  return test_.supports(c.op, c.dtype);
}

Outcome Runner::run(const OpCase& c) {
  Outcome o;
  if (!supported(c)) {
    o.status = Outcome::unsupported;
    return o;
  }
  if (c.expect != Expect::match) return run_error_case(c);
  const std::vector<HostValues> host = generate_all(c);
  Bound rb(ref_, true, c, host), tb(test_, false, c, host);
  try {
    prepare_derived(c, ref_, rb, tb);
    const double ref_result = c.call(ref_, rb.args());
    const double result = c.call(test_, tb.args());
    if (c.result_scale > 0)
      o.err = std::fabs(result - ref_result) / (std::fabs(ref_result) + c.result_scale);
    if (!std::isfinite(result)) o.err = INFINITY;
    std::vector<std::vector<float>> first(c.tensors.size());
    for (size_t i = 0; i < c.tensors.size(); ++i) {
      const TensorSpec& s = c.tensors[i];
      if (!compared(s.role) || s.shape.empty()) continue;
      std::vector<float> r = rb.download(i);
      round_all(s.dtype, r);
      first[i] = tb.download(i);
      o.err = std::max(o.err, rel_err(first[i], r));
    }
    // Accumulate, never overwrite: a second call adds the same contribution, x2 = 2 x1 - x0.
    // An output beside them (an overwritten input gradient) must come out the same again.
    bool has_grads = false;
    for (const TensorSpec& s : c.tensors) has_grads |= s.role == Role::grad && !s.shape.empty();
    if (has_grads) {
      c.call(test_, tb.args());
      for (size_t i = 0; i < c.tensors.size(); ++i) {
        const TensorSpec& s = c.tensors[i];
        if (s.shape.empty()) continue;
        if (s.role == Role::output) {
          o.acc_err = std::max(o.acc_err, rel_err(tb.download(i), first[i]));
          continue;
        }
        if (s.role != Role::grad) continue;
        std::vector<float> expect(first[i].size());
        for (size_t k = 0; k < expect.size(); ++k)
          expect[k] = round_to(s.dtype, static_cast<float>(2.0 * first[i][k] - host[i].f[k]));
        o.acc_err = std::max(o.acc_err, rel_err(tb.download(i), expect));
      }
    }
    if (timing_) o.ms = time_call(c, tb.args());
  } catch (const std::exception& e) {
    o.status = Outcome::fail;
    o.note = std::string("threw: ") + e.what();
    return o;
  }
  const bool ok = o.err <= c.tol && o.acc_err <= std::max(c.tol, 1e-6);
  o.status = ok ? Outcome::pass : Outcome::fail;
  if (!(o.err <= c.tol)) o.note = "outputs differ from the reference";
  if (!(o.acc_err <= std::max(c.tol, 1e-6)))
    o.note += " a second call did not accumulate (or did not overwrite its output)";
  return o;
}

Outcome Runner::run_error_case(const OpCase& c) {
  const std::vector<HostValues> host = generate_all(c);
  Bound rb(ref_, true, c, host), tb(test_, false, c, host);
  auto message = [&](Backend& be, const Args& args) -> std::string {
    try {
      c.call(be, args);
      // A device backend may raise a bad token id at its next synchronisation point instead of
      // in the op (backend.h): the contract is that it is raised by then.
      be.synchronize();
    } catch (const DataError& e) {
      return c.expect == Expect::data_error ? e.what() : std::string("DataError: ") + e.what();
    } catch (const std::invalid_argument& e) {
      return c.expect == Expect::invalid_argument ? e.what()
                                                  : std::string("invalid_argument: ") + e.what();
    } catch (const std::exception& e) {
      return std::string("unexpected exception: ") + e.what();
    }
    return "no exception";
  };
  Outcome o;
  const std::string want = message(ref_, rb.args()), got = message(test_, tb.args());
  const bool ok = want == got && want != "no exception";
  o.status = ok ? Outcome::pass : Outcome::fail;
  o.note = ok ? want : "reference: " + want + " | under test: " + got;
  return o;
}

// Mean seconds per call after the checks' calls warmed it up: enough calls for ~50 ms.
double Runner::time_call(const OpCase& c, const Args& args) {
  test_.synchronize();
  double t0 = now();
  c.call(test_, args);
  test_.synchronize();
  const double once = now() - t0;
  const int reps = static_cast<int>(std::clamp(0.05 / std::max(once, 1e-7), 1.0, 200.0));
  t0 = now();
  for (int i = 0; i < reps; ++i) c.call(test_, args);
  test_.synchronize();
  return (now() - t0) / reps * 1e3;
}

}  // namespace trainrun::backend_ops
