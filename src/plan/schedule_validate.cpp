// validate(): every rule of schedule.h checked on a built Schedule, apart
// from the builders (schedule.cpp), so that a bug there can't hide itself.
#include "plan/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace maestro {

namespace {

// The dependency rules of schedule.h checked from the samples up, written
// apart from the builders' add_rule_deps so that a bug there can't hide itself:
// for every task and every sample of its micro-batch, the task (section,
// kind, stage) that must finish first — the sample's forward upstream, its
// consumers' backward downstream, the neighbouring stage — has to be among
// the task's deps. Extra deps (monolithic lanes, chained backwards) are
// allowed. Expects ids, ranges and coverage already checked.
std::vector<std::string> missing_dependencies(const SectionGraph& g, const Plan& plan, const Schedule& sch) {
  const size_t n = sch.batch.samples.size();
  // run[kind][section][stage * n + sample] = the task running the sample there, -1 when none.
  std::vector<std::vector<std::vector<int64_t>>> run(2, std::vector<std::vector<int64_t>>(g.nodes.size()));
  for (size_t s = 0; s < g.nodes.size(); ++s)
    for (auto& kind : run) kind[s].assign(size_t(plan.sections[s].pp) * n, -1);
  for (const Task& t : sch.tasks)
    for (int32_t i : sch.micro_batch_of(t).samples)
      run[size_t(t.kind)][size_t(t.section)][size_t(t.stage) * n + size_t(i)] = t.id;
  auto task_at = [&](Task::Kind k, int s, int64_t stage, int32_t i) {
    return run[size_t(k)][size_t(s)][size_t(stage) * n + size_t(i)];
  };
  std::vector<std::string> bad;
  std::vector<int64_t> dep_of(sch.tasks.size(), -1);  // dep_of[d] == t.id: d is among t's deps
  for (const Task& t : sch.tasks) {
    for (int64_t d : t.deps) dep_of[size_t(d)] = t.id;
    const int64_t last = plan.sections[size_t(t.section)].pp - 1;
    const char* kind = t.kind == Task::Kind::Forward ? "forward" : "backward";
    auto need = [&](Task::Kind k, int s, int64_t stage, int32_t i, const char* why) {
      const int64_t d = task_at(k, s, stage, i);
      if (d >= 0 && dep_of[size_t(d)] == t.id) return;
      bad.push_back(fmt::format("task {} ({} '{}' mb {} stage {}) lacks its dependency on the {} of sample {} in '{}' "
                                "stage {} ({}): task {}",
                                t.id, kind, g.nodes[size_t(t.section)].name, t.micro_batch, t.stage,
                                k == Task::Kind::Forward ? "forward" : "backward", i, g.nodes[size_t(s)].name, stage,
                                why, d));
      if (d >= 0) dep_of[size_t(d)] = t.id;  // reported once per task
    };
    for (int32_t i : sch.micro_batch_of(t).samples) {
      const ModalitySet m = sch.batch.samples[size_t(i)].modalities;
      if (t.kind == Task::Kind::Forward && t.stage > 0) {
        need(Task::Kind::Forward, t.section, t.stage - 1, i, "previous stage");
      } else if (t.kind == Task::Kind::Forward) {
        for (const GraphEdge& e : g.edges)
          if (e.to == t.section && g.carries(int(&e - g.edges.data()), m))
            need(Task::Kind::Forward, e.from, plan.sections[size_t(e.from)].pp - 1, i, "producer");
      } else if (t.stage < last) {
        need(Task::Kind::Backward, t.section, t.stage + 1, i, "next stage");
      } else {
        need(Task::Kind::Forward, t.section, t.stage, i, "own forward");
        for (const GraphEdge& e : g.edges)
          if (e.from == t.section && e.kind == FlowKind::Activations && sch.sections[size_t(e.to)].backward &&
              g.carries(int(&e - g.edges.data()), m))
            need(Task::Kind::Backward, e.to, 0, i, "consumer");
      }
    }
  }
  return bad;
}

}  // namespace

std::vector<std::string> validate(const SectionGraph& g, const Plan& plan, const Schedule& sch) {
  std::vector<std::string> bad;
  try {
    check_plan(g, plan);
  } catch (const std::invalid_argument& e) {
    return {e.what()};
  }
  if (sch.sections.size() != g.nodes.size())
    return {fmt::format("schedule has {} sections, the program {}", sch.sections.size(), g.nodes.size())};
  const size_t n = sch.batch.samples.size();
  // Micro-batches: ids, replicas, and every active sample exactly once.
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const std::string& name = g.nodes[s].name;
    if (sch.sections[s].backward != (g.section(int(s)).mode == Mode::Train))
      bad.push_back(fmt::format("section '{}': backward flag does not match its mode", name));
    std::vector<int> seen(n, 0);
    const auto& mbs = sch.sections[s].micro_batches;
    for (size_t k = 0; k < mbs.size(); ++k) {
      if (mbs[k].id != int64_t(k)) bad.push_back(fmt::format("section '{}': micro-batch {} has id {}", name, k, mbs[k].id));
      if (mbs[k].replica < 0 || mbs[k].replica >= plan.sections[s].dp)
        bad.push_back(fmt::format("section '{}': micro-batch {} on replica {} of {}", name, k, mbs[k].replica,
                                  plan.sections[s].dp));
      if (mbs[k].samples.empty()) bad.push_back(fmt::format("section '{}': micro-batch {} is empty", name, k));
      for (int32_t i : mbs[k].samples) {
        if (i < 0 || size_t(i) >= n) {
          bad.push_back(fmt::format("section '{}': micro-batch {} names sample {} of {}", name, k, i, n));
          continue;
        }
        seen[size_t(i)]++;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      const bool active = g.active(int(s), sch.batch.samples[i].modalities);
      if (seen[i] != (active ? 1 : 0))
        bad.push_back(fmt::format("section '{}': sample {} ({}) is in {} micro-batches", name, i,
                                  active ? "active" : "inactive", seen[i]));
    }
  }
  if (!bad.empty()) return bad;
  // Tasks: ids, ranges, one per (section, micro-batch, stage, kind), deps earlier.
  std::vector<std::vector<int>> count(g.nodes.size());
  for (size_t s = 0; s < g.nodes.size(); ++s)
    count[s].assign(sch.sections[s].micro_batches.size() * size_t(plan.sections[s].pp) * 2, 0);
  for (size_t k = 0; k < sch.tasks.size(); ++k) {
    const Task& t = sch.tasks[k];
    if (t.id != int64_t(k)) bad.push_back(fmt::format("task {} has id {}", k, t.id));
    if (t.section < 0 || size_t(t.section) >= g.nodes.size() || t.micro_batch < 0 ||
        size_t(t.micro_batch) >= sch.sections[size_t(t.section)].micro_batches.size() || t.stage < 0 ||
        t.stage >= plan.sections[size_t(t.section)].pp) {
      bad.push_back(fmt::format("task {}: section, micro-batch or stage out of range", k));
      continue;
    }
    if (t.replica != sch.micro_batch_of(t).replica)
      bad.push_back(fmt::format("task {}: replica {} but its micro-batch is on replica {}", k, t.replica,
                                sch.micro_batch_of(t).replica));
    if (t.kind == Task::Kind::Backward && !sch.sections[size_t(t.section)].backward)
      bad.push_back(fmt::format("task {}: backward of frozen section '{}'", k, g.nodes[size_t(t.section)].name));
    const size_t slot = size_t((t.micro_batch * plan.sections[size_t(t.section)].pp + t.stage) * 2 +
                               (t.kind == Task::Kind::Backward ? 1 : 0));
    count[size_t(t.section)][slot]++;
    for (int64_t d : t.deps)
      if (d < 0 || d >= t.id) bad.push_back(fmt::format("task {}: dependency {} does not precede it", k, d));
  }
  for (size_t s = 0; s < g.nodes.size(); ++s)
    for (size_t slot = 0; slot < count[s].size(); ++slot) {
      const bool backward = slot % 2 == 1;
      const int want = backward && !sch.sections[s].backward ? 0 : 1;
      if (count[s][slot] != want)
        bad.push_back(fmt::format("section '{}': micro-batch {} stage {} {} has {} tasks", g.nodes[s].name,
                                  slot / 2 / size_t(plan.sections[s].pp), slot / 2 % size_t(plan.sections[s].pp),
                                  backward ? "backward" : "forward", count[s][slot]));
    }
  if (!bad.empty()) return bad;
  // Every rule's dependency is present, restated per sample.
  for (const std::string& line : missing_dependencies(g, plan, sch)) bad.push_back(line);
  // Waves: every task once, after all of its deps.
  std::vector<int64_t> wave_of(sch.tasks.size(), -1);
  for (size_t w = 0; w < sch.waves.size(); ++w)
    for (int64_t id : sch.waves[w]) {
      if (id < 0 || size_t(id) >= sch.tasks.size() || wave_of[size_t(id)] >= 0) {
        bad.push_back(fmt::format("wave {}: task {} is out of range or in two waves", w, id));
        continue;
      }
      wave_of[size_t(id)] = int64_t(w);
    }
  for (const Task& t : sch.tasks) {
    if (wave_of[size_t(t.id)] < 0) {
      bad.push_back(fmt::format("task {} is in no wave", t.id));
      continue;
    }
    for (int64_t d : t.deps)
      if (wave_of[size_t(d)] >= wave_of[size_t(t.id)])
        bad.push_back(fmt::format("task {} is in wave {}, its dependency {} in wave {}", t.id, wave_of[size_t(t.id)], d,
                                  wave_of[size_t(d)]));
  }
  return bad;
}

}  // namespace maestro
