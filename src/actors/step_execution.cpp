// StepExecution (see step_execution.h).
#include "actors/step_execution.h"

#include <fmt/format.h>

#include <stdexcept>

namespace maestro {

namespace {

using StageKey = std::tuple<int, int64_t, int64_t, int64_t>;  // (section, replica, stage, micro-batch)
StageKey key_of(const Task& t, int64_t stage) { return {t.section, t.replica, stage, t.micro_batch}; }

}  // namespace

StepExecution::StepExecution(const SectionGraph& graph, const Plan& plan, Schedule schedule,
                             std::shared_ptr<const StepData> data, int64_t step)
    : graph_(graph),
      plan_(plan),
      schedule_(std::move(schedule)),
      data_(std::move(data)),
      step_(step),
      frontier_(schedule_) {
  if (schedule_.sections.size() != graph_.nodes.size() || plan_.sections.size() != graph_.nodes.size())
    throw std::logic_error(fmt::format("schedule for {} sections, plan for {}, graph of {}", schedule_.sections.size(),
                                       plan_.sections.size(), graph_.nodes.size()));
  released_.assign(schedule_.tasks.size(), false);
  done_.assign(schedule_.tasks.size(), false);
  loss_of_task_.assign(schedule_.tasks.size(), 0.0);
}

// Where a flow's tensors enter a task: forward, activations on stage 0 and
// logits (the loss's teacher) on the last; backward, the gradients of the
// section's outputs on the last stage.
bool StepExecution::reads_edge(int edge, const Task& t) const {
  const int64_t last = stages(t.section) - 1;
  if (t.kind == Task::Kind::Backward) return graph_.edges[size_t(edge)].from == t.section && t.stage == last;
  if (graph_.edges[size_t(edge)].to != t.section) return false;
  return graph_.edges[size_t(edge)].kind == FlowKind::Logits ? t.stage == last : t.stage == 0;
}

std::vector<FlowTensor> StepExecution::inputs_of(const Task& t) {
  std::vector<FlowTensor> in;
  auto& table = t.kind == Task::Kind::Forward ? outputs_ : grads_;
  for (size_t e = 0; e < graph_.edges.size(); ++e) {
    if (!reads_edge(int(e), t)) continue;
    for (int32_t s : schedule_.micro_batch_of(t).samples) {
      auto it = table.find({int32_t(e), s});
      if (it == table.end()) continue;
      in.push_back({int32_t(e), s, std::move(it->second)});
      table.erase(it);  // each (flow, sample) is read by exactly one task
    }
  }
  return in;
}

std::vector<RunTask> StepExecution::release() {
  std::vector<RunTask> out;
  for (int64_t id : frontier_.take_ready()) {  // issue order
    const Task& t = schedule_.tasks[size_t(id)];
    released_[size_t(id)] = true;
    ++released_count_;
    RunTask rt{step_, t, schedule_.micro_batch_of(t).samples, inputs_of(t), data_, {}};
    auto& stage_table = t.kind == Task::Kind::Forward ? stage_forward_ : stage_backward_;
    if (auto it = stage_table.find(key_of(t, t.stage)); it != stage_table.end()) {
      rt.stage_in = std::move(it->second);
      stage_table.erase(it);
    }
    out.push_back(std::move(rt));
  }
  return out;
}

void StepExecution::complete(const TaskDone& done) {
  if (done.task < 0 || size_t(done.task) >= schedule_.tasks.size())
    throw std::logic_error(fmt::format("task {} is not in the step's schedule", done.task));
  const Task& t = schedule_.tasks[size_t(done.task)];
  if (!released_[size_t(t.id)] || done_[size_t(t.id)])
    throw std::logic_error(fmt::format("task {} finished before it was released, or twice", t.id));
  done_[size_t(t.id)] = true;
  ++done_count_;
  const bool forward = t.kind == Task::Kind::Forward;
  // The hand-off to the next stage: forward on, backward back.
  const int64_t next_stage = forward ? t.stage + 1 : t.stage - 1;
  if (next_stage >= 0 && next_stage < stages(t.section)) {
    if (done.stage_out.empty())
      throw std::logic_error(fmt::format("task {} (stage {} of {}) handed nothing to stage {}", t.id, t.stage,
                                         stages(t.section), next_stage));
    (forward ? stage_forward_ : stage_backward_)[key_of(t, next_stage)] = done.stage_out;
  }
  auto& table = forward ? outputs_ : grads_;
  for (const FlowTensor& ft : done.outputs) {
    if (ft.flow < 0 || size_t(ft.flow) >= graph_.edges.size())
      throw std::logic_error(fmt::format("task {}: output on flow {} of {}", t.id, ft.flow, graph_.edges.size()));
    // A backward's input gradients are only kept where the producer trains.
    if (!forward && !schedule_.sections[size_t(graph_.edges[size_t(ft.flow)].from)].backward) continue;
    table[{ft.flow, ft.sample}] = ft.tensor;
  }
  frontier_.complete(t.id);
}

void StepExecution::set_loss(int64_t task, double loss) {
  if (task < 0 || size_t(task) >= schedule_.tasks.size() || schedule_.tasks[size_t(task)].kind != Task::Kind::Forward)
    throw std::logic_error(fmt::format("a loss for task {}, which is not a forward of this step", task));
  loss_of_task_[size_t(task)] = loss;
}

double StepExecution::loss() const {
  double sum = 0;
  for (const Task& t : schedule_.tasks)
    if (t.kind == Task::Kind::Forward) sum += loss_of_task_[size_t(t.id)];
  return sum;
}

}  // namespace maestro
