// How the payloads of the runtime's messages serialise (CAF `inspect`
// overloads), so that a message can cross a process: the step's batch and
// sample contents, a Schedule task, and a TensorRef. In process, CAF never
// serialises a message — handles stay zero-copy; crossing a process, a
// TensorRef travels by value (shape, dtype and bytes) and arrives as a
// fresh standalone buffer on the other side (a transport that puts tensors
// into a peer's registered pool sends only a TensorDescriptor instead).
#pragma once

#include <caf/meta/load_callback.hpp>
#include <caf/meta/save_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
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

// A tensor by value: present, shape, dtype, its bytes [bytes()]. A tensor
// in device memory has no host bytes to send: serialising one fails with a
// clear error (it crosses as its TensorDescriptor, the peer putting into it).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TensorRef& x) {
  bool present = !x.empty();
  std::vector<uint8_t> bytes;
  auto host_only = caf::meta::save_callback([&]() -> caf::error {
    if (present && x.device() != Device::Host)
      return caf::make_error(caf::sec::state_not_serializable,
                             "a tensor in device memory does not cross processes by value (send its TensorDescriptor)");
    return caf::none;
  });
  if constexpr (Inspector::reads_state) {
    if (present && x.device() == Device::Host) {
      const std::span<const std::byte> raw = std::as_const(x).raw();
      bytes.assign(reinterpret_cast<const uint8_t*>(raw.data()), reinterpret_cast<const uint8_t*>(raw.data()) + raw.size());
    }
  }
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (!present) {
      x.buffer.reset();
      return caf::none;
    }
    try {
      x = TensorRef::of_bytes(std::as_bytes(std::span<const uint8_t>(bytes)), x.shape, x.dtype);
    } catch (const std::invalid_argument& e) {
      return caf::make_error(caf::sec::invalid_argument, e.what());
    }
    return caf::none;
  });
  return f(caf::meta::type_name("TensorRef"), host_only, present, x.shape, x.dtype, bytes, load);
}

}  // namespace maestro
