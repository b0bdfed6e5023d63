// Tensor: a dtype, a shape and row-major strides over some host storage —
// the engine's currency at its edges (safetensors files, parameter copies).
// Inside the models, buffers are plain fp32 pointers from the Backend with
// their shapes in comments.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/dtype.h"

namespace maestro {

struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;     // in elements, row-major
  void* data = nullptr;             // first element
  std::shared_ptr<void> storage;    // owner of data

  // Host tensor owning its zero-filled bytes.
  static Tensor host(DType dtype, std::vector<int64_t> shape);

  int64_t numel() const;
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  float* f32() const { return static_cast<float*>(data); }
  uint16_t* bf16() const { return static_cast<uint16_t*>(data); }
};

int64_t numel_of(const std::vector<int64_t>& shape);
std::string shape_str(const std::vector<int64_t>& shape);  // "[4, 8]"

}  // namespace maestro
