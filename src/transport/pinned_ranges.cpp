// PinnedRanges (pinned_ranges.h): a map from base address to size.
#include "transport/pinned_ranges.h"

namespace maestro {

void PinnedRanges::add(const void* base, size_t bytes) {
  std::lock_guard lock(mu_);
  ranges_[reinterpret_cast<uintptr_t>(base)] = bytes;
}

void PinnedRanges::remove(const void* base) {
  std::lock_guard lock(mu_);
  ranges_.erase(reinterpret_cast<uintptr_t>(base));
}

bool PinnedRanges::covers(const void* p, size_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lock(mu_);
  auto it = ranges_.upper_bound(a);  // the first range starting after p
  if (it == ranges_.begin()) return false;
  --it;  // the last range starting at or before p
  const size_t off = a - it->first;
  return off < it->second && bytes <= it->second - off;
}

PinnedRanges& pinned_host_ranges() {
  static PinnedRanges table;
  return table;
}

}  // namespace maestro
