// DeviceArena's first-fit placement (device_arena.h).
#include "gpu/device_arena.h"

#include <algorithm>
#include <stdexcept>

namespace maestro {

size_t DeviceArena::add_segment(size_t bytes) {
  Segment s;
  s.bytes = bytes / kAlign * kAlign;
  if (s.bytes > 0) s.free.emplace(0, s.bytes);
  segments_.push_back(std::move(s));
  return segments_.size() - 1;
}

std::optional<DeviceArena::Block> DeviceArena::place(size_t bytes) {
  const size_t need = round_up(std::max<size_t>(bytes, 1));
  for (size_t si = 0; si < segments_.size(); ++si) {
    Segment& s = segments_[si];
    for (auto it = s.free.begin(); it != s.free.end(); ++it) {
      if (it->second < need) continue;
      const size_t offset = it->first, left = it->second - need;
      s.free.erase(it);
      if (left > 0) s.free.emplace(offset + need, left);
      s.used.emplace(offset, need);
      in_use_ += need;
      return Block{si, offset, need};
    }
  }
  return std::nullopt;
}

void DeviceArena::release(const Block& b) {
  if (b.segment >= segments_.size()) throw std::logic_error("DeviceArena::release: no such segment");
  Segment& s = segments_[b.segment];
  const auto used = s.used.find(b.offset);
  if (used == s.used.end() || used->second != b.bytes)
    throw std::logic_error("DeviceArena::release: a block that was not placed");
  s.used.erase(used);
  in_use_ -= b.bytes;
  size_t offset = b.offset, length = b.bytes;
  auto next = s.free.lower_bound(offset);
  if (next != s.free.end() && next->first == offset + length) {  // merge the free range after
    length += next->second;
    next = s.free.erase(next);
  }
  if (next != s.free.begin()) {  // merge the free range before
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      length += prev->second;
      s.free.erase(prev);
    }
  }
  s.free.emplace(offset, length);
}

size_t DeviceArena::capacity() const {
  size_t n = 0;
  for (const Segment& s : segments_) n += s.bytes;
  return n;
}

size_t DeviceArena::largest_free() const {
  size_t best = 0;
  for (const Segment& s : segments_)
    for (const auto& [offset, length] : s.free) best = std::max(best, length);
  return best;
}

size_t DeviceArena::segment_bytes(size_t bytes, size_t min_segment) {
  return std::max(round_up(bytes), round_up(min_segment));
}

}  // namespace maestro
