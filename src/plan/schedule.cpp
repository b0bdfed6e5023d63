// The wavefront and monolithic schedulers and the waves of a task list (see
// schedule.h; the algorithm step by step is in docs/scheduler.md). The rule
// checker is in schedule_validate.cpp, the release logic in frontier.cpp.
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

// Adds to each task's deps those schedule.h's rules require; each task's
// deps end sorted and unique.
void add_rule_deps(const SectionGraph& g, const Plan& plan, Schedule& sch) {
  const auto mb_of = micro_batch_index(sch);
  const TaskIndex idx(sch, plan);
  for (Task& t : sch.tasks) {
    const int s = t.section;
    const int64_t pp = plan.sections[s].pp;
    auto& d = t.deps;
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
}

void add_task(Schedule& sch, int section, int64_t replica, int64_t stage, Task::Kind kind, int64_t mb) {
  sch.tasks.push_back(Task{int64_t(sch.tasks.size()), section, replica, stage, kind, mb, {}});
}

// Rule deps merged into whatever deps the tasks already have; then waves.
void finish(const SectionGraph& g, const Plan& plan, Schedule& sch) {
  add_rule_deps(g, plan, sch);
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

std::vector<int> host_producers(const SectionGraph& g, const Plan& plan, const Batch& batch) {
  const auto active = active_samples(g, batch);
  std::vector<int> host(g.nodes.size(), -1);
  for (size_t s = 0; plan.levers.host_groups && s < g.nodes.size(); ++s) {
    const SectionPlan& sp = plan.sections[s];
    for (int e : g.nodes[s].producers) {
      const SectionPlan& hp = plan.sections[size_t(g.edges[size_t(e)].from)];
      const int64_t hw = hp.tp * hp.pp, w = sp.tp * sp.pp;
      if (hp.first_device != sp.first_device || hp.devices != sp.devices || hw <= w || hw % w != 0) continue;
      bool feeds_all = true;
      for (int32_t i : active[s]) feeds_all = feeds_all && g.carries(e, batch.samples[size_t(i)].modalities);
      if (feeds_all) host[s] = g.edges[size_t(e)].from;
      break;
    }
  }
  return host;
}

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
  // mb_id[s][i]: the id of section s's micro-batch holding sample i.
  std::vector<std::vector<int32_t>> mb_id(g.nodes.size(), std::vector<int32_t>(n, -1));
  std::vector<const Sample*> one(1);
  const std::vector<int> host = host_producers(g, plan, sch.batch);
  std::vector<bool> grouped(g.nodes.size(), false);  // s dealt its samples by host[s]'s groups
  for (auto it = g.topo_order.rbegin(); it != g.topo_order.rend(); ++it) {  // consumers first
    const int s = *it;
    const SectionPlan& sp = plan.sections[s];
    struct Key {
      int32_t need;      // the earliest round a consumer needs the sample in
      int64_t batch;     // that consumer's micro-batch holding it (section · n + id; -1: none)
      double lead;       // consumer_groups: the largest cost among this replica's samples of that micro-batch
      int phase;         // 0 lead (no producer work), 1 fed, 2 tail (no producer work)
      double cost;       // forward + backward of the sample alone
      int32_t sample;
    };
    std::vector<Key> keys;
    keys.reserve(active[s].size());
    for (int32_t i : active[s]) {
      Key k{0, -1, 0.0, 0, 0.0, i};
      bool fed = false;
      const ModalitySet mods = samples[i].modalities;
      bool needed = false;
      for (int e : g.nodes[s].consumers)
        if (g.carries(e, mods)) {
          const int c = g.edges[e].to;
          if (!needed || round[c][i] < k.need) k.need = round[c][i], k.batch = int64_t(c) * int64_t(n) + mb_id[c][i];
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
      // On (part of) a consumer's devices, a sample goes to one of the
      // replicas inside the consumer replica that runs it, when there is one
      // (the first consumer carrying it, whose devices hold all of this
      // section's): its output stays on that replica's devices and no other
      // replica waits for it. Samples whose consumer replica holds none of
      // this section's replicas go to the least loaded.
      // A producer whose replicas each span several of a consumer's runs a
      // sample in the replica holding the consumer's, when the consumer was
      // dealt by groups for it (host, below): the groups were balanced
      // by the producer's cost too.
      const int64_t width = sp.tp * sp.pp;
      auto nested = [&](const Key& k) -> std::pair<int64_t, int64_t> {  // replicas [first, last)
        for (int e : g.nodes[s].consumers) {
          const int c = g.edges[e].to;
          const int32_t home = replica_of[size_t(c)][size_t(k.sample)];
          if (home < 0 || !g.carries(e, samples[size_t(k.sample)].modalities)) continue;
          const SectionPlan& cp = plan.sections[size_t(c)];
          if (grouped[size_t(c)] && host[size_t(c)] == s) {
            const int64_t r = (cp.first_device + home * cp.tp * cp.pp - sp.first_device) / width;
            return {r, r + 1};
          }
          if (sp.first_device < cp.first_device || sp.first_device + sp.devices > cp.first_device + cp.devices) continue;
          const int64_t begin = cp.first_device + home * cp.tp * cp.pp - sp.first_device, end = begin + cp.tp * cp.pp;
          const int64_t first = std::max<int64_t>(0, (begin + width - 1) / width),
                        last = std::min<int64_t>(sp.dp, end >= 0 ? end / width : 0);
          if (first < last) return {first, last};
        }
        return {0, 0};
      };
      using Load = std::pair<double, int64_t>;  // (cost so far, replica)
      std::priority_queue<Load, std::vector<Load>, std::greater<>> least;
      std::vector<double> load(size_t(sp.dp), 0.0);
      for (int64_t r = 0; r < sp.dp; ++r) least.push({0.0, r});
      // Under a host producer (host[s]): each of the host's replicas is a
      // group of this section's; a sample goes to the group least loaded by
      // the host's cost plus this section's spread over the group, then to
      // the group's least loaded replica. The host then runs each sample in
      // the group of the replica that consumes it (nested, below), so its
      // output stays on the group's devices and no group waits for another.
      const int h = host[size_t(s)];
      const int64_t group = h >= 0 ? plan.sections[size_t(h)].tp * plan.sections[size_t(h)].pp / width : 1;
      std::vector<double> group_load(h >= 0 ? size_t(sp.dp / group) : 0, 0.0);
      for (const Key& k : keys) {
        const auto [first, last] = nested(k);
        int64_t r = -1;
        if (h >= 0 && first == last) {
          grouped[size_t(s)] = true;
          one[0] = &samples[size_t(k.sample)];
          const SectionPlan& hp = plan.sections[size_t(h)];
          const double host_cost = cost.forward_s(h, one, hp) + (sch.sections[size_t(h)].backward ? cost.backward_s(h, one, hp) : 0.0);
          const size_t gi = size_t(std::min_element(group_load.begin(), group_load.end()) - group_load.begin());
          group_load[gi] += host_cost + k.cost / double(group);
          for (int64_t q = int64_t(gi) * group; q < int64_t(gi + 1) * group; ++q)
            if (r < 0 || load[size_t(q)] < load[size_t(r)]) r = q;
        } else if (first < last) {
          for (int64_t q = first; q < last; ++q)
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
      const bool groups = plan.levers.consumer_groups;
      for (auto& mine : per_replica) {
        for (Key& k : mine) k.lead = k.cost;
        if (groups) {
          std::map<int64_t, double> lead;  // consumer micro-batch -> its largest cost here
          for (const Key& k : mine) lead[k.batch] = std::max(lead[k.batch], k.cost);
          for (Key& k : mine) k.lead = lead[k.batch];
        }
        std::sort(mine.begin(), mine.end(), [groups](const Key& a, const Key& b) {
          if (a.need != b.need) return a.need < b.need;
          if (a.phase != b.phase) return a.phase < b.phase;
          if (a.lead != b.lead) return a.lead > b.lead;
          if (groups && a.batch != b.batch) return a.batch < b.batch;
          if (a.cost != b.cost) return a.cost > b.cost;
          return a.sample < b.sample;
        });
      }
    } else {
      // Loader order, micro_batch consecutive samples to each replica in turn.
      for (size_t j = 0; j < keys.size(); ++j)
        per_replica[(j / size_t(sp.micro_batch)) % size_t(sp.dp)].push_back(keys[j]);
    }
    // Each replica's list cut into micro-batches: micro_batch samples, or by
    // tokens (ScheduleLevers::token_micro_batches); ids go round by round.
    std::vector<int64_t> tokens_of(active[s].empty() ? 0 : n, 0);
    auto cut_by = [&](int64_t token_budget) {  // 0: by count
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
      return cut;
    };
    std::vector<std::vector<std::vector<int32_t>>> cut;
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
      const int64_t by_mean = std::max<int64_t>(1, sp.micro_batch * sum / int64_t(all.size()));
      cut = cut_by(by_mean);
      if (plan.levers.per_step_micro_batch) {
        // This step's memory bound: the tokens of its micro_batch largest
        // active samples. Budgets from the mean up to it, doubling, each
        // estimated as the busiest replica's forward + backward plus a
        // pipeline fill of pp - 1 of its largest micro-batch; the least
        // kept (the smaller budget on a tie: more micro-batches to overlap).
        const size_t k = std::min(all.size(), size_t(sp.micro_batch));
        std::partial_sort(all.begin(), all.begin() + std::ptrdiff_t(k), all.end(), std::greater<>());
        int64_t bound = 0;
        for (size_t j = 0; j < k; ++j) bound += all[j];
        auto estimate = [&](const std::vector<std::vector<std::vector<int32_t>>>& c) {
          double busiest = 0;
          std::vector<const Sample*> mb;
          for (const auto& replica : c) {
            double work = 0, largest = 0;
            for (const auto& ids : replica) {
              mb.clear();
              for (int32_t i : ids) mb.push_back(&samples[size_t(i)]);
              const double t = cost.forward_s(s, mb, sp) + (sch.sections[s].backward ? cost.backward_s(s, mb, sp) : 0.0);
              work += t, largest = std::max(largest, t);
            }
            busiest = std::max(busiest, work + double(sp.pp - 1) * largest);
          }
          return busiest;
        };
        double best = estimate(cut);
        for (int64_t budget = std::min(2 * by_mean, bound); budget > by_mean; budget = budget == bound ? 0 : std::min(2 * budget, bound)) {
          auto other = cut_by(budget);
          if (const double t = estimate(other); t < best) best = t, cut = std::move(other);
        }
      }
    } else {
      cut = cut_by(0);
    }
    auto& mbs = sch.sections[s].micro_batches;
    for (size_t c = 0;; ++c) {
      bool any = false;
      for (int64_t r = 0; r < sp.dp; ++r) {
        if (c >= cut[size_t(r)].size()) continue;
        any = true;
        MicroBatch mb{int64_t(mbs.size()), r, std::move(cut[size_t(r)][c])};
        for (int32_t i : mb.samples) round[s][i] = int32_t(c), replica_of[s][i] = int32_t(r), mb_id[s][i] = int32_t(mb.id);
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
