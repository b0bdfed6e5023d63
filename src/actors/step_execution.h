// StepExecution: the scheduler's bookkeeping for one step, free of CAF so it
// can be tested alone. It completes the StepGraph's dependencies from the
// data (a consumer's forward waits for the producers' forwards of its
// samples; a backward waits for its own forward, for the consumers'
// backwards of its samples, and for the previous backward of the same
// replica and stage; pipeline stage s+1 of a micro-batch runs forward after
// stage s and backward before it), releases every task whose dependencies
// are met as one frontier, and routes each finished task's output handles
// into the tasks that read them: flow tensors between sections, and each
// stage's hand-off (hidden states forward, their gradient backward) to the
// neighbouring stage. Which tasks may start is the plan's own release logic
// (Frontier, plan/schedule.h — the simulator's): dependencies met and the
// micro-batch admitted under the in-flight cap, which bounds activation
// memory and never stalls a step.
//
// Determinism: a replica's backwards run in schedule order, one after the
// other, so each replica accumulates gradients in the same order on every
// run whatever order other tasks finish in; the step's loss is summed over
// forward tasks in schedule order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "actors/messages.h"
#include "dsl/program.h"
#include "plan/schedule.h"

namespace maestro {

// Which sections run backward: train sections (a frozen section's producers
// must be frozen too; build checks it).
std::vector<bool> sections_with_backward(const Program& program);

// Adds the data and ordering dependencies described above. Throws
// std::logic_error if the graph lacks a task the data needs.
void add_data_dependencies(const Program& program, StepGraph& graph);

class StepExecution {
 public:
  StepExecution(const Program& program, StepGraph graph, std::shared_ptr<const StepData> data, int64_t step);

  // Tasks whose dependencies are all met and that were not released yet, in
  // schedule order, with their input handles. Call after construction and
  // after every complete().
  std::vector<RunTask> release();
  // Records a finished task: stores its outputs for the tasks that read them.
  void complete(const TaskDone& done);

  bool finished() const { return done_count_ == int64_t(graph_.tasks.size()); }
  int64_t running() const { return released_count_ - done_count_; }
  const StepGraph& graph() const { return graph_; }
  // Sum of the forward tasks' loss shares, in schedule order.
  double loss() const;
  // A forward task's loss share, reported at the end of the step (the
  // replicas read their losses back once per step, not per task).
  void set_loss(int64_t task, double loss);

 private:
  std::vector<FlowTensor> inputs_of(const StepTask& t);

  const Program& program_;
  StepGraph graph_;
  std::shared_ptr<const StepData> data_;
  int64_t step_;
  std::vector<bool> backward_;              // per section
  std::vector<int> flow_from_;              // per flow: the producer's section index
  Frontier frontier_;                       // the plan's release logic, over graph_
  std::vector<bool> released_, done_;       // per task
  std::vector<double> loss_of_task_;        // per task
  int64_t released_count_ = 0, done_count_ = 0;
  // (flow, sample) -> the producer's output / the consumer's input gradient.
  std::map<std::pair<int32_t, int32_t>, TensorRef> outputs_, grads_;
  // (section, replica, stage, micro-batch) -> what the neighbouring stage
  // handed that stage: hidden states forward, their gradient backward.
  std::map<std::tuple<int, int, int, int64_t>, StageTensor> stage_forward_, stage_backward_;
};

}  // namespace maestro
