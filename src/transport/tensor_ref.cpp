// TensorRef accessors.
#include "transport/tensor_ref.h"

#include <cstring>
#include <stdexcept>

namespace maestro {

TensorRef TensorRef::of(std::vector<float> values, std::vector<int64_t> shape) {
  if (shape.empty()) shape = {int64_t(values.size())};
  return of_bytes(std::as_bytes(std::span<const float>(values)), std::move(shape), DType::F32);
}

TensorRef TensorRef::of_bytes(std::span<const std::byte> bytes, std::vector<int64_t> shape, DType dtype) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("TensorRef: a negative dimension");
    n *= d;
  }
  if (size_t(n) * dtype_size(dtype) != bytes.size())
    throw std::invalid_argument("TensorRef: shape and values differ in size");
  TensorRef t;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.buffer = std::make_shared<Buffer>();
  t.buffer->standalone.assign(bytes.begin(), bytes.end());
  t.buffer->data = t.buffer->standalone.data();
  t.buffer->capacity = t.buffer->standalone.size();
  return t;
}

int64_t TensorRef::numel() const {
  if (!buffer) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
void require_host(const TensorRef& t, bool f32) {
  if (t.device() != Device::Host) throw std::logic_error("TensorRef: the bytes of a device tensor are not host memory");
  if (f32 && t.dtype != DType::F32)
    throw std::logic_error(std::string("TensorRef::values() of a ") + dtype_name(t.dtype) + " tensor");
}
}  // namespace

std::span<float> TensorRef::values() {
  if (!buffer) return {};
  require_host(*this, true);
  return {reinterpret_cast<float*>(buffer->data), size_t(numel())};
}

std::span<const float> TensorRef::values() const {
  if (!buffer) return {};
  require_host(*this, true);
  return {reinterpret_cast<const float*>(buffer->data), size_t(numel())};
}

std::span<std::byte> TensorRef::raw() {
  if (!buffer) return {};
  require_host(*this, false);
  return {buffer->data, bytes()};
}

std::span<const std::byte> TensorRef::raw() const {
  if (!buffer) return {};
  require_host(*this, false);
  return {buffer->data, bytes()};
}

}  // namespace maestro
