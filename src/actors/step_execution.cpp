// StepExecution (see step_execution.h).
#include "actors/step_execution.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <stdexcept>

namespace maestro {

std::vector<bool> sections_with_backward(const Program& program) {
  std::vector<bool> bw(program.sections.size());
  for (size_t s = 0; s < program.sections.size(); ++s) bw[s] = program.sections[s].mode == Mode::Train;
  return bw;
}

namespace {

int section_index(const Program& p, const std::string& name) {
  for (size_t i = 0; i < p.sections.size(); ++i)
    if (p.sections[i].name == name) return int(i);
  throw std::logic_error(fmt::format("unknown section '{}'", name));
}

using StageKey = std::tuple<int, int, int, int64_t>;  // (section, replica, stage, micro-batch)
StageKey key_of(const StepTask& t, int stage) { return {t.section, t.replica, stage, t.micro_batch}; }

// Whether a task reads flow f's tensors: forward, activations on stage 0 and
// logits (the loss's teacher) on the last; backward, the gradients of the
// section's outputs on the last stage.
bool reads_flow(const Flow& f, const StepTask& t) {
  if (t.kind == TaskKind::Backward) return t.stage == t.stages - 1;
  return f.kind == FlowKind::Logits ? t.stage == t.stages - 1 : t.stage == 0;
}

}  // namespace

void add_data_dependencies(const Program& program, StepGraph& graph) {
  const size_t n_sections = program.sections.size();
  // task_of[kind][section][sample] = the task that emits the sample's tensors
  // across flows: forward, the last stage (outputs); backward, stage 0
  // (input gradients). Absent when the section has no such task.
  std::vector<std::vector<std::map<int32_t, int64_t>>> task_of(2, std::vector<std::map<int32_t, int64_t>>(n_sections));
  std::map<StageKey, int64_t> forward_of, backward_of;
  for (const StepTask& t : graph.tasks) {
    if (t.stage < 0 || t.stage >= t.stages) throw std::logic_error(fmt::format("task {}: stage out of range", t.id));
    const bool emits = t.kind == TaskKind::Forward ? t.stage == t.stages - 1 : t.stage == 0;
    if (emits)
      for (int32_t s : t.samples) task_of[int(t.kind)][t.section][s] = t.id;
    (t.kind == TaskKind::Forward ? forward_of : backward_of)[key_of(t, t.stage)] = t.id;
  }
  auto task = [](const std::map<StageKey, int64_t>& table, const StepTask& t, int stage, const char* what) {
    auto it = table.find(key_of(t, stage));
    if (it == table.end()) throw std::logic_error(fmt::format("task {} has no {} on stage {}", t.id, what, stage));
    return it->second;
  };
  const std::vector<bool> backward = sections_with_backward(program);
  std::vector<int> from, to;  // per flow: its sections' indices
  for (const Flow& f : program.flows) {
    from.push_back(section_index(program, f.from));
    to.push_back(section_index(program, f.to));
  }
  std::map<std::tuple<int, int, int>, int64_t> previous_backward;  // (section, replica, stage) -> last backward task
  for (StepTask& t : graph.tasks) {
    std::set<int64_t> deps(t.deps.begin(), t.deps.end());
    if (t.kind == TaskKind::Forward) {
      if (t.stage > 0) deps.insert(task(forward_of, t, t.stage - 1, "forward"));
      for (size_t fi = 0; fi < program.flows.size(); ++fi) {
        if (to[fi] != t.section || !reads_flow(program.flows[fi], t)) continue;
        const auto& producer = task_of[int(TaskKind::Forward)][from[fi]];
        for (int32_t s : t.samples)
          if (auto it = producer.find(s); it != producer.end()) deps.insert(it->second);
      }
    } else {
      deps.insert(task(forward_of, t, t.stage, "forward"));
      if (t.stage < t.stages - 1) deps.insert(task(backward_of, t, t.stage + 1, "backward"));
      for (size_t fi = 0; fi < program.flows.size(); ++fi) {
        const Flow& f = program.flows[fi];
        if (f.kind != FlowKind::Activations || from[fi] != t.section || !reads_flow(f, t)) continue;
        const int consumer = to[fi];
        if (!backward[consumer]) continue;
        const auto& cons = task_of[int(TaskKind::Backward)][consumer];
        for (int32_t s : t.samples)
          if (auto it = cons.find(s); it != cons.end()) deps.insert(it->second);
      }
      auto [prev, first] = previous_backward.try_emplace({t.section, t.replica, t.stage}, t.id);
      if (!first) {
        deps.insert(prev->second);
        prev->second = t.id;
      }
    }
    deps.erase(t.id);
    t.deps.assign(deps.begin(), deps.end());
  }
}

namespace {

// The StepGraph in the plan's terms (tasks, each section's micro-batches and
// replicas, the cap): what Frontier reads. Samples are not needed there.
Schedule as_schedule(const StepGraph& g, size_t sections, const std::vector<bool>& backward) {
  Schedule sch;
  sch.sections.resize(sections);
  for (size_t s = 0; s < sections; ++s) sch.sections[s].backward = backward[s];
  for (const StepTask& t : g.tasks) {
    if (t.id != int64_t(&t - g.tasks.data())) throw std::logic_error("StepGraph task ids must be their index");
    if (t.section < 0 || size_t(t.section) >= sections || t.micro_batch < 0)
      throw std::logic_error(fmt::format("task {}: section or micro-batch out of range", t.id));
    for (int64_t d : t.deps)
      if (d < 0 || d >= int64_t(g.tasks.size()))
        throw std::logic_error(fmt::format("task {}: dependency {} out of range", t.id, d));
    auto& mbs = sch.sections[size_t(t.section)].micro_batches;
    while (int64_t(mbs.size()) <= t.micro_batch) mbs.push_back(MicroBatch{int64_t(mbs.size()), 0, {}});
    mbs[size_t(t.micro_batch)].replica = t.replica;
    sch.tasks.push_back(Task{t.id, t.section, t.replica, t.stage,
                             t.kind == TaskKind::Forward ? Task::Kind::Forward : Task::Kind::Backward, t.micro_batch,
                             t.deps});
  }
  sch.in_flight_cap = g.in_flight_cap;
  return sch;
}

}  // namespace

StepExecution::StepExecution(const Program& program, StepGraph graph, std::shared_ptr<const StepData> data,
                             int64_t step)
    : program_(program),
      graph_(std::move(graph)),
      data_(std::move(data)),
      step_(step),
      backward_(sections_with_backward(program)),
      frontier_(as_schedule(graph_, program.sections.size(), backward_)) {
  for (const Flow& f : program_.flows) flow_from_.push_back(section_index(program_, f.from));
  released_.assign(graph_.tasks.size(), false);
  done_.assign(graph_.tasks.size(), false);
  loss_of_task_.assign(graph_.tasks.size(), 0.0);
}

std::vector<FlowTensor> StepExecution::inputs_of(const StepTask& t) {
  std::vector<FlowTensor> in;
  for (size_t fi = 0; fi < program_.flows.size(); ++fi) {
    const Flow& f = program_.flows[fi];
    const bool forward = t.kind == TaskKind::Forward;
    if (forward ? f.to != program_.sections[t.section].name : f.from != program_.sections[t.section].name) continue;
    if (!reads_flow(f, t)) continue;
    auto& table = forward ? outputs_ : grads_;
    for (int32_t s : t.samples) {
      auto it = table.find({int32_t(fi), s});
      if (it == table.end()) continue;
      in.push_back({int32_t(fi), s, std::move(it->second)});
      table.erase(it);  // each (flow, sample) is read by exactly one task
    }
  }
  return in;
}

std::vector<RunTask> StepExecution::release() {
  std::vector<RunTask> out;
  for (int64_t id : frontier_.take_ready()) {  // issue order
    const StepTask& t = graph_.tasks[size_t(id)];
    released_[size_t(id)] = true;
    ++released_count_;
    RunTask rt{step_, t, inputs_of(t), data_, {}};
    auto& stage_table = t.kind == TaskKind::Forward ? stage_forward_ : stage_backward_;
    if (auto it = stage_table.find(key_of(t, t.stage)); it != stage_table.end()) {
      rt.stage_in = std::move(it->second);
      stage_table.erase(it);
    }
    out.push_back(std::move(rt));
  }
  return out;
}

void StepExecution::complete(const TaskDone& done) {
  const StepTask& t = graph_.tasks.at(done.task);
  if (!released_[size_t(t.id)] || done_[size_t(t.id)])
    throw std::logic_error(fmt::format("task {} finished before it was released, or twice", t.id));
  done_[size_t(t.id)] = true;
  ++done_count_;
  // The hand-off to the next stage: forward on, backward back.
  const int next_stage = t.kind == TaskKind::Forward ? t.stage + 1 : t.stage - 1;
  if (next_stage >= 0 && next_stage < t.stages && (t.kind == TaskKind::Forward || backward_[t.section])) {
    if (done.stage_out.empty())
      throw std::logic_error(fmt::format("task {} (stage {} of {}) handed nothing to stage {}", t.id, t.stage, t.stages,
                                         next_stage));
    (t.kind == TaskKind::Forward ? stage_forward_ : stage_backward_)[key_of(t, next_stage)] = done.stage_out;
  }
  auto& table = t.kind == TaskKind::Forward ? outputs_ : grads_;
  for (const FlowTensor& ft : done.outputs) {
    // A backward's input gradients are only kept where the producer trains.
    if (t.kind == TaskKind::Backward && !backward_[flow_from_.at(ft.flow)]) continue;
    table[{ft.flow, ft.sample}] = ft.tensor;
  }
  frontier_.complete(t.id);
}

void StepExecution::set_loss(int64_t task, double loss) {
  if (task < 0 || size_t(task) >= graph_.tasks.size() || graph_.tasks[size_t(task)].kind != TaskKind::Forward)
    throw std::logic_error(fmt::format("a loss for task {}, which is not a forward of this step", task));
  loss_of_task_[size_t(task)] = loss;
}

double StepExecution::loss() const {
  double sum = 0;
  for (const StepTask& t : graph_.tasks)
    if (t.kind == TaskKind::Forward) sum += loss_of_task_[t.id];
  return sum;
}

}  // namespace maestro
