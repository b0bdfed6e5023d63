// The runtime's plan and per-step schedule (see plan_adapter.h).
#include "actors/plan_adapter.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "actors/step_execution.h"
#include "config/runtime_config.h"
#include "graph/model_tensors.h"
#include "plan/roofline_cost.h"
#include "plan/schedule.h"

namespace maestro {

namespace {

std::string where(const Section& s) { return fmt::format("{}:{}:{}", s.loc.file, s.loc.line, s.loc.col); }

}  // namespace

std::vector<SectionRun> resolve_section_runs(const Program& program, int64_t devices) {
  std::vector<SectionRun> runs;
  for (const Section& s : program.sections) {
    if (s.parallel.tp.value_or(1) > 1)
      throw std::invalid_argument(fmt::format("{}: section '{}': tp = {}: the CPU runtime runs tp = 1 only",
                                              where(s), s.name, *s.parallel.tp));
    SectionRun r;
    r.pp = s.parallel.pp.value_or(1);
    if (r.pp > 1) {
      try {
        stage_layers(s.model, 0, r.pp);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("{}: section '{}': pp = {}: {}", where(s), s.name, r.pp, e.what()));
      }
    }
    r.dp = s.parallel.dp.value_or(1);
    r.micro_batch = s.micro_batch.value_or(std::min<int64_t>(8, program.train.global_batch));
    if (r.dp < 1 || r.micro_batch < 1)
      throw std::invalid_argument(fmt::format("{}: section '{}': dp and micro_batch must be >= 1", where(s), s.name));
    runs.push_back(r);
  }
  (void)devices;
  return runs;
}

StepPlanner::StepPlanner(const Program& program, const std::vector<SectionRun>& runs, std::string schedule)
    : program_(program), graph_(build_graph(program)), schedule_(std::move(schedule)) {
  RuntimeConfig config;
  config.cluster.device = "cpu";
  int64_t devices = 0;
  for (const SectionRun& r : runs) devices = std::max(devices, r.dp * r.pp);
  config.cluster.devices = devices;
  config.cluster.devices_per_node = devices;
  cluster_ = make_cluster(config);
  cost_ = std::make_unique<RooflineCost>(graph_, cluster_);
  // Every section spans the same CPU slots (co-located), tp = 1.
  for (const SectionRun& r : runs) plan_.sections.push_back(SectionPlan{0, r.dp * r.pp, 1, r.pp, r.dp, r.micro_batch});
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
