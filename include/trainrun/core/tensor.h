// Tensor: a non-owning view of device or host memory with a shape and a dtype.
// Ownership lives in a few big buffers (the flat parameter store, the activation arena);
// everything else passes views around, so nothing is allocated inside the step loop.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace trainrun {

enum class DType : uint8_t { f32, f64, bf16, i32 };
enum class Device : uint8_t { cpu, cuda };

size_t dtype_size(DType dt);
const char* dtype_name(DType dt);
const char* device_name(Device d);

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> dims{};

  Tensor() = default;
  Tensor(void* p, DType dt, Device dev, std::initializer_list<int64_t> shape);

  bool empty() const { return data == nullptr; }
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return dims[i < 0 ? ndim + i : i]; }
  // Rows when viewed as a matrix whose last dim is the row length.
  int64_t rows() const { return ndim == 0 ? 0 : numel() / dims[ndim - 1]; }
  int64_t cols() const { return ndim == 0 ? 0 : dims[ndim - 1]; }

  // Same memory, another shape with the same element count.
  Tensor reshape(std::initializer_list<int64_t> shape) const;
  // Elements [offset, offset + prod(shape)) of this tensor's memory.
  Tensor slice(int64_t offset, std::initializer_list<int64_t> shape) const;

  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }

  std::string shape_str() const;
};

}  // namespace trainrun
