// The wavefront and monolithic schedulers, the rule checker and the
// Frontier (see schedule.h; the algorithm step by step is in
// docs/scheduler.md).
#include "plan/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <stdexcept>

namespace maestro {

namespace {

Mode mode_of(const SectionGraph& g, int s) { return g.section(s).mode; }

void check_plan(const SectionGraph& g, const Plan& plan) {
  if (plan.sections.size() != g.nodes.size())
    throw std::invalid_argument(
        fmt::format("plan has {} sections, the program {}", plan.sections.size(), g.nodes.size()));
  for (size_t s = 0; s < plan.sections.size(); ++s) {
    const SectionPlan& p = plan.sections[s];
    if (p.tp < 1 || p.pp < 1 || p.dp < 1 || p.micro_batch < 1 || p.first_device < 0)
      throw std::invalid_argument(fmt::format("plan for section '{}': tp, pp, dp and micro_batch must be >= 1",
                                              g.nodes[s].name));
    if (p.devices != p.tp * p.pp * p.dp)
      throw std::invalid_argument(fmt::format("plan for section '{}': devices = {} but tp·pp·dp = {}",
                                              g.nodes[s].name, p.devices, p.tp * p.pp * p.dp));
  }
  if (plan.in_flight_cap < 0) throw std::invalid_argument("plan: in_flight_cap must be >= 0");
}

// Per section: the batch indices of the samples it is active on, loader order.
std::vector<std::vector<int32_t>> active_samples(const SectionGraph& g, const Batch& batch) {
  std::vector<std::vector<int32_t>> active(g.nodes.size());
  for (size_t i = 0; i < batch.samples.size(); ++i)
    for (size_t s = 0; s < g.nodes.size(); ++s)
      if (g.active(int(s), batch.samples[i].modalities)) active[s].push_back(int32_t(i));
  return active;
}

// mb_of[s][i]: the micro-batch of section s holding sample i, -1 when none.
std::vector<std::vector<int32_t>> micro_batch_index(const Schedule& sch) {
  std::vector<std::vector<int32_t>> mb_of(sch.sections.size(), std::vector<int32_t>(sch.batch.samples.size(), -1));
  for (size_t s = 0; s < sch.sections.size(); ++s)
    for (const MicroBatch& mb : sch.sections[s].micro_batches)
      for (int32_t i : mb.samples) mb_of[s][i] = int32_t(mb.id);
  return mb_of;
}

// Task ids by (section, micro-batch, stage): forward and backward tables.
struct TaskIndex {
  std::vector<std::vector<int64_t>> forward, backward;  // [section][mb * pp + stage], -1 when absent
  TaskIndex(const Schedule& sch, const Plan& plan) : forward(sch.sections.size()), backward(sch.sections.size()) {
    for (size_t s = 0; s < sch.sections.size(); ++s) {
      const size_t n = sch.sections[s].micro_batches.size() * size_t(plan.sections[s].pp);
      forward[s].assign(n, -1);
      backward[s].assign(n, -1);
    }
    for (const Task& t : sch.tasks) {
      auto& table = t.kind == Task::Kind::Forward ? forward : backward;
      table[t.section][size_t(t.micro_batch * plan.sections[t.section].pp + t.stage)] = t.id;
    }
  }
};

// The dependencies schedule.h's rules require, per task (sorted, unique).
std::vector<std::vector<int64_t>> rule_deps(const SectionGraph& g, const Plan& plan, const Schedule& sch) {
  const auto mb_of = micro_batch_index(sch);
  const TaskIndex idx(sch, plan);
  std::vector<std::vector<int64_t>> deps(sch.tasks.size());
  for (const Task& t : sch.tasks) {
    const int s = t.section;
    const int64_t pp = plan.sections[s].pp;
    auto& d = deps[size_t(t.id)];
    const MicroBatch& mb = sch.micro_batch_of(t);
    if (t.kind == Task::Kind::Forward) {
      if (t.stage > 0) {
        d.push_back(idx.forward[s][size_t(t.micro_batch * pp + t.stage - 1)]);
      } else {
        for (int e : g.nodes[s].producers) {
          const int p = g.edges[e].from;
          const int64_t ppp = plan.sections[p].pp;
          for (int32_t i : mb.samples)
            if (g.carries(e, sch.batch.samples[i].modalities) && mb_of[p][i] >= 0)
              d.push_back(idx.forward[p][size_t(mb_of[p][i] * ppp + ppp - 1)]);
        }
      }
    } else if (t.stage < pp - 1) {
      d.push_back(idx.backward[s][size_t(t.micro_batch * pp + t.stage + 1)]);
    } else {
      d.push_back(idx.forward[s][size_t(t.micro_batch * pp + t.stage)]);
      for (int e : g.nodes[s].consumers) {
        const int c = g.edges[e].to;
        if (g.edges[e].kind != FlowKind::Activations || !sch.sections[c].backward) continue;
        for (int32_t i : mb.samples)
          if (g.carries(e, sch.batch.samples[i].modalities) && mb_of[c][i] >= 0)
            d.push_back(idx.backward[c][size_t(mb_of[c][i] * plan.sections[c].pp)]);
      }
    }
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
  }
  return deps;
}

void add_task(Schedule& sch, int section, int64_t replica, int64_t stage, Task::Kind kind, int64_t mb) {
  sch.tasks.push_back(Task{int64_t(sch.tasks.size()), section, replica, stage, kind, mb, {}});
}

// Rule deps merged into whatever deps the tasks already have; then waves.
void finish(const SectionGraph& g, const Plan& plan, Schedule& sch) {
  const auto deps = rule_deps(g, plan, sch);
  for (Task& t : sch.tasks) {
    t.deps.insert(t.deps.end(), deps[size_t(t.id)].begin(), deps[size_t(t.id)].end());
    std::sort(t.deps.begin(), t.deps.end());
    t.deps.erase(std::unique(t.deps.begin(), t.deps.end()), t.deps.end());
  }
  sch.waves = compute_waves(sch.tasks);
}

Schedule empty_schedule(const SectionGraph& g, const Plan& plan, Batch batch, Schedule::Policy policy) {
  check_plan(g, plan);
  Schedule sch;
  sch.policy = policy;
  sch.batch = std::move(batch);
  sch.in_flight_cap = plan.in_flight_cap;
  sch.sections.resize(g.nodes.size());
  for (size_t s = 0; s < g.nodes.size(); ++s) sch.sections[s].backward = mode_of(g, int(s)) == Mode::Train;
  return sch;
}

}  // namespace

Schedule wavefront_schedule(const SectionGraph& g, const Plan& plan, const CostModel& cost, Batch batch) {
  Schedule sch = empty_schedule(g, plan, std::move(batch), Schedule::Policy::Wavefront);
  const auto& samples = sch.batch.samples;
  const size_t n = samples.size();
  const auto active = active_samples(g, sch.batch);

  // round[s][i]: the position, within its replica's sequence, of section s's
  // micro-batch holding sample i — when its consumers need it from producers.
  std::vector<std::vector<int32_t>> round(g.nodes.size(), std::vector<int32_t>(n, 0));
  // replica_of[s][i]: the replica of section s that runs sample i.
  std::vector<std::vector<int32_t>> replica_of(g.nodes.size(), std::vector<int32_t>(n, -1));
  std::vector<const Sample*> one(1);
  for (auto it = g.topo_order.rbegin(); it != g.topo_order.rend(); ++it) {  // consumers first
    const int s = *it;
    const SectionPlan& sp = plan.sections[s];
    struct Key {
      int32_t need;      // the earliest round a consumer needs the sample in
      int phase;         // 0 lead (no producer work), 1 fed, 2 tail (no producer work)
      double cost;       // forward + backward of the sample alone
      int32_t sample;
    };
    std::vector<Key> keys;
    keys.reserve(active[s].size());
    for (int32_t i : active[s]) {
      Key k{0, 0, 0, i};
      bool fed = false;
      const ModalitySet mods = samples[i].modalities;
      bool needed = false;
      for (int e : g.nodes[s].consumers)
        if (g.carries(e, mods)) {
          const int32_t r = round[g.edges[e].to][i];
          k.need = needed ? std::min(k.need, r) : r;
          needed = true;
        }
      for (int e : g.nodes[s].producers) fed = fed || g.carries(e, mods);
      k.phase = fed ? 1 : 0;
      one[0] = &samples[i];
      k.cost = cost.forward_s(s, one, sp) + (sch.sections[s].backward ? cost.backward_s(s, one, sp) : 0.0);
      keys.push_back(k);
    }
    // Samples with no producer work fill both ends: every other one by cost
    // leads (covering the producers' first forwards), the rest trail
    // (covering the producers' last backwards).
    if (!g.nodes[s].producers.empty()) {
      std::vector<Key*> unfed;
      for (Key& k : keys)
        if (k.phase == 0) unfed.push_back(&k);
      std::sort(unfed.begin(), unfed.end(),
                [](const Key* a, const Key* b) { return a->cost != b->cost ? a->cost > b->cost : a->sample < b->sample; });
      for (size_t j = 1; j < unfed.size(); j += 2) unfed[j]->phase = 2;
    }
    std::vector<std::vector<Key>> per_replica(size_t(sp.dp));
    if (plan.levers.reorder) {
      // Longest first onto the least-loaded replica (LPT: loads differ by at
      // most one sample's cost), then each replica's list in the order the
      // consumers need its samples.
      std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
        return a.cost != b.cost ? a.cost > b.cost : a.sample < b.sample;
      });
      // On a consumer's own devices, with replicas nested in the consumer's
      // (tp·pp devices dividing the consumer's), a sample goes to one of the
      // replicas inside the consumer replica that runs it: its output stays
      // on that replica's devices and no other replica waits for it.
      // (Not the other way round: a producer replica spanning several
      // consumer replicas would inherit their grouping, not its own balance.)
      int nest = -1;
      int64_t group = 1;  // replicas per consumer replica
      for (int e : g.nodes[s].consumers) {
        const SectionPlan& cp = plan.sections[size_t(g.edges[e].to)];
        if (nest < 0 && cp.first_device == sp.first_device && cp.devices == sp.devices &&
            (cp.tp * cp.pp) % (sp.tp * sp.pp) == 0)
          nest = g.edges[e].to, group = cp.tp * cp.pp / (sp.tp * sp.pp);
      }
      using Load = std::pair<double, int64_t>;  // (cost so far, replica)
      std::priority_queue<Load, std::vector<Load>, std::greater<>> least;
      std::vector<double> load(size_t(sp.dp), 0.0);
      for (int64_t r = 0; r < sp.dp; ++r) least.push({0.0, r});
      for (const Key& k : keys) {
        const int32_t home = nest >= 0 ? replica_of[size_t(nest)][size_t(k.sample)] : -1;
        int64_t r = -1;
        if (home >= 0) {
          for (int64_t q = home * group; q < (home + 1) * group; ++q)
            if (r < 0 || load[size_t(q)] < load[size_t(r)]) r = q;
        } else {
          // Least loaded; heap entries whose load is stale are dropped.
          while (least.top().first != load[size_t(least.top().second)]) least.pop();
          r = least.top().second;
          least.pop();
        }
        per_replica[size_t(r)].push_back(k);
        load[size_t(r)] += k.cost;
        least.push({load[size_t(r)], r});
      }
      for (auto& mine : per_replica)
        std::sort(mine.begin(), mine.end(), [](const Key& a, const Key& b) {
          if (a.need != b.need) return a.need < b.need;
          if (a.phase != b.phase) return a.phase < b.phase;
          if (a.cost != b.cost) return a.cost > b.cost;
          return a.sample < b.sample;
        });
    } else {
      // Loader order, micro_batch consecutive samples to each replica in turn.
      for (size_t j = 0; j < keys.size(); ++j)
        per_replica[(j / size_t(sp.micro_batch)) % size_t(sp.dp)].push_back(keys[j]);
    }
    // Each replica's list cut into micro-batches: micro_batch samples, or by
    // tokens (ScheduleLevers::token_micro_batches); ids go round by round.
    int64_t token_budget = 0;
    std::vector<int64_t> tokens_of(active[s].empty() ? 0 : n, 0);
    if (plan.levers.token_micro_batches && !active[s].empty()) {
      int64_t sum = 0;
      std::vector<int64_t> all;
      for (int32_t i : active[s]) {
        const Sample& x = samples[size_t(i)];
        tokens_of[size_t(i)] = std::max<int64_t>(1, g.tokens(s, {x.modalities, x.text_tokens, x.images, x.audio_frames}));
        sum += tokens_of[size_t(i)];
        all.push_back(tokens_of[size_t(i)]);
      }
      // micro_batch × the mean, within the memory bound of the micro_batch
      // largest samples (always: the mean is at most the largest).
      token_budget = std::max<int64_t>(1, sp.micro_batch * sum / int64_t(all.size()));
    }
    std::vector<std::vector<std::vector<int32_t>>> cut(size_t(sp.dp));
    for (int64_t r = 0; r < sp.dp; ++r) {
      auto& out = cut[size_t(r)];
      int64_t held = 0;
      for (const Key& k : per_replica[size_t(r)]) {
        const bool full = out.empty() || (token_budget > 0 ? held + tokens_of[size_t(k.sample)] > token_budget
                                                           : int64_t(out.back().size()) == sp.micro_batch);
        if (full) out.emplace_back(), held = 0;
        out.back().push_back(k.sample);
        held += token_budget > 0 ? tokens_of[size_t(k.sample)] : 0;
      }
    }
    auto& mbs = sch.sections[s].micro_batches;
    for (size_t c = 0;; ++c) {
      bool any = false;
      for (int64_t r = 0; r < sp.dp; ++r) {
        if (c >= cut[size_t(r)].size()) continue;
        any = true;
        MicroBatch mb{int64_t(mbs.size()), r, std::move(cut[size_t(r)][c])};
        for (int32_t i : mb.samples) round[s][i] = int32_t(c), replica_of[s][i] = int32_t(r);
        mbs.push_back(std::move(mb));
      }
      if (!any) break;
    }
  }

  // Issue order: forwards producers first, then backwards in reverse.
  for (int s : g.topo_order)
    for (const MicroBatch& mb : sch.sections[s].micro_batches)
      for (int64_t st = 0; st < plan.sections[s].pp; ++st) add_task(sch, s, mb.replica, st, Task::Kind::Forward, mb.id);
  for (auto it = g.topo_order.rbegin(); it != g.topo_order.rend(); ++it)
    if (sch.sections[*it].backward)
      for (const MicroBatch& mb : sch.sections[*it].micro_batches)
        for (int64_t st = plan.sections[*it].pp - 1; st >= 0; --st)
          add_task(sch, *it, mb.replica, st, Task::Kind::Backward, mb.id);
  finish(g, plan, sch);
  return sch;
}

Schedule monolithic_schedule(const SectionGraph& g, const Plan& plan, Batch batch, int64_t micro_batch) {
  if (micro_batch < 1) throw std::invalid_argument("monolithic schedule: micro_batch must be >= 1");
  Schedule sch = empty_schedule(g, plan, std::move(batch), Schedule::Policy::Monolithic);
  // The lanes bound what is in flight (one chunk per lane, ⌈L / dp_s⌉ per
  // replica of section s); a window cap on top would count a chunk's
  // chained, data-free forward links as feeds.
  sch.in_flight_cap = 0;
  const int64_t n = int64_t(sch.batch.samples.size());
  // As many lanes as the largest dp, so that every section spreads its
  // chunks over all of its own replicas (chunk c on replica c mod dp).
  int64_t lanes = 1;
  for (const SectionPlan& p : plan.sections) lanes = std::max(lanes, p.dp);
  std::vector<int64_t> last_of_lane(size_t(lanes), -1);
  auto chain = [&](int s, int64_t lane, int64_t stage, Task::Kind kind, int64_t mb) {
    add_task(sch, s, sch.sections[s].micro_batches[size_t(mb)].replica, stage, kind, mb);
    if (last_of_lane[size_t(lane)] >= 0) sch.tasks.back().deps.push_back(last_of_lane[size_t(lane)]);
    last_of_lane[size_t(lane)] = sch.tasks.back().id;
  };
  for (int64_t c = 0; c * micro_batch < n; ++c) {
    const int64_t lane = c % lanes;
    std::vector<std::pair<int, int64_t>> parts;  // (section, its micro-batch of this chunk), producers first
    for (int s : g.topo_order) {
      MicroBatch mb{int64_t(sch.sections[s].micro_batches.size()), c % plan.sections[s].dp, {}};
      for (int64_t i = c * micro_batch; i < std::min(n, (c + 1) * micro_batch); ++i)
        if (g.active(s, sch.batch.samples[size_t(i)].modalities)) mb.samples.push_back(int32_t(i));
      if (mb.samples.empty()) continue;
      parts.emplace_back(s, mb.id);
      sch.sections[s].micro_batches.push_back(std::move(mb));
    }
    for (const auto& [s, mb] : parts)
      for (int64_t st = 0; st < plan.sections[s].pp; ++st) chain(s, lane, st, Task::Kind::Forward, mb);
    for (auto it = parts.rbegin(); it != parts.rend(); ++it)
      if (sch.sections[it->first].backward)
        for (int64_t st = plan.sections[it->first].pp - 1; st >= 0; --st)
          chain(it->first, lane, st, Task::Kind::Backward, it->second);
  }
  finish(g, plan, sch);
  return sch;
}

namespace {

// The dependency rules of schedule.h checked from the samples up, written
// apart from the builders' rule_deps so that a bug there can't hide itself:
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
    if (sch.sections[s].backward != (mode_of(g, int(s)) == Mode::Train))
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

// ------------------------------------------------------------------ Frontier

namespace {
void heap_push(std::vector<int64_t>& heap, int64_t v) {
  heap.push_back(v);
  std::push_heap(heap.begin(), heap.end(), std::greater<>());
}
int64_t heap_pop(std::vector<int64_t>& heap) {
  std::pop_heap(heap.begin(), heap.end(), std::greater<>());
  const int64_t v = heap.back();
  heap.pop_back();
  return v;
}
}  // namespace

Frontier::Frontier(const Schedule& schedule) : cap_(schedule.in_flight_cap) {
  const auto& tasks = schedule.tasks;
  const size_t n = tasks.size();
  remaining_deps_.resize(n);
  dependents_offsets_.assign(n + 1, 0);
  for (const Task& t : tasks) {
    remaining_deps_[size_t(t.id)] = int32_t(t.deps.size());
    for (int64_t d : t.deps) dependents_offsets_[size_t(d) + 1]++;
  }
  for (size_t k = 0; k < n; ++k) dependents_offsets_[k + 1] += dependents_offsets_[k];
  dependents_.resize(size_t(dependents_offsets_.back()));
  {
    std::vector<int64_t> fill(dependents_offsets_.begin(), dependents_offsets_.end() - 1);
    for (const Task& t : tasks)
      for (int64_t d : t.deps) dependents_[size_t(fill[size_t(d)]++)] = t.id;
  }
  // Micro-batches and who feeds whom (forward on forward, across sections).
  mb_base_.assign(schedule.sections.size() + 1, 0);
  for (size_t s = 0; s < schedule.sections.size(); ++s)
    mb_base_[s + 1] = mb_base_[s] + int64_t(schedule.sections[s].micro_batches.size());
  const size_t n_mbs = size_t(mb_base_.back());
  mb_of_task_.resize(n);
  for (const Task& t : tasks) mb_of_task_[size_t(t.id)] = mb_base_[size_t(t.section)] + t.micro_batch;
  std::vector<std::pair<int64_t, int64_t>> feeds;  // (consumer mb, producer mb)
  for (const Task& t : tasks)
    if (t.kind == Task::Kind::Forward)
      for (int64_t d : t.deps)
        if (tasks[size_t(d)].kind == Task::Kind::Forward && tasks[size_t(d)].section != t.section)
          feeds.emplace_back(mb_of_task_[size_t(t.id)], mb_of_task_[size_t(d)]);
  std::sort(feeds.begin(), feeds.end());
  feeds.erase(std::unique(feeds.begin(), feeds.end()), feeds.end());
  feeders_offsets_.assign(n_mbs + 1, 0);
  std::vector<char> feeds_someone(n_mbs, 0);
  for (const auto& [c, p] : feeds) feeders_offsets_[size_t(c) + 1]++, feeds_someone[size_t(p)] = 1;
  for (size_t k = 0; k < n_mbs; ++k) feeders_offsets_[k + 1] += feeders_offsets_[k];
  for (const auto& f : feeds) feeders_.push_back(f.second);  // sorted by consumer: already in CSR order
  admitted_.assign(n_mbs, cap_ == 0 ? 1 : 0);
  parked_.resize(n_mbs);
  // Window slots: (section, replica) of the micro-batches nothing feeds on;
  // each finishes with its last task in issue order.
  window_of_task_.assign(n, -1);
  if (cap_ > 0) {
    std::vector<int64_t> last_task(n_mbs, -1);
    for (const Task& t : tasks) last_task[size_t(mb_of_task_[size_t(t.id)])] = t.id;
    std::map<std::pair<int, int64_t>, int64_t> slot_of;
    for (size_t s = 0; s < schedule.sections.size(); ++s)
      for (const MicroBatch& mb : schedule.sections[s].micro_batches) {
        const int64_t m = mb_base_[s] + mb.id;
        if (feeds_someone[size_t(m)] || last_task[size_t(m)] < 0) continue;
        auto [it, fresh] = slot_of.try_emplace({int(s), mb.replica}, int64_t(window_mbs_.size()));
        if (fresh) window_mbs_.emplace_back();
        window_mbs_[size_t(it->second)].push_back(m);
        window_of_task_[size_t(last_task[size_t(m)])] = it->second;
      }
    window_next_.assign(window_mbs_.size(), 0);
    window_open_.assign(window_mbs_.size(), 0);
  }
  for (const Task& t : tasks)
    if (t.deps.empty()) make_ready(t.id);
  for (size_t slot = 0; slot < window_mbs_.size(); ++slot)
    while (window_open_[slot] < cap_ && admit_next(int64_t(slot))) {
    }
}

void Frontier::make_ready(int64_t task) {
  const int64_t mb = mb_of_task_[size_t(task)];
  if (admitted_[size_t(mb)]) heap_push(ready_, task);
  else parked_[size_t(mb)].push_back(task);
}

void Frontier::admit(int64_t first) {
  std::vector<int64_t> todo{first};
  while (!todo.empty()) {
    const int64_t mb = todo.back();
    todo.pop_back();
    if (admitted_[size_t(mb)]) continue;
    admitted_[size_t(mb)] = 1;
    for (int64_t t : parked_[size_t(mb)]) heap_push(ready_, t);
    parked_[size_t(mb)].clear();
    for (int64_t k = feeders_offsets_[size_t(mb)]; k < feeders_offsets_[size_t(mb) + 1]; ++k)
      todo.push_back(feeders_[size_t(k)]);
  }
}

bool Frontier::admit_next(int64_t slot) {
  auto& next = window_next_[size_t(slot)];
  const auto& mbs = window_mbs_[size_t(slot)];
  if (next >= mbs.size()) return false;
  window_open_[size_t(slot)]++;
  const size_t k = next++;
  admit(mbs[k]);
  // Lookahead: the producers of the window micro-batch one window further on
  // start now, so that its inputs are there when it is admitted.
  if (k + size_t(cap_) < mbs.size())
    for (int64_t f = feeders_offsets_[size_t(mbs[k + size_t(cap_)])]; f < feeders_offsets_[size_t(mbs[k + size_t(cap_)]) + 1]; ++f)
      admit(feeders_[size_t(f)]);
  return true;
}

std::vector<int64_t> Frontier::take_ready() {
  if (ready_.empty() && running_ == 0 && !finished()) {
    // Nothing can move: admit the window micro-batch issued first, beyond the cap.
    int64_t best = -1;
    for (size_t slot = 0; slot < window_mbs_.size(); ++slot)
      if (window_next_[slot] < window_mbs_[slot].size() &&
          (best < 0 || window_mbs_[slot][window_next_[slot]] < window_mbs_[size_t(best)][window_next_[size_t(best)]]))
        best = int64_t(slot);
    if (best >= 0) {
      admit_next(best);
      forced_++;
    }
  }
  std::vector<int64_t> out;
  while (!ready_.empty()) out.push_back(heap_pop(ready_));
  running_ += int64_t(out.size());
  return out;
}

void Frontier::complete(int64_t task) {
  running_--;
  completed_++;
  if (const int64_t slot = window_of_task_[size_t(task)]; slot >= 0) {
    window_open_[size_t(slot)]--;
    while (window_open_[size_t(slot)] < cap_ && admit_next(slot)) {
    }
  }
  for (int64_t k = dependents_offsets_[size_t(task)]; k < dependents_offsets_[size_t(task) + 1]; ++k)
    if (--remaining_deps_[size_t(dependents_[size_t(k)])] == 0) make_ready(dependents_[size_t(k)]);
}

std::vector<std::vector<int64_t>> compute_waves(const std::vector<Task>& tasks) {
  std::vector<int64_t> level(tasks.size(), 0);
  std::vector<std::vector<int64_t>> waves;
  for (const Task& t : tasks) {
    for (int64_t d : t.deps) level[size_t(t.id)] = std::max(level[size_t(t.id)], level[size_t(d)] + 1);
    if (size_t(level[size_t(t.id)]) >= waves.size()) waves.resize(size_t(level[size_t(t.id)]) + 1);
    waves[size_t(level[size_t(t.id)])].push_back(t.id);
  }
  return waves;
}


}  // namespace maestro
