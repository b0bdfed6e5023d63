// FenceLedger: the CUDA backend's fences (nn/backend.h's fence / passed)
// as host logic, unit-tested here. Each fence is an event the backend
// records on its stream after the work queued so far; a fence has passed
// once its event has been reached. Work on a stream completes in order, so
// events are asked oldest first and the first one not yet reached ends the
// search: no query waits, and none is asked twice once reached. Reached
// events go back to the caller (to record again). Not thread-safe: the
// backend locks around it.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

namespace maestro {

template <class Event>
class FenceLedger {
 public:
  // A fence over `e`, just recorded after the work so far: its id (from 1;
  // 0 is a fence before any work, passed from the start).
  uint64_t add(Event e) {
    pending_.push_back({++last_, e});
    return last_;
  }
  // Whether fence f has passed. `reached(e)`: whether the stream has got
  // past event e (it may throw for a faulted stream); `recycle(e)` takes
  // each event found reached.
  template <class Reached, class Recycle>
  bool passed(uint64_t f, Reached&& reached, Recycle&& recycle) {
    while (f > done_ && !pending_.empty() && reached(pending_.front().second)) {
      done_ = pending_.front().first;
      recycle(pending_.front().second);
      pending_.pop_front();
    }
    return f <= done_;
  }
  // Every event not yet found reached (to destroy them), oldest first.
  std::vector<Event> take_pending() {
    std::vector<Event> out;
    for (auto& [id, e] : pending_) out.push_back(e);
    pending_.clear();
    return out;
  }
  size_t pending() const { return pending_.size(); }

 private:
  uint64_t last_ = 0;  // the newest fence's id
  uint64_t done_ = 0;  // every fence up to this one has passed
  std::deque<std::pair<uint64_t, Event>> pending_;  // (id, event), oldest first
};

}  // namespace maestro
