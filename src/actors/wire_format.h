// How the payloads of the runtime's messages serialise (CAF `inspect`
// overloads), so that a message can cross a process: the step's batch and
// sample contents, a Schedule task, and a TensorRef. In process, CAF never
// serialises a message — handles stay zero-copy; crossing a process, a
// TensorRef travels by value (shape and fp32 values) and arrives as a fresh
// buffer on the other side (a transport that puts tensors into a peer's
// registered buffer would send only a descriptor instead).
#pragma once

#include <caf/meta/load_callback.hpp>
#include <caf/meta/save_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <memory>
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

// A tensor by value: present, shape, values [numel].
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TensorRef& x) {
  bool present = !x.empty();
  std::vector<float> values;
  if constexpr (Inspector::reads_state) {
    if (present) values.assign(x.values().begin(), x.values().end());
  }
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (!present) {
      x.buffer.reset();
      return caf::none;
    }
    x.buffer = std::make_shared<Buffer>();
    x.buffer->data = std::move(values);
    if (x.numel() != int64_t(x.buffer->data.size()))
      return caf::make_error(caf::sec::invalid_argument, "TensorRef: shape and values disagree");
    return caf::none;
  });
  return f(caf::meta::type_name("TensorRef"), present, x.shape, values, load);
}

}  // namespace maestro
