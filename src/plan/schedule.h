// Schedule: one training step's work as a task graph — the object the
// simulator runs and the runtime (actors/) executes. It carries the step's
// Batch, each section's micro-batches (which dp replica, which samples), and
// the forward/backward tasks with their dependencies, in issue order.
// Gradient sync and the optimizer step end the step; they are not tasks.
//
// Dependency rules (validate() checks every one; docs/scheduler.md):
//  - a consumer's forward of a micro-batch depends on the producer's forward
//    tasks (last stage) whose micro-batch holds any of its samples, for every
//    `activations` or `logits` flow into it; a flow carries a sample only
//    when both ends are active on it (SectionGraph::active / carries, the
//    one activation rule);
//  - a section's backward of a micro-batch (last stage) depends on its own
//    forward (last stage) and on the backward (stage 0) of every consumer
//    micro-batch, over `activations` flows into consumers that have a
//    backward, holding any of its samples; a loss section with no such
//    consumer depends on its own forward only;
//  - frozen sections have no backward;
//  - pp > 1: one task per stage; forward stage s+1 after stage s, backward
//    stage s after stage s+1;
//  - every dependency precedes its task in `tasks` (issue order is a
//    topological order).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/batch.h"
#include "graph/section_graph.h"
#include "plan/cost_model.h"
#include "plan/plan.h"

namespace maestro {

struct MicroBatch {
  int64_t id = 0;                // index in SectionSchedule::micro_batches
  int64_t replica = 0;           // the section's dp replica that runs it
  std::vector<int32_t> samples;  // indices into Batch::samples, in micro-batch order
};

struct SectionSchedule {
  std::vector<MicroBatch> micro_batches;  // per replica: run in this order
  bool backward = false;                  // train section: has backward tasks
};

struct Task {
  enum class Kind : uint8_t { Forward, Backward };
  int64_t id = 0;  // index in Schedule::tasks
  int section = 0;
  int64_t replica = 0;      // dp replica
  int64_t stage = 0;        // pp stage
  Kind kind = Kind::Forward;
  int64_t micro_batch = 0;  // index into the section's micro_batches
  std::vector<int64_t> deps;  // task ids, each < id
};

struct Schedule {
  enum class Policy : uint8_t { Wavefront, Monolithic };
  Policy policy = Policy::Wavefront;
  Batch batch;
  std::vector<SectionSchedule> sections;  // index = Program::sections index
  std::vector<Task> tasks;                // issue order
  // Successive frontiers when every task takes the same time: wave k holds
  // the tasks whose deepest dependency is in wave k-1 (display, tracing).
  std::vector<std::vector<int64_t>> waves;
  int64_t in_flight_cap = 0;  // window micro-batches per section replica (Frontier); 0 = unbounded

  const MicroBatch& micro_batch_of(const Task& t) const { return sections[t.section].micro_batches[t.micro_batch]; }
};

// The wavefront schedule of one step (architecture.md, steps 2–6): each
// section keeps its active samples; packs them into micro-batches of its
// plan's micro_batch, balanced across its dp replicas by cost (forward +
// backward of the sample alone), longest first; consumers lead (samples
// with no producer work first) and producers follow in the order their
// consumers need the samples. Throws std::invalid_argument when the plan
// does not match the graph (section count, degrees < 1).
Schedule wavefront_schedule(const SectionGraph& graph, const Plan& plan, const CostModel& cost, Batch batch);

// The waves of a task list in issue order: wave k holds the tasks whose
// deepest dependency is in wave k-1 (successive frontiers when every task
// takes the same time).
std::vector<std::vector<int64_t>> compute_waves(const std::vector<Task>& tasks);

// The monolithic baseline: one micro-batch size for every section, samples
// in loader order; micro-batch c goes to lane c mod L (L = the largest dp)
// and runs through all its active sections, producers to consumers, then
// backward in reverse, before the lane's next micro-batch starts (each task
// depends on the lane's previous task, on top of the data rules). Section s
// runs micro-batch c on its replica c mod dp_s: every section uses all of
// its own replicas.
Schedule monolithic_schedule(const SectionGraph& graph, const Plan& plan, Batch batch, int64_t micro_batch);

// Every rule above, plus: each sample processed exactly once per active
// section, forward and (train) backward, on no inactive section; replicas,
// stages and micro-batch ids in range; waves consistent. Returns the
// violations, one line each; empty = valid.
std::vector<std::string> validate(const SectionGraph& graph, const Plan& plan, const Schedule& schedule);

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
