// How the payloads of the runtime's messages serialise (CAF `inspect`
// overloads), so that a message can cross a process: the step's batch and
// sample contents, a Schedule task, and a TensorRef. In process, CAF never
// serialises a message — handles stay zero-copy; crossing a process, a host
// TensorRef travels by value (shape, dtype and bytes) and arrives as a fresh
// buffer on the other side (a transport that puts tensors into a peer's
// registered buffer sends only a TensorDescriptor, transport/transport.h).
#pragma once

#include <caf/meta/load_callback.hpp>
#include <caf/meta/save_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "actors/step_data.h"
#include "plan/schedule.h"
#include "transport/tensor_ref.h"

// inspect(f, x) for a plain struct: its name and the fields listed (as
// `x.field`), in order.
#define MAESTRO_INSPECT(Type, ...)                                     \
  template <class Inspector>                                           \
  typename Inspector::result_type inspect(Inspector& f, Type& x) {     \
    return f(caf::meta::type_name(#Type), __VA_ARGS__);                \
  }

namespace maestro {

MAESTRO_INSPECT(ModalitySet, x.bits)
MAESTRO_INSPECT(Sample, x.id, x.modalities, x.text_tokens, x.images, x.audio_frames)
MAESTRO_INSPECT(Batch, x.step, x.samples)
MAESTRO_INSPECT(SampleInputs, x.tokens, x.pixels, x.mel)
MAESTRO_INSPECT(StepData, x.batch, x.inputs, x.loss_positions)

// The step's shared, read-only data: by value across a process (null stays null).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, std::shared_ptr<const StepData>& x) {
  bool present = x != nullptr;
  StepData value;
  if constexpr (Inspector::reads_state) {
    if (x) value = *x;
  }
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x = present ? std::make_shared<const StepData>(std::move(value)) : nullptr;
    return caf::none;
  });
  return f(present, value, load);
}

MAESTRO_INSPECT(Task, x.id, x.section, x.replica, x.stage, x.kind, x.micro_batch, x.deps)

// A tensor by value: present, shape, storage dtype, its bytes [bytes()].
// It arrives as a standalone host block (nn/dtype.h's dtype kept as sent):
// where the sender's block was registered is its process's business. A
// tensor in device memory has no host bytes to send: serialising one fails
// with a clear error (it crosses as a TensorDescriptor, transport.h, the
// peer putting into it).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TensorRef& x) {
  bool present = !x.empty();
  std::vector<uint8_t> bytes;
  auto save = caf::meta::save_callback([&]() -> caf::error {
    if (present && x.device() != Device::Host)
      return caf::make_error(caf::sec::state_not_serializable,
                             "a tensor in device memory does not cross processes by value (send its TensorDescriptor)");
    return caf::none;
  });
  if constexpr (Inspector::reads_state) {
    if (present && x.device() == Device::Host) {
      const std::span<const std::byte> raw = std::as_const(x).raw();
      bytes.resize(raw.size());
      if (!raw.empty()) std::memcpy(bytes.data(), raw.data(), raw.size());
    }
  }
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (!present) {
      x.buffer.reset();
      return caf::none;
    }
    x.buffer = std::make_shared<Buffer>();
    x.buffer->standalone.resize(bytes.size());
    if (!bytes.empty()) std::memcpy(x.buffer->standalone.data(), bytes.data(), bytes.size());
    x.buffer->data = x.buffer->standalone.data();
    x.buffer->capacity = x.buffer->standalone.size();
    if (x.numel() < 0 || x.bytes() != x.buffer->capacity)
      return caf::make_error(caf::sec::invalid_argument, "TensorRef: shape, dtype and bytes disagree");
    return caf::none;
  });
  return f(caf::meta::type_name("TensorRef"), save, present, x.shape, x.dtype, bytes, load);
}

}  // namespace maestro
