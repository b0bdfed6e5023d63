// The planner (see planner.h and docs/planner.md, "The planner's search").
#include "plan/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "plan/schedule.h"
#include "plan/simulator.h"

namespace maestro {

namespace {


double gb(int64_t bytes) { return double(bytes) / 1e9; }

int64_t layers_of(const ModelSpec& m) {
  return std::visit([](const auto& s) { return s.layers; }, m.spec);
}

// The `n` largest active samples of section s: the worst micro-batch of size n.
std::vector<const Sample*> largest(const SectionGraph& g, int s, const Batch& batch, int64_t n) {
  std::vector<std::pair<int64_t, const Sample*>> by_tokens;
  for (const Sample& x : batch.samples)
    if (const int64_t t = g.tokens(s, {x.modalities, x.text_tokens, x.images, x.audio_frames}); t > 0)
      by_tokens.push_back({t, &x});
  std::sort(by_tokens.begin(), by_tokens.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<const Sample*> out;
  for (int64_t i = 0; i < std::min<int64_t>(n, int64_t(by_tokens.size())); ++i) out.push_back(by_tokens[size_t(i)].second);
  return out;
}

struct Fit {
  int64_t weights = 0, activations = 0;
  int64_t total() const { return weights + activations; }
};
Fit memory_of(const SectionGraph& g, const CostModel& cost, int s, const SectionPlan& p, const Batch& batch) {
  return {cost.weights_bytes_per_device(s, p),
          in_flight_micro_batches(p.pp) * cost.activation_bytes(s, largest(g, s, batch, p.micro_batch), p)};
}

int64_t active_count(const SectionGraph& g, int s, const Batch& batch) {
  int64_t n = 0;
  for (const Sample& x : batch.samples) n += g.active(s, x.modalities) ? 1 : 0;
  return n;
}

// tp, pp and micro_batch of one section: explicit values kept; among the
// auto choices that fit in memory, the fastest: with no device budget, the
// fewest device-seconds per step (section_step_s on one replica × its tp·pp
// devices); with a budget, the shortest step with dp = budget / (tp·pp)
// (or the explicit dp). Fewer devices per replica on a tie.
SectionPlan shape_section(const SectionGraph& g, const Cluster& cl, const CostModel& cost, int s, const Batch& batch,
                          int64_t budget) {
  const Section& sec = g.section(s);
  const int64_t active = std::max<int64_t>(1, active_count(g, s, batch));
  std::vector<SectionPlan> candidates;  // fewest devices first
  for (int64_t tp : kDegreeChoices)
    for (int64_t pp : kDegreeChoices) {
      if (sec.parallel.tp ? tp != *sec.parallel.tp : tp > std::min(cl.devices_per_node, cl.devices)) continue;
      if (sec.parallel.pp ? pp != *sec.parallel.pp : pp > layers_of(sec.model) || tp * pp > cl.devices) continue;
      for (int64_t mb : kMicroBatchChoices)
        if (sec.micro_batch ? mb == 1 : mb <= active) candidates.push_back({0, tp * pp, tp, pp, 1, sec.micro_batch.value_or(mb)});
    }
  if (sec.parallel.tp && sec.parallel.pp && candidates.empty())
    candidates.push_back({0, *sec.parallel.tp * *sec.parallel.pp, *sec.parallel.tp, *sec.parallel.pp, 1,
                          sec.micro_batch.value_or(1)});
  std::stable_sort(candidates.begin(), candidates.end(), [](const SectionPlan& a, const SectionPlan& b) {
    return a.devices < b.devices;
  });
  std::optional<SectionPlan> best;
  double best_s = 0;
  std::optional<std::pair<SectionPlan, Fit>> first_miss;
  for (SectionPlan p : candidates) {
    if (budget > 0) {
      p.dp = sec.parallel.dp.value_or(budget / p.devices);
      if (p.dp < 1) continue;
      p.devices *= p.dp;
    }
    const Fit f = memory_of(g, cost, s, p, batch);
    if (f.total() > cl.device.memory_bytes) {
      if (!first_miss) first_miss = {p, f};
      continue;
    }
    const double score = section_step_s(g, cost, s, p, batch) * (budget > 0 ? 1.0 : double(p.devices));
    if (!best || score < best_s) best = p, best_s = score;
  }
  if (best) return *best;
  if (!first_miss)
    throw PlanError(fmt::format("section '{}': no tp × pp fits {} {} devices", sec.name, cl.devices, cl.device.name));
  const auto [p, f] = *first_miss;
  if (f.weights > cl.device.memory_bytes)
    throw PlanError(fmt::format("section '{}': {:.1f} GB of weights per device with tp={}, pp={} exceeds {}'s {:.0f} GB",
                                sec.name, gb(f.weights), p.tp, p.pp, cl.device.name, gb(cl.device.memory_bytes)));
  throw PlanError(fmt::format(
      "section '{}': {:.1f} GB of weights + {:.1f} GB of activations per device with tp={}, pp={}, micro_batch={} "
      "exceeds {}'s {:.0f} GB",
      sec.name, gb(f.weights), gb(f.activations), p.tp, p.pp, p.micro_batch, cl.device.name,
      gb(cl.device.memory_bytes)));
}

}  // namespace

std::vector<std::vector<const Sample*>> loader_order_micro_batches(const SectionGraph& g, int s, const Batch& batch,
                                                                    int64_t micro_batch) {
  std::vector<std::vector<const Sample*>> mbs;
  for (const Sample& x : batch.samples) {
    if (!g.active(s, x.modalities)) continue;
    if (mbs.empty() || int64_t(mbs.back().size()) == micro_batch) mbs.emplace_back();
    mbs.back().push_back(&x);
  }
  return mbs;
}

double section_step_s(const SectionGraph& g, const CostModel& cost, int s, const SectionPlan& p, const Batch& batch) {
  double work = 0, largest_mb = 0;
  for (const auto& mb : loader_order_micro_batches(g, s, batch, p.micro_batch)) {
    const double t = cost.forward_s(s, mb, p) + cost.backward_s(s, mb, p);
    work += t;
    largest_mb = std::max(largest_mb, t);
  }
  // Balanced packing: the work spread evenly, but no replica does less than
  // one whole micro-batch.
  return std::max(work / double(p.dp), largest_mb) + double(p.pp - 1) * largest_mb + cost.grad_sync_s(s, p) +
         cost.optimizer_s(s, p);
}

namespace {

void finish_plan(Plan& plan) {
  int64_t max_pp = 1;
  for (const SectionPlan& p : plan.sections) max_pp = std::max(max_pp, p.pp);
  plan.in_flight_cap = in_flight_micro_batches(max_pp);
}

// Every section on the whole cluster, each shaped for all of it; their work
// serialises on the shared devices.
Plan co_located_plan(const SectionGraph& g, const Cluster& cl, const CostModel& cost, const Batch& batch) {
  Plan plan;
  plan.cluster_devices = cl.devices;
  for (int s = 0; s < int(g.nodes.size()); ++s) {
    SectionPlan p = shape_section(g, cl, cost, s, batch, cl.devices);
    p.first_device = 0;
    plan.sections.push_back(p);
  }
  finish_plan(plan);
  return plan;
}

// Each section on its own devices: start from the minimal shapes, then
// repeatedly give one more replica to the slowest section whose dp is auto,
// while devices remain and it has micro-batches to spread; then reshape
// each for the devices it got. `minimal` has dp = the explicit dp or 1.
Plan disjoint_plan(const SectionGraph& g, const Cluster& cl, const CostModel& cost, const Batch& batch,
                   std::vector<SectionPlan> minimal) {
  const int n = int(g.nodes.size());
  int64_t free_devices = cl.devices;
  std::vector<double> step_s(static_cast<size_t>(n));
  std::vector<int64_t> mb_count(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) {
    const SectionPlan& p = minimal[size_t(s)];
    free_devices -= p.tp * p.pp * p.dp;
    step_s[size_t(s)] = section_step_s(g, cost, s, p, batch);
    mb_count[size_t(s)] = int64_t(loader_order_micro_batches(g, s, batch, p.micro_batch).size());
  }
  for (;;) {
    int pick = -1;
    for (int s = 0; s < n; ++s) {
      const SectionPlan& p = minimal[size_t(s)];
      if (g.section(s).parallel.dp || p.tp * p.pp > free_devices || p.dp >= mb_count[size_t(s)]) continue;
      if (pick < 0 || step_s[size_t(s)] > step_s[size_t(pick)]) pick = s;
    }
    if (pick < 0) break;
    SectionPlan& p = minimal[size_t(pick)];
    ++p.dp;
    free_devices -= p.tp * p.pp;
    step_s[size_t(pick)] = section_step_s(g, cost, pick, p, batch);
  }
  Plan plan;
  plan.cluster_devices = cl.devices;
  int64_t next = 0;
  for (int s = 0; s < n; ++s) {
    const SectionPlan& m = minimal[size_t(s)];
    SectionPlan p = shape_section(g, cl, cost, s, batch, m.tp * m.pp * m.dp);
    p.first_device = next;
    next += p.devices;
    plan.sections.push_back(p);
  }
  finish_plan(plan);
  return plan;
}

double simulated_s(const SectionGraph& g, const Plan& plan, const CostModel& cost, const Batch& batch) {
  return simulate(g, plan, wavefront_schedule(g, plan, cost, batch), cost).iteration_s;
}

}  // namespace

Plan plan_program(const SectionGraph& g, const Cluster& cl, const CostModel& cost, const Batch& batch) {
  std::vector<SectionPlan> minimal;
  int64_t wanted = 0;
  for (int s = 0; s < int(g.nodes.size()); ++s) {
    const ParallelSpec& par = g.section(s).parallel;
    if (const int64_t n = par.tp.value_or(1) * par.pp.value_or(1) * par.dp.value_or(1); n > cl.devices)
      throw PlanError(fmt::format("section '{}': tp={} × pp={} × dp={} needs {} devices; the cluster has {}",
                                  g.section(s).name, par.tp.value_or(1), par.pp.value_or(1), par.dp.value_or(1), n,
                                  cl.devices));
    SectionPlan p = shape_section(g, cl, cost, s, batch, 0);
    p.dp = g.section(s).parallel.dp.value_or(1);
    p.devices = p.tp * p.pp * p.dp;
    if (p.devices > cl.devices)
      throw PlanError(fmt::format("section '{}': tp={} × pp={} × dp={} needs {} devices; the cluster has {}",
                                  g.section(s).name, p.tp, p.pp, p.dp, p.devices, cl.devices));
    wanted += p.devices;
    minimal.push_back(p);
  }
  // Sharing the cluster avoids idle devices and moving tensors between
  // sections; separate devices let sections overlap. Both are simulated on
  // this batch and the faster kept.
  Plan shared = co_located_plan(g, cl, cost, batch);
  if (wanted > cl.devices) return shared;
  Plan separate = disjoint_plan(g, cl, cost, batch, std::move(minimal));
  return simulated_s(g, separate, cost, batch) <= simulated_s(g, shared, cost, batch) ? separate : shared;
}

}  // namespace maestro
