// PinnedRanges: which host memory is page-locked for the GPU's copies (the
// transports' regions, through HostPinning), so that a backend can tell
// whether an upload may run as DMA straight from its source
// (Backend::copy_from_host_held) or must go through its own pinned staging
// ring. cuda_pin_host (gpu/device_query.h) records every range it pins in
// the process's table and cuda_unpin_host removes it; the CUDA backend
// looks sources up there instead of asking the driver, which would check
// only a pointer, not the whole range. Thread-safe; no CUDA here, so the
// CPU tests' CheckedBackend (tests/support) reads the same table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace maestro {

class PinnedRanges {
 public:
  // Records [base, base + bytes); a range already recorded at base is replaced.
  void add(const void* base, size_t bytes);
  // Forgets the range recorded at base (nothing when there is none).
  void remove(const void* base);
  // Whether [p, p + bytes) lies inside one recorded range (bytes = 0: p does).
  bool covers(const void* p, size_t bytes) const;

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> ranges_;  // base -> bytes; ranges never overlap (memory is pinned once)
};

// The process's table: what cuda_pin_host has pinned and not yet unpinned.
PinnedRanges& pinned_host_ranges();

}  // namespace maestro
