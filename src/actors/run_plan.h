// The plan of a real run on this machine: the CPU runtime's limits on a
// program (a tensor and pipeline split the model can take), each section's
// resolved dp, pp and micro_batch on the CPU slots, and each step's Schedule
// as the runtime executes it. The command calls the first two once
// (Program -> SectionGraph -> Plan); the scheduler asks StepSchedules for
// every step's Schedule.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/batch.h"
#include "dsl/program.h"
#include "graph/section_graph.h"
#include "plan/cluster.h"
#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/schedule.h"

namespace maestro {

// CPU slots of a run: `threads`, or every core when it is 0.
int64_t cpu_slots(int64_t threads);

// The program as the CPU runtime runs it: tp fixed at 1 where it is auto.
// Throws std::invalid_argument (exit 2) naming the section for what this
// runtime can't execute: a tp the model's heads / kv heads / ffn don't
// divide by, pp more than the model's layers or > 1 on an mlp, dp or
// micro_batch < 1.
Program cpu_runnable(const Program& program);

// The run's Plan on `slots` CPU slots: every `auto` (dp, pp, micro_batch)
// resolved by the planner (plan/planner.h) for the `cpu` device, sized on
// `sample` (step 0's batch); explicit values kept. Sections share the slots
// (co-located, an explicit tp·dp·pp above `slots` widens them), tp as written, and
// the in-flight cap is one micro-batch per pipeline stage. `graph` is built
// from cpu_runnable's program. Throws std::invalid_argument when the
// planner can't fit the run.
Plan plan_cpu_run(const SectionGraph& graph, int64_t slots, const Batch& sample);

// Each step's Schedule (plan/schedule.h: the same object the simulator
// runs), wavefront or monolithic, over the run's plan and the `cpu`
// device's roofline cost model, with each replica's backwards chained in
// issue order (plan/backward_order.h: deterministic gradient sums).
// Thread-safe: const after construction. `graph` and `plan` must outlive it.
class StepSchedules {
 public:
  // Throws std::invalid_argument for a policy other than wavefront or monolithic.
  StepSchedules(const SectionGraph& graph, const Plan& plan, const std::string& policy);
  ~StepSchedules();
  Schedule of(const Batch& batch) const;

 private:
  const SectionGraph& graph_;
  const Plan& plan_;
  Cluster cluster_;
  std::unique_ptr<CostModel> cost_;
  bool monolithic_ = false;
  int64_t monolithic_micro_batch_ = 1;
};

}  // namespace maestro
