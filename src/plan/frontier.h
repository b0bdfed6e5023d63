// Frontier: the release logic of a Schedule (schedule.h), shared by the
// simulator and the actor runtime.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/schedule.h"

namespace maestro {

// Frontier: which tasks may start, as tasks complete — the runtime's and the
// simulator's release logic. A task is released when all its deps have
// completed and its micro-batch is admitted. The in-flight cap bounds, per
// section replica, the *window* micro-batches admitted and not yet finished
// (backward stage 0 done; frozen: last forward stage done). Window
// micro-batches are those no other section's forward waits on (the sinks:
// the LLM's, or an encoder's on samples no consumer runs on); they are
// admitted in micro-batch order. Every other micro-batch is admitted as soon
// as a micro-batch whose forward waits on it is admitted, or when the window
// admits the micro-batch `cap` places before one that waits on it
// (lookahead), so producers start up to two windows ahead. A window
// micro-batch's completion needs only admitted work, so the cap cannot
// deadlock; should a hand-built schedule still leave nothing running and
// nothing ready, the next window micro-batch is admitted beyond the cap: the
// cap can slow a step but never stall it. Cap 0 admits everything. Released
// tasks come out in issue order. O(log tasks) per task.
class Frontier {
 public:
  explicit Frontier(const Schedule& schedule);

  // The tasks that may start now; they count as running from here on.
  std::vector<int64_t> take_ready();
  // Marks a running task completed.
  void complete(int64_t task);
  bool finished() const { return completed_ == int64_t(remaining_deps_.size()); }
  int64_t running() const { return running_; }
  // Window micro-batches admitted beyond the cap so far (0 for the
  // schedules this file builds).
  int64_t forced_admissions() const { return forced_; }
  // Whether every task `task` waits on is completed (it may still be parked
  // until its micro-batch is admitted under the in-flight cap).
  bool dependencies_met(int64_t task) const { return remaining_deps_.at(size_t(task)) == 0; }

 private:
  void make_ready(int64_t task);
  void admit(int64_t mb);
  bool admit_next(int64_t slot);  // the slot's next window micro-batch; false when none is left
  int64_t cap_;
  std::vector<int32_t> remaining_deps_;
  std::vector<int64_t> dependents_offsets_, dependents_;  // CSR: task -> tasks that wait on it
  // Micro-batches are numbered across sections: mb_base_[section] + id.
  std::vector<int64_t> mb_base_, mb_of_task_;
  std::vector<int64_t> feeders_offsets_, feeders_;  // CSR: mb -> mbs its forward waits on in other sections
  std::vector<char> admitted_;
  std::vector<std::vector<int64_t>> parked_;  // mb -> tasks whose deps are done, waiting for admission
  // Window slots, one per section replica with window micro-batches.
  std::vector<int64_t> window_of_task_;               // task -> slot when it finishes a window mb, else -1
  std::vector<std::vector<int64_t>> window_mbs_;      // slot -> its window mbs in order
  std::vector<size_t> window_next_;                   // slot -> index of the next to admit
  std::vector<int64_t> window_open_;                  // slot -> admitted, not finished
  std::vector<int64_t> ready_;                        // min-heap of released task ids
  int64_t running_ = 0, completed_ = 0, forced_ = 0;
};

}  // namespace maestro
