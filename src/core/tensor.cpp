#include "trainrun/core/tensor.h"

#include <fmt/format.h>

#include <stdexcept>

namespace trainrun {

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
  }
  return 0;
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
  }
  return "?";
}

const char* device_name(Device d) {
  return d == Device::cpu ? "cpu" : "cuda";
}

Tensor::Tensor(void* p, DType dt, Device dev, std::initializer_list<int64_t> shape)
    : data(p), dtype(dt), device(dev), ndim(static_cast<int>(shape.size())) {
  if (shape.size() > kMaxDims) throw std::invalid_argument("Tensor: too many dims");
  int i = 0;
  for (int64_t d : shape) dims[i++] = d;
}

int64_t Tensor::numel() const {
  if (ndim == 0) return data ? 1 : 0;
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[i];
  return n;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> shape) const {
  Tensor t(data, dtype, device, shape);
  if (t.numel() != numel())
    throw std::invalid_argument(
        fmt::format("reshape {} -> {} changes numel", shape_str(), t.shape_str()));
  return t;
}

Tensor Tensor::slice(int64_t offset, std::initializer_list<int64_t> shape) const {
  Tensor t(static_cast<char*>(data) + offset * static_cast<int64_t>(dtype_size(dtype)), dtype,
           device, shape);
  if (offset < 0 || offset + t.numel() > numel())
    throw std::out_of_range(
        fmt::format("slice [{}, +{}) outside {}", offset, t.numel(), shape_str()));
  return t;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ',';
    s += std::to_string(dims[i]);
  }
  s += ']';
  return s;
}

}  // namespace trainrun
