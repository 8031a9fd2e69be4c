#include "op_check.h"

#include <fmt/format.h>

#include <stdexcept>

#include "trainrun/core/errors.h"
#include "trainrun/core/no_id.h"

namespace trainrun {

DataError out_of_range_id(Op op, const char* name, int64_t index, int64_t value, int64_t limit) {
  return DataError(
      fmt::format("{}: {}[{}] = {} is outside [0, {}): the data holds a token the "
                  "model's vocabulary does not (check vocab_size)",
                  op_name(op), name, index, value, limit));
}

std::string describe_shapes(std::initializer_list<Named> ts) {
  std::string s;
  for (const Named& n : ts) {
    if (!s.empty()) s += ' ';
    s += n.name;
    s += ' ';
    s += n.t.empty() ? std::string("none") : n.t.shape_str();
  }
  return s;
}

void OpCheck::fail(const std::string& what) const {
  throw std::invalid_argument(fmt::format("{}: {}", op_name(op_), what));
}

void OpCheck::require(bool ok, const char* what) const {
  if (!ok) fail(what);
}

void OpCheck::present(const Named& n) const {
  if (n.t.empty()) fail(fmt::format("{} is empty (null data)", n.name));
}

void OpCheck::on_device(const Named& n) const {
  const Device d = be_.device();
  if (n.t.device != d)
    fail(fmt::format(
        "{} {} lives on {}, but the {} backend computes on {} tensors (copy it with "
        "Backend::copy first)",
        n.name, n.t.shape_str(), device_name(n.t.device), device_name(d), device_name(d)));
}

DType OpCheck::floats(std::initializer_list<Named> required,
                      std::initializer_list<Named> optional) {
  const Named* first = nullptr;
  auto visit = [&](const Named& n) {
    on_device(n);
    if (n.t.dtype == DType::i32)
      fail(fmt::format("{} {} has dtype i32, expected a float tensor", n.name, n.t.shape_str()));
    if (!first) {
      first = &n;
    } else if (n.t.dtype != first->t.dtype) {
      fail(fmt::format("mixed dtypes {} ({}) and {} ({})", dtype_name(first->t.dtype), first->name,
                       dtype_name(n.t.dtype), n.name));
    }
  };
  for (const Named& n : required) {
    present(n);
    visit(n);
  }
  for (const Named& n : optional)
    if (!n.t.empty()) visit(n);
  if (!first) fail("no tensors given");
  const DType dt = first->t.dtype;
  if (!be_.supports(op_, dt))
    fail(fmt::format("the {} backend does not compute it in {} (see Backend::supports)",
                     device_name(be_.device()), dtype_name(dt)));
  return dt;
}

void OpCheck::stats(DType dt, std::initializer_list<Named> ts) {
  const Tensor* first = nullptr;
  for (const Named& n : ts) {
    present(n);
    on_device(n);
    const DType st = n.t.dtype;
    if (st != dt && !(st == DType::f32 && dt == DType::bf16))
      fail(fmt::format("{} {} has dtype {}; saved statistics take the activation dtype {}{}",
                       n.name, n.t.shape_str(), dtype_name(st), dtype_name(dt),
                       dt == DType::bf16 ? " or f32" : ""));
    if (first && st != first->dtype) fail("saved statistics must share one dtype");
    first = &n.t;
  }
}

void OpCheck::param_grads(DType dt, std::initializer_list<Named> required,
                          std::initializer_list<Named> optional) {
  const Tensor* first = nullptr;
  auto visit = [&](const Named& n) {
    on_device(n);
    const DType gt = n.t.dtype;
    const bool mixed = gt == DType::f32 && dt == DType::bf16;
    if (gt != dt && !mixed)
      fail(fmt::format("{} {} has dtype {}; parameter gradients take the activation dtype {}{}",
                       n.name, n.t.shape_str(), dtype_name(gt), dtype_name(dt),
                       dt == DType::bf16 ? " or f32" : ""));
    if (mixed && !be_.f32_param_grads_with_bf16())
      fail(
          fmt::format("{} {} is f32 beside bf16 activations, which the {} backend does not take "
                      "(see Backend::f32_param_grads_with_bf16)",
                      n.name, n.t.shape_str(), device_name(be_.device())));
    if (first && gt != first->dtype) fail("parameter gradients must share one dtype");
    first = &n.t;
  };
  for (const Named& n : required) {
    present(n);
    visit(n);
  }
  for (const Named& n : optional)
    if (!n.t.empty()) visit(n);
}

void OpCheck::ids(const Named& n, int64_t count, int64_t limit) {
  present(n);
  on_device(n);
  if (n.t.dtype != DType::i32)
    fail(fmt::format("{} must be an i32 tensor, got {}", n.name, dtype_name(n.t.dtype)));
  if (n.t.numel() != count)
    fail(fmt::format("{} {} has {} elements, expected {}", n.name, n.t.shape_str(), n.t.numel(),
                     count));
  // Ids in device memory are the implementation's to check (the host cannot read them here).
  if (n.t.device != Device::cpu) return;
  const int32_t* p = n.t.as<int32_t>();
  for (int64_t i = 0; i < count; ++i)
    if ((p[i] < 0 && p[i] != kNoId) || p[i] >= limit)
      throw out_of_range_id(op_, n.name, i, p[i], limit);
}

void OpCheck::doc_starts(const Named& n, int64_t B, int64_t T) {
  if (n.t.empty()) return;
  on_device(n);
  if (n.t.dtype != DType::i32)
    fail(fmt::format("{} must be an i32 tensor, got {}", n.name, dtype_name(n.t.dtype)));
  if (n.t.numel() != B * T)
    fail(fmt::format("{} {} has {} elements, expected B*T = {}", n.name, n.t.shape_str(),
                     n.t.numel(), B * T));
  if (n.t.device != Device::cpu) return;  // the kernels clamp into [0, t] (documents.h)
  const int32_t* p = n.t.as<int32_t>();
  for (int64_t i = 0; i < B * T; ++i)
    if (p[i] < 0 || p[i] > i % T)
      fail(
          fmt::format("{}[{}, {}] = {}: a document start must lie in [0, {}] (the position "
                      "itself or before it)",
                      n.name, i / T, i % T, p[i], i % T));
}

void OpCheck::same_numel(std::initializer_list<Named> ts) {
  const Named& first = *ts.begin();
  for (const Named& n : ts)
    if (n.t.numel() != first.t.numel())
      fail(fmt::format("{} {} and {} {} differ in element count", first.name, first.t.shape_str(),
                       n.name, n.t.shape_str()));
}

void OpCheck::shapes(bool ok, std::initializer_list<Named> ts, const char* layout) const {
  if (!ok) fail(fmt::format("{}: expected {}", describe_shapes(ts), layout));
}

}  // namespace trainrun
