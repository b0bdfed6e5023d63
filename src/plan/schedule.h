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

// Throws std::invalid_argument naming the section when the plan does not
// match the graph (section count, degrees < 1, devices != tp·pp·dp).
void check_plan(const SectionGraph& graph, const Plan& plan);

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

// Per section s: the producer whose replicas each hold several of s's on
// exactly s's devices and that feeds every sample of `batch` s runs on (a
// tp 8 teacher over tp 2 students), or -1; all -1 when
// `plan.levers.host_groups` is off. The wavefront deals s's samples by that
// producer's replicas (ScheduleLevers::host_groups).
std::vector<int> host_producers(const SectionGraph& graph, const Plan& plan, const Batch& batch);

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

}  // namespace maestro
