// DeviceArena: the bookkeeping of the CUDA backend's device memory, host
// code only so it is unit-tested here (tests/gpu/device_arena_test.cpp).
// The backend makes a few large device allocations (segments) and places
// every buffer it is asked for inside them: parameters, gradients, optimizer
// state, the activation pool's buffers and its own scratch. Once the engine's
// grow-only activation pool has seen its largest step, a step places and
// frees blocks here and never calls cudaMalloc.
//
// Placement is first fit over the free ranges of the segments in order;
// every block is kAlign-aligned; release() merges a block with its free
// neighbours. A request that fits no free range returns nullopt: the caller
// adds a segment (segment_bytes) and asks again.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <vector>

namespace maestro {

class DeviceArena {
 public:
  static constexpr size_t kAlign = 256;  // cuBLASLt and vector loads want >= 16; 256 matches cudaMalloc

  struct Block {
    size_t segment = 0;  // index of the segment (in add_segment order)
    size_t offset = 0;   // bytes from the segment's start, a multiple of kAlign
    size_t bytes = 0;    // rounded up to kAlign
  };

  // A new segment of `bytes` (rounded down to kAlign); returns its index.
  size_t add_segment(size_t bytes);
  // First fit; nullopt when no free range of any segment holds `bytes`.
  std::optional<Block> place(size_t bytes);
  // Gives a placed block back; throws std::logic_error for a block not placed.
  void release(const Block& b);

  size_t segments() const { return segments_.size(); }
  size_t capacity() const;     // bytes in all segments
  size_t bytes_in_use() const { return in_use_; }
  size_t largest_free() const;  // the largest request place() can serve now

  // The size of the segment to add for a request of `bytes` that did not
  // fit: at least min_segment, at least the request.
  static size_t segment_bytes(size_t bytes, size_t min_segment);
  static size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

 private:
  struct Segment {
    size_t bytes = 0;
    std::map<size_t, size_t> free;  // offset -> length, disjoint, never adjacent
    std::map<size_t, size_t> used;  // offset -> length
  };
  std::vector<Segment> segments_;
  size_t in_use_ = 0;
};

}  // namespace maestro
