// StepGraph: the runtime's view of one step's Schedule — every forward and
// backward task of every section replica (and pipeline stage), in schedule order, with the
// micro-batch's samples and the tasks it waits for. Built from the plan's
// Schedule (plan/schedule.h); the scheduler actor walks it as a frontier.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace maestro {

enum class TaskKind : uint8_t { Forward, Backward };

struct StepTask {
  int64_t id = 0;               // index in StepGraph::tasks
  int section = 0;              // index into Program::sections
  int replica = 0;              // data-parallel replica of the section
  TaskKind kind = TaskKind::Forward;
  int64_t micro_batch = 0;      // the section's micro-batch id
  std::vector<int32_t> samples; // indices into Batch::samples, in micro-batch order
  std::vector<int64_t> deps;    // task ids that must finish first
  int stage = 0, stages = 1;    // pipeline stage of the section's `pp` stages
};

struct StepGraph {
  std::vector<StepTask> tasks;  // schedule order
  int64_t in_flight_cap = 0;    // Schedule::in_flight_cap (Frontier, plan/schedule.h); 0 = unbounded
};

}  // namespace maestro
