// The runtime's plan and per-step schedule (see plan_adapter.h).
#include "actors/plan_adapter.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "actors/step_execution.h"
#include "config/runtime_config.h"
#include "graph/model_tensors.h"
#include "plan/planner.h"
#include "plan/roofline_cost.h"
#include "plan/schedule.h"

namespace maestro {

namespace {

std::string where(const Section& s) { return fmt::format("{}:{}:{}", s.loc.file, s.loc.line, s.loc.col); }

}  // namespace

namespace {

Cluster cpu_cluster(int64_t devices) {
  RuntimeConfig config;
  config.cluster.device = "cpu";
  config.cluster.devices = devices;
  config.cluster.devices_per_node = devices;
  return make_cluster(config);
}

}  // namespace

std::vector<SectionRun> resolve_section_runs(const Program& program, int64_t devices, const Batch& sample) {
  Program fixed = program;  // tp = 1 where it is auto: the CPU runtime has no tensor split
  bool any_auto = false;
  for (Section& s : fixed.sections) {
    if (s.parallel.tp.value_or(1) > 1)
      throw std::invalid_argument(fmt::format("{}: section '{}': tp = {}: the CPU runtime runs tp = 1 only",
                                              where(s), s.name, *s.parallel.tp));
    if (s.parallel.pp.value_or(1) > 1) {
      try {
        stage_layers(s.model, 0, *s.parallel.pp);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("{}: section '{}': pp = {}: {}", where(s), s.name, *s.parallel.pp,
                                                e.what()));
      }
    }
    if (s.parallel.dp && *s.parallel.dp < 1)
      throw std::invalid_argument(fmt::format("{}: section '{}': dp must be >= 1", where(s), s.name));
    if (s.micro_batch && *s.micro_batch < 1)
      throw std::invalid_argument(fmt::format("{}: section '{}': micro_batch must be >= 1", where(s), s.name));
    any_auto = any_auto || !s.parallel.dp || !s.parallel.pp || !s.micro_batch;
    s.parallel.tp = 1;
  }
  std::vector<SectionRun> runs(program.sections.size());
  if (any_auto) {
    // Sections share the CPU slots; an explicit dp·pp may ask for more replicas than slots.
    int64_t slots = devices;
    for (const Section& s : fixed.sections)
      slots = std::max(slots, s.parallel.dp.value_or(1) * s.parallel.pp.value_or(1));
    const SectionGraph graph = build_graph(fixed);
    const Cluster cluster = cpu_cluster(slots);
    const RooflineCost cost(graph, cluster);
    Plan plan;
    try {
      plan = plan_program(graph, cluster, cost, sample);
    } catch (const PlanError& e) {
      throw std::invalid_argument(fmt::format("cannot plan the run on {} CPU slots: {}", slots, e.what()));
    }
    for (size_t s = 0; s < runs.size(); ++s)
      runs[s] = SectionRun{plan.sections[s].dp, plan.sections[s].pp, plan.sections[s].micro_batch};
  }
  // Explicit values as written (the planner keeps them too).
  for (size_t s = 0; s < runs.size(); ++s) {
    const Section& sec = program.sections[s];
    if (sec.parallel.dp) runs[s].dp = *sec.parallel.dp;
    if (sec.parallel.pp) runs[s].pp = *sec.parallel.pp;
    if (sec.micro_batch) runs[s].micro_batch = *sec.micro_batch;
  }
  return runs;
}

StepPlanner::StepPlanner(const Program& program, const std::vector<SectionRun>& runs, std::string schedule)
    : program_(program), graph_(build_graph(program)), schedule_(std::move(schedule)) {
  int64_t devices = 0;
  for (const SectionRun& r : runs) devices = std::max(devices, r.dp * r.pp);
  cluster_ = cpu_cluster(devices);
  cost_ = std::make_unique<RooflineCost>(graph_, cluster_);
  // Every section spans the same CPU slots (co-located), tp = 1.
  int64_t max_pp = 1;
  for (const SectionRun& r : runs) {
    plan_.sections.push_back(SectionPlan{0, r.dp * r.pp, 1, r.pp, r.dp, r.micro_batch});
    max_pp = std::max(max_pp, r.pp);
  }
  // The planner's cap on in-flight micro-batches (Frontier): one per stage.
  plan_.in_flight_cap = in_flight_micro_batches(max_pp);
  // The monolithic baseline's one micro-batch size: the loss section's.
  monolithic_micro_batch_ = runs.back().micro_batch;
  for (size_t s = 0; s < program.sections.size(); ++s)
    if (!program.sections[s].loss.empty()) monolithic_micro_batch_ = runs[s].micro_batch;
}

StepPlanner::~StepPlanner() = default;

StepGraph StepPlanner::step_graph(const StepData& step) const {
  const Schedule schedule = schedule_ == "monolithic"
                                ? monolithic_schedule(graph_, plan_, step.batch, monolithic_micro_batch_)
                                : wavefront_schedule(graph_, plan_, *cost_, step.batch);
  StepGraph g;
  g.in_flight_cap = schedule.in_flight_cap;
  for (const Task& t : schedule.tasks)
    g.tasks.push_back(StepTask{t.id, t.section, int(t.replica),
                               t.kind == Task::Kind::Forward ? TaskKind::Forward : TaskKind::Backward, t.micro_batch,
                               schedule.micro_batch_of(t).samples, t.deps, int(t.stage),
                               int(plan_.sections[size_t(t.section)].pp)});
  // The data rules are the schedule's already; this adds the chain of each
  // replica's backwards in issue order (deterministic gradient accumulation).
  add_data_dependencies(program_, g);
  return g;
}

}  // namespace maestro
