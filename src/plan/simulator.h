// Discrete-event simulator: runs one step's Schedule under a Plan on a
// CostModel. A task starts when its deps are done (plus the transfer of the
// flow's tensors, on the link between the two replicas) and all its devices
// are free: a replica's stage occupies its tp devices, and sections sharing
// devices serialise on them (first ready, first served, or longest remaining
// path first with ScheduleLevers::critical_path_first). Tasks are released
// by the same Frontier as the runtime's, in-flight cap included. Gradient
// sync and the optimizer step of each train section follow its last task on
// its devices (the sync on their communication link, overlapping its last
// backward, with ScheduleLevers::overlap_grad_sync). No engine, no threads: events in time order.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "graph/section_graph.h"
#include "plan/chrome_trace.h"
#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/schedule.h"

namespace maestro {

struct SimResult {
  double iteration_s = 0;      // step start to the last optimizer step's end
  double compute_end_s = 0;    // the last forward/backward task's end
  double lower_bound_s = 0;    // lower_bound_s() of the step
  double utilization = 0;      // lower_bound_s / iteration_s
  std::vector<double> device_busy_s;          // per device: seconds computing (tasks, optimizer; grad sync when not overlapped)
  std::vector<double> section_utilization;    // per section: its busy device-seconds / (devices × iteration_s)
  std::vector<int64_t> peak_memory_bytes;     // per device: weights of its sections + peak in-flight activations
  std::vector<double> task_start_s, task_end_s;  // per task of the schedule
  std::vector<TraceSpan> spans;               // one per task per device, when SimOptions::trace
  // Per device, at its peak: in-flight activation bytes per section (index =
  // section), when SimOptions::memory_breakdown (diagnosis: bench_plan_probe).
  std::vector<std::vector<int64_t>> peak_activations_by_section;
  // SimOptions::give_up_at was reached before any event: iteration_s is
  // then the busiest device's busy time, a lower bound of the step, and
  // nothing else is filled.
  bool gave_up = false;
  // A device goes over SimOptions::memory_limit_bytes. Where that is found
  // before the step's end, the step stopped there and only
  // peak_memory_bytes (as far as simulated, one device over the limit) is
  // filled.
  bool over_memory = false;
};

struct SimOptions {
  bool trace = false;             // fill SimResult::spans
  bool memory_breakdown = false;  // fill SimResult::peak_activations_by_section
  bool lower_bound = true;        // fill SimResult::lower_bound_s and utilization (else 0)
  // Check the schedule first (validate(); std::invalid_argument when it
  // breaks a rule). The planner's search turns it off: its candidates'
  // schedules come straight from wavefront_schedule, whose rules the tests
  // check, and the check was 4 % of planning time.
  bool validate = true;
  // When the busiest device's busy time (its tasks, its sections' grad
  // syncs when not overlapped and optimizer steps, which never overlap on a
  // device) is this or more, the step cannot be shorter: stop before the
  // events (SimResult::gave_up). The bound does not depend on the plan's
  // in-flight cap. The planner's search passes the step to beat.
  double give_up_at = std::numeric_limits<double>::infinity();
  // Stop as soon as a device's weights and in-flight activations exceed
  // this (SimResult::over_memory): the planner's search, where such a step
  // is one that does not fit (half of its simulations on internvl_26b).
  int64_t memory_limit_bytes = std::numeric_limits<int64_t>::max();
  // A run in one process on GPUs (actors/run_plan.h, plan_gpu_run): what a
  // section hands another, or a pipeline stage the next, waits in the
  // memory of the device that made it until the task that takes it in
  // starts — a forward's output on its stage's first device, a backward's
  // input gradient on the consumer's (or the later stage's) — up to this
  // many bytes per replica stage at a time (the runtime's
  // SectionRunner::kResidentShare, an eighth of the GPU); past that a
  // hand-off goes through host memory. Counted in peak_memory_bytes (bytes:
  // CostModel::transfer_bytes and stage_handoff_bytes; a sample handed to
  // two consumers counted for each). 0 (the default): hand-offs take no
  // device memory, as over processes and on the CPU.
  int64_t resident_handoff_budget = 0;
};

SimResult simulate(const SectionGraph& graph, const Plan& plan, const Schedule& schedule, const CostModel& cost,
                   const SimOptions& options = {});

// architecture.md's lower bound: max(total device-seconds of work at peak
// efficiency / plan.device_count(), the critical path of one sample — its
// forward through its active sections, every stage, with transfers, then
// backward in reverse — the longest over the batch's samples).
double lower_bound_s(const SectionGraph& graph, const Plan& plan, const Batch& batch, const CostModel& cost);

}  // namespace maestro
