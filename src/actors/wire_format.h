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
#include <atomic>
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

// Across processes a run installs a TensorExporter (actors/peer_tensors.h):
// a host tensor then crosses as a handle (the owner's transport id, a key),
// never as bytes; the consumer's process fetches it — the owner puts it
// one-sided into the consumer's registered pool. A handle arriving back at
// its owner is the owner's tensor again (no copy); elsewhere it is a
// placeholder (is_remote_placeholder) until fetched.
inline constexpr uint64_t kRemotePlaceholderPool = ~uint64_t(0);
inline bool is_remote_placeholder(const TensorRef& t) {
  return t.buffer && t.buffer->data == nullptr && t.buffer->pool == kRemotePlaceholderPool;
}
struct StageGeometry;  // nn/section_model.h: a pipeline micro-batch's layout
struct TensorExporter {
  virtual ~TensorExporter() = default;
  virtual uint64_t owner() const = 0;                        // this process's transport id
  virtual uint64_t export_tensor(const TensorRef& t) = 0;     // keeps it until its one use (peer_tensors.h); its key
  // The tensor for a handle: this process's own (owner == owner()), else a placeholder.
  virtual TensorRef imported(uint64_t owner, uint64_t key, std::vector<int64_t> shape, DType dtype) = 0;
  // A pipeline stage's layout (StageTensor, messages.h) crosses the same
  // way: kept here, sent as (owner, key). It is opaque and only ever needed
  // back in its owner's process (a replica's stages share one), so there is
  // no fetch: elsewhere it stays a handle.
  virtual uint64_t export_geometry(std::shared_ptr<const StageGeometry> g) = 0;
  virtual std::shared_ptr<const StageGeometry> exported_geometry(uint64_t key) const = 0;  // null when unknown
};
inline std::atomic<TensorExporter*>& tensor_exporter() {
  static std::atomic<TensorExporter*> exporter{nullptr};
  return exporter;
}

// A tensor: how (0 absent, 1 by value, 2 handle), shape, dtype, the handle
// (owner, key) or its bytes [bytes()]. A tensor in device memory has no host
// bytes to send: serialising one fails with a clear error (it crosses as its
// TensorDescriptor, the peer putting into it).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TensorRef& x) {
  uint8_t how = 0;
  uint64_t owner = 0, key = 0;
  std::vector<uint8_t> bytes;
  auto host_only = caf::meta::save_callback([&]() -> caf::error {
    if (!x.empty() && x.device() != Device::Host)
      return caf::make_error(caf::sec::state_not_serializable,
                             "a tensor in device memory does not cross processes by value (send its TensorDescriptor)");
    return caf::none;
  });
  if constexpr (Inspector::reads_state) {
    TensorExporter* exporter = tensor_exporter().load();
    if (is_remote_placeholder(x)) {
      how = 2, owner = x.buffer->owner, key = x.buffer->offset;
    } else if (!x.empty() && x.device() == Device::Host && exporter) {
      how = 2, owner = exporter->owner(), key = exporter->export_tensor(x);
    } else if (!x.empty() && x.device() == Device::Host) {
      how = 1;
      const std::span<const std::byte> raw = std::as_const(x).raw();
      bytes.assign(reinterpret_cast<const uint8_t*>(raw.data()), reinterpret_cast<const uint8_t*>(raw.data()) + raw.size());
    } else if (!x.empty()) {
      how = 1;  // refused by host_only
    }
  }
  auto load = caf::meta::load_callback([&]() -> caf::error {
    try {
      if (how == 0) {
        x.buffer.reset();
      } else if (how == 1) {
        x = TensorRef::of_bytes(std::as_bytes(std::span<const uint8_t>(bytes)), x.shape, x.dtype);
      } else if (how == 2) {
        TensorExporter* exporter = tensor_exporter().load();
        if (!exporter)
          return caf::make_error(caf::sec::invalid_argument, "a tensor handle arrived in a process that imports none");
        x = exporter->imported(owner, key, x.shape, x.dtype);
      } else {
        return caf::make_error(caf::sec::invalid_argument, "a tensor with an unknown encoding");
      }
    } catch (const std::exception& e) {
      return caf::make_error(caf::sec::invalid_argument, e.what());
    }
    return caf::none;
  });
  return f(caf::meta::type_name("TensorRef"), host_only, how, x.shape, x.dtype, owner, key, bytes, load);
}

}  // namespace maestro
