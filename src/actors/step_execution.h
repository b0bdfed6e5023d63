// StepExecution: the scheduler's bookkeeping for one step, free of CAF so it
// can be tested alone. It executes the plan's Schedule (plan/schedule.h) as
// given — its tasks and their dependencies, nothing added — releasing the
// tasks the plan's own Frontier lets start (dependencies met, micro-batch
// admitted under the in-flight cap; the simulator's release logic), and
// routes each finished task's output handles into the tasks that read them:
// flow tensors between sections, and each pipeline stage's hand-off (hidden
// states forward, their gradient backward) to the neighbouring stage.
//
// Determinism: the runtime hands it schedules whose replicas' backwards are
// chained (plan/backward_order.h), so each replica accumulates gradients in
// the same order whatever order other tasks finish in; the step's loss is
// summed over forward tasks in issue order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "actors/messages.h"
#include "graph/section_graph.h"
#include "plan/plan.h"
#include "plan/frontier.h"
#include "plan/schedule.h"

namespace maestro {

class StepExecution {
 public:
  // `graph` and `plan` (for each section's pipeline stages) must outlive this.
  StepExecution(const SectionGraph& graph, const Plan& plan, Schedule schedule, std::shared_ptr<const StepData> data,
                int64_t step);

  // Tasks whose dependencies are all met and that were not released yet, in
  // issue order, with their input handles. Call after construction and
  // after every complete().
  std::vector<RunTask> release();
  // Records a finished task: stores its outputs for the tasks that read them.
  // Throws std::logic_error for a task not released or finished twice, or a
  // stage that handed its neighbour nothing.
  void complete(const TaskDone& done);

  bool finished() const { return done_count_ == int64_t(schedule_.tasks.size()); }
  int64_t running() const { return released_count_ - done_count_; }
  const Schedule& schedule() const { return schedule_; }
  // The frontier per section (the debug REPL's `wave`): tasks done, in
  // flight (released, not done), ready (dependencies met, held back by the
  // in-flight cap), waiting (on other tasks).
  struct SectionWave {
    int64_t done = 0, in_flight = 0, ready = 0, waiting = 0;
  };
  std::vector<SectionWave> wave(size_t sections) const {
    std::vector<SectionWave> w(sections);
    for (size_t i = 0; i < schedule_.tasks.size(); ++i) {
      SectionWave& s = w.at(size_t(schedule_.tasks[i].section));
      (done_[i]                                ? s.done
       : released_[i]                          ? s.in_flight
       : frontier_.dependencies_met(int64_t(i)) ? s.ready
                                                : s.waiting) += 1;
    }
    return w;
  }
  // Sum of the forward tasks' loss shares, in issue order.
  double loss() const;
  // A forward task's loss share, reported at the end of the step (the
  // replicas read their losses back once per step, not per task).
  void set_loss(int64_t task, double loss);

 private:
  int64_t stages(int section) const { return plan_.sections[size_t(section)].pp; }
  bool reads_edge(int edge, const Task& t) const;
  std::vector<FlowTensor> inputs_of(const Task& t);

  const SectionGraph& graph_;
  const Plan& plan_;
  Schedule schedule_;
  std::shared_ptr<const StepData> data_;
  int64_t step_;
  Frontier frontier_;                       // the plan's release logic, over schedule_
  std::vector<bool> released_, done_;       // per task
  std::vector<double> loss_of_task_;        // per task
  int64_t released_count_ = 0, done_count_ = 0;
  // (flow, sample) -> the producer's output / the consumer's input gradient.
  std::map<std::pair<int32_t, int32_t>, TensorRef> outputs_, grads_;
  // (section, replica, stage, micro-batch) -> what the neighbouring stage
  // handed that stage: hidden states forward, their gradient backward.
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, StageTensor> stage_forward_, stage_backward_;
};

}  // namespace maestro
