// The runtime's use of the planner (plan/): each section's resolved dp and
// micro_batch for a real run on this machine, and one step's Schedule
// (wavefront or monolithic) turned into the StepGraph the scheduler walks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/step_data.h"
#include "data/batch.h"
#include "actors/step_graph.h"
#include "dsl/program.h"
#include "graph/section_graph.h"
#include "plan/cluster.h"
#include "plan/cost_model.h"
#include "plan/plan.h"
#include <memory>

namespace maestro {

struct SectionRun {
  int64_t dp = 1;
  int64_t pp = 1;  // pipeline stages, one actor each per dp replica
  int64_t micro_batch = 1;
};

// Resolves every `auto` (dp, pp, micro_batch) with the planner
// (plan/planner.h) for the `cpu` device with `devices` CPU slots, tp = 1,
// sizing work with `sample` (step 0's batch); explicit values are kept.
// Throws std::invalid_argument (exit 2) naming the section for a plan this
// runtime can't execute (tp > 1; pp more than the model's layers, or > 1
// for an mlp) or one the planner can't fit.
std::vector<SectionRun> resolve_section_runs(const Program& program, int64_t devices, const Batch& sample);

// Each step's Schedule from the planner (plan/schedule.h: the same object
// the simulator runs), wavefront or monolithic, turned into the StepGraph
// the scheduler actor walks: the tasks, their micro-batches' samples and
// dependencies as the Schedule has them, plus the order of each replica's
// backwards (step_execution.h). Thread-safe: const after construction.
class StepPlanner {
 public:
  StepPlanner(const Program& program, const std::vector<SectionRun>& runs, std::string schedule);
  ~StepPlanner();
  StepGraph step_graph(const StepData& step) const;

 private:
  const Program& program_;
  SectionGraph graph_;
  Cluster cluster_;
  std::unique_ptr<CostModel> cost_;
  Plan plan_;
  std::string schedule_;
  int64_t monolithic_micro_batch_ = 1;
};

}  // namespace maestro
