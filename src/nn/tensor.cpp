// Tensor helpers (see tensor.h).
#include "nn/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

namespace maestro {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

namespace {
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = int64_t(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}
}  // namespace

Tensor Tensor::host(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.strides = row_major_strides(shape);
  t.shape = std::move(shape);
  auto bytes = std::shared_ptr<uint8_t[]>(new uint8_t[std::max<size_t>(t.bytes(), 1)]());
  t.data = bytes.get();
  t.storage = bytes;
  return t;
}

int64_t Tensor::numel() const { return numel_of(shape); }

}  // namespace maestro
