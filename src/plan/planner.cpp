// The planner (see planner.h and docs/planner.md, "The planner's search").
#include "plan/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "plan/schedule.h"
#include "plan/simulator.h"

namespace maestro {

namespace {


double gb(int64_t bytes) { return double(bytes) / 1e9; }

int64_t layers_of(const ModelSpec& m) {
  return std::visit([](const auto& s) { return s.layers; }, m.spec);
}

int64_t sample_tokens(const SectionGraph& g, int s, const Sample& x) {
  return g.tokens(s, {x.modalities, x.text_tokens, x.images, x.audio_frames});
}

// The `n` largest active samples of section s: the worst micro-batch of size n.
std::vector<const Sample*> largest(const SectionGraph& g, int s, const Batch& batch, int64_t n) {
  std::vector<std::pair<int64_t, const Sample*>> by_tokens;
  for (const Sample& x : batch.samples)
    if (const int64_t t = sample_tokens(g, s, x); t > 0) by_tokens.push_back({t, &x});
  std::sort(by_tokens.begin(), by_tokens.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<const Sample*> out;
  for (int64_t i = 0; i < std::min<int64_t>(n, int64_t(by_tokens.size())); ++i) out.push_back(by_tokens[size_t(i)].second);
  return out;
}

// A step's forward + backward seconds of one stage, summed over section s's
// loader-order micro-batches, the largest micro-batch's, and that one's
// backward: they depend on tp, pp and micro_batch, not on dp.
struct StepWork {
  double work = 0, largest_mb = 0, largest_mb_backward = 0;
};
StepWork step_work(const SectionGraph& g, const CostModel& cost, int s, const SectionPlan& p, const Batch& batch) {
  StepWork w;
  for (const auto& mb : loader_order_micro_batches(g, s, batch, p.micro_batch)) {
    const double backward = cost.backward_s(s, mb, p), t = cost.forward_s(s, mb, p) + backward;
    w.work += t;
    if (t > w.largest_mb) w.largest_mb = t, w.largest_mb_backward = backward;
  }
  return w;
}
// section_step_s from the work: balanced packing (the work spread evenly,
// but no replica does less than one whole micro-batch), the pipeline fill,
// grad sync and the optimizer. With overlap_grad_sync, only the grad sync
// left after the last backward counts (the simulator's rule: it runs from
// that backward's start; the largest micro-batch's is taken).
double step_s(const CostModel& cost, int s, const SectionPlan& p, const StepWork& w, bool overlap_grad_sync = false) {
  const double sync = cost.grad_sync_s(s, p);
  return std::max(w.work / double(p.dp), w.largest_mb) + double(p.pp - 1) * w.largest_mb +
         (overlap_grad_sync ? std::max(0.0, sync - w.largest_mb_backward) : sync) + cost.optimizer_s(s, p);
}

struct Fit {
  int64_t weights = 0, activations = 0;
  int64_t total() const { return weights + activations; }
};
int64_t active_count(const SectionGraph& g, int s, const Batch& batch) {
  int64_t n = 0;
  for (const Sample& x : batch.samples) n += g.active(s, x.modalities) ? 1 : 0;
  return n;
}

struct Shape {
  SectionPlan plan;
  Fit memory;
  double score = 0;  // section_step_s, × devices with no device budget
};

// The shapes of one section that fit `memory` bytes per device, best first:
// explicit values kept; tp, pp, micro_batch over the planner's choices; with
// no device budget, dp = 1 (or the explicit dp) ranked by device-seconds per
// step (section_step_s × tp·pp·dp) — more replicas only when the state
// fits no other way (ZeRO-1); with a budget, dp = budget / (tp·pp),
// and when dp is auto also every smaller power of two (a smaller dp may
// sync gradients inside a node), ranked by section_step_s. Fewer devices
// first on a tie. Throws PlanError naming what ran out when none fits.
std::vector<Shape> ranked_shapes(const SectionGraph& g, const Cluster& cl, const CostModel& cost, int s,
                                 const Batch& batch, int64_t budget, int64_t memory) {
  const Section& sec = g.section(s);
  const int64_t active = std::max<int64_t>(1, active_count(g, s, batch));
  std::vector<SectionPlan> candidates;
  for (int64_t tp : kDegreeChoices)
    for (int64_t pp : kDegreeChoices) {
      if (sec.parallel.tp ? tp != *sec.parallel.tp
                          : tp > std::min(cl.devices_per_node, cl.devices) || !splits_over_tp(sec.model, tp))
        continue;
      if (sec.parallel.pp ? pp != *sec.parallel.pp : pp > layers_of(sec.model) || tp * pp > cl.devices) continue;
      for (int64_t mb : kMicroBatchChoices)
        if (sec.micro_batch ? mb == 1 : mb <= active) candidates.push_back({0, tp * pp, tp, pp, 1, sec.micro_batch.value_or(mb)});
    }
  // `recompute = auto`: every shape also with half and with all of its
  // layers recomputed, and with each stage recomputed whole — more compute,
  // fewer activations; each ranks below its plain twin unless memory leaves
  // it the only one, and the search simulates them all.
  if (sec.recompute_auto && sec.mode == Mode::Train)
    for (size_t i = 0, n = candidates.size(); i < n; ++i)
      for (int64_t level : {1, 2, 3}) {
        if (level < 3 && sec.model.layers() * level / 2 == 0) continue;  // half of one layer: none
        candidates.push_back(candidates[i]);
        candidates.back().recompute_level = level;
      }
  if (sec.parallel.tp && sec.parallel.pp && candidates.empty())
    candidates.push_back({0, *sec.parallel.tp * *sec.parallel.pp, *sec.parallel.tp, *sec.parallel.pp, 1,
                          sec.micro_batch.value_or(1)});
  std::stable_sort(candidates.begin(), candidates.end(), [](const SectionPlan& a, const SectionPlan& b) {
    return a.devices < b.devices;
  });
  std::vector<Shape> shapes;
  std::optional<Shape> first_miss;  // the error names the first that missed, fewest devices first
  const std::vector<const Sample*> by_size = largest(g, s, batch, active);
  for (const SectionPlan& c : candidates) {
    const std::vector<const Sample*> worst(by_size.begin(),
                                           by_size.begin() + std::min<int64_t>(c.micro_batch, int64_t(by_size.size())));
    const StepWork work = step_work(g, cost, s, c, batch);
    std::vector<int64_t> dps{sec.parallel.dp.value_or(budget > 0 ? budget / c.devices : 1)};
    if (budget > 0 && !sec.parallel.dp)
      for (int64_t d = 1; d < dps.front(); d *= 2) dps.push_back(d);
    for (size_t i = 0; i < dps.size(); ++i) {
      const int64_t dp = dps[i];
      if (dp < 1) continue;
      SectionPlan p = c;
      p.dp = dp;
      p.devices = c.devices * dp;
      // ZeRO-1 is the planner's choice (a train section with dp > 1): kept
      // when it fits where the unsharded state does not, or is no slower.
      std::optional<Shape> pick, miss;  // miss: the last (smallest) that did not fit
      for (bool shard : {false, true}) {
        if (shard && (sec.mode != Mode::Train || dp <= 1)) continue;
        p.shard_optimizer = shard;
        const Fit f{cost.weights_bytes_per_device(s, p),
                    in_flight_activation_bytes(cost, s, worst, p, in_flight_micro_batches(p.pp))};
        if (f.total() > memory) {
          miss = Shape{p, f, 0};
          continue;
        }
        const double step = step_s(cost, s, p, work);
        const Shape x{p, f, budget > 0 ? step : step * double(p.devices)};
        if (!pick || x.score <= pick->score) pick = x;
      }
      if (pick) shapes.push_back(*pick);
      else if (!first_miss) first_miss = miss;
      // No budget: the fewest replicas that fit, which may be more than one
      // when only the sharded optimizer state fits.
      if (!pick && budget == 0 && !sec.parallel.dp && sec.mode == Mode::Train && 2 * p.devices <= cl.devices)
        dps.push_back(2 * dp);
    }
  }
  std::stable_sort(shapes.begin(), shapes.end(), [](const Shape& a, const Shape& b) {
    return a.score != b.score ? a.score < b.score : a.plan.devices < b.plan.devices;
  });
  if (!shapes.empty()) return shapes;
  if (!first_miss)
    throw PlanError(fmt::format("section '{}': no tp × pp fits {} {} devices", sec.name, cl.devices, cl.device.name));
  const SectionPlan& p = first_miss->plan;
  const Fit& f = first_miss->memory;
  if (f.weights > memory)
    throw PlanError(fmt::format("section '{}': {:.1f} GB of weights per device with tp={}, pp={} exceeds {}'s {:.0f} GB",
                                sec.name, gb(f.weights), p.tp, p.pp, cl.device.name, gb(memory)));
  throw PlanError(fmt::format(
      "section '{}': {:.1f} GB of weights + {:.1f} GB of activations per device with tp={}, pp={}, micro_batch={} "
      "exceeds {}'s {:.0f} GB",
      sec.name, gb(f.weights), gb(f.activations), p.tp, p.pp, p.micro_batch, cl.device.name, gb(memory)));
}

// The best shape of one section (ranked_shapes' first) on the whole device.
SectionPlan shape_section(const SectionGraph& g, const Cluster& cl, const CostModel& cost, int s, const Batch& batch,
                          int64_t budget) {
  return ranked_shapes(g, cl, cost, s, batch, budget, cl.device.memory_bytes).front().plan;
}

}  // namespace

SectionPlan best_shape_alone(const SectionGraph& g, const Cluster& cl, const CostModel& cost, int s,
                             const Batch& batch) {
  return shape_section(g, cl, cost, s, batch, cl.devices);
}

std::vector<ShapeOption> shapes_alone(const SectionGraph& g, const Cluster& cl, const CostModel& cost, int s,
                                      const Batch& batch) {
  std::vector<ShapeOption> out;
  for (const Shape& x : ranked_shapes(g, cl, cost, s, batch, cl.devices, cl.device.memory_bytes))
    out.push_back({x.plan, x.memory.weights, x.memory.activations, x.score});
  return out;
}

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

double section_step_s(const SectionGraph& g, const CostModel& cost, int s, const SectionPlan& p, const Batch& batch,
                      bool overlap_grad_sync) {
  return step_s(cost, s, p, step_work(g, cost, s, p, batch), overlap_grad_sync);
}

namespace {

void finish_plan(Plan& plan) {
  int64_t max_pp = 1;
  for (const SectionPlan& p : plan.sections) max_pp = std::max(max_pp, p.pp);
  plan.in_flight_cap = in_flight_micro_batches(max_pp);
}

// The in-flight cap raised from the largest pp to what memory allows (at
// most 4 × the largest pp): every section's parameter state plus `cap`
// (at least its pp) micro-batches of its largest samples, summed over the
// sections whose devices overlap, fit one device. More micro-batches in
// flight fill the pipeline bubbles and the waits for producers that a cap
// of pp leaves (docs/scheduler.md, "Diagnosis").
void raise_in_flight_cap(const SectionGraph& g, const Cluster& cl, const CostModel& cost, const Batch& batch,
                         Plan& plan) {
  const size_t n = plan.sections.size();
  // per_mb: a micro-batch's activations while it runs; kept: between its
  // forward and backward (less for a stage recomputed whole).
  std::vector<int64_t> weights(n), per_mb(n), kept(n);
  for (size_t s = 0; s < n; ++s) {
    const SectionPlan& p = plan.sections[s];
    weights[s] = cost.weights_bytes_per_device(int(s), p);
    const std::vector<const Sample*> big = largest(g, int(s), batch, p.micro_batch);
    per_mb[s] = cost.activation_bytes(int(s), big, p);
    kept[s] = cost.kept_activation_bytes(int(s), big, p);
    if (plan.levers.token_micro_batches && !big.empty()) {
      // Token micro-batches hold at most micro_batch × the mean tokens, or
      // one larger sample alone (activations grow with tokens).
      int64_t sum = 0, count = 0, big_tokens = 0;
      for (const Sample& x : batch.samples)
        if (const int64_t t = sample_tokens(g, int(s), x); t > 0) sum += t, ++count;
      for (const Sample* x : big) big_tokens += sample_tokens(g, int(s), *x);
      const double share = plan.levers.per_step_micro_batch
                               ? 1.0
                               : std::min(1.0, double(p.micro_batch) * double(sum) / double(count) / double(big_tokens));
      per_mb[s] = std::max(cost.activation_bytes(int(s), {big.front()}, p), int64_t(double(per_mb[s]) * share));
      kept[s] = std::max(cost.kept_activation_bytes(int(s), {big.front()}, p), int64_t(double(kept[s]) * share));
    }
  }
  auto fits = [&](int64_t cap) {
    for (size_t s = 0; s < n; ++s) {
      const SectionPlan& a = plan.sections[s];
      int64_t bytes = 0;
      for (size_t t = 0; t < n; ++t) {
        const SectionPlan& b = plan.sections[t];
        if (a.first_device < b.first_device + b.devices && b.first_device < a.first_device + a.devices)
          bytes += weights[t] + std::max(cap, b.pp) * kept[t] + per_mb[t] - kept[t];
      }
      if (bytes > cl.device.memory_bytes) return false;
    }
    return true;
  };
  for (int64_t cap = 4 * plan.in_flight_cap; cap > plan.in_flight_cap; --cap)
    if (fits(cap)) {
      plan.in_flight_cap = cap;
      return;
    }
}

// Every section on the whole cluster (from device 0), each shaped for all
// of it; their work serialises on the shared devices and so must their
// memory: sections are fitted largest first, each within what the others'
// smallest shapes leave. nullopt when they cannot share a device.
std::optional<Plan> co_located_plan(const SectionGraph& g, const Cluster& cl,
                                    const std::vector<std::vector<Shape>>& ranked) {
  const size_t n = g.nodes.size();
  std::vector<int64_t> least(n);
  for (size_t s = 0; s < n; ++s) {
    least[s] = ranked[s].front().memory.total();
    for (const Shape& x : ranked[s]) least[s] = std::min(least[s], x.memory.total());
  }
  std::vector<size_t> order(n);
  for (size_t s = 0; s < n; ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return ranked[a].front().memory.total() > ranked[b].front().memory.total();
  });
  int64_t left = cl.device.memory_bytes;
  for (size_t s = 0; s < n; ++s) left -= least[s];
  if (left < 0) return std::nullopt;
  Plan plan;
  plan.cluster_devices = cl.devices;
  plan.sections.resize(n);
  for (size_t s : order) {
    left += least[s];  // this section's share, plus what the others' least leaves
    const auto it = std::find_if(ranked[s].begin(), ranked[s].end(),
                                 [&](const Shape& x) { return x.memory.total() <= left; });
    plan.sections[s] = it->plan;  // exists: its least fits
    left -= it->memory.total();
  }
  finish_plan(plan);
  return plan;
}

// Co-located too, but each section's memory share in proportion to what its
// best shape needs (co_located_plan lets the largest take what the others'
// smallest shapes leave, which can force them all into deep pipelines).
std::optional<Plan> proportional_co_located_plan(const Cluster& cl, const std::vector<std::vector<Shape>>& ranked) {
  double wanted = 0;
  for (const auto& r : ranked) wanted += double(r.front().memory.total());
  Plan plan;
  plan.cluster_devices = cl.devices;
  int64_t total = 0;
  for (const auto& r : ranked) {
    const double share = double(cl.device.memory_bytes) * double(r.front().memory.total()) / wanted;
    auto it = std::find_if(r.begin(), r.end(), [&](const Shape& x) { return double(x.memory.total()) <= share; });
    if (it == r.end())
      it = std::min_element(r.begin(), r.end(),
                            [](const Shape& a, const Shape& b) { return a.memory.total() < b.memory.total(); });
    plan.sections.push_back(it->plan);
    total += it->memory.total();
  }
  if (total > cl.device.memory_bytes) return std::nullopt;
  finish_plan(plan);
  return plan;
}

// A shared plan with every section whose dp is auto spread over the whole
// cluster (same tp, pp and micro-batch, the largest dp): a producer then has
// replicas inside every consumer replica and runs its samples there
// (wavefront_schedule), instead of loading the first devices only. nullopt
// when no section changes.
std::optional<Plan> spread_plan(const SectionGraph& g, const Cluster& cl, const std::vector<std::vector<Shape>>& ranked,
                                Plan plan) {
  bool changed = false;
  for (size_t s = 0; s < ranked.size(); ++s) {
    const SectionPlan& p = plan.sections[s];
    if (g.section(int(s)).parallel.dp || p.devices == cl.devices) continue;
    for (const Shape& x : ranked[s])
      if (x.plan.tp == p.tp && x.plan.pp == p.pp && x.plan.micro_batch == p.micro_batch &&
          x.plan.recompute_level == p.recompute_level && x.plan.devices == cl.devices) {
        plan.sections[s] = x.plan;
        changed = true;
        break;
      }
  }
  if (!changed) return std::nullopt;
  finish_plan(plan);
  return plan;
}

// Shared plans with every section whose tp and pp are free laid out like
// the section with the longest estimated step (its tp, pp and dp; the best
// ranked micro-batch), for its shape in `from` and then each of its ranked
// shapes, best first (distinct tp, pp, dp):
// each device then holds the same stage of every section, so a stage never
// waits for part of its devices while another section's narrower stage
// holds the rest (internvl_20b on 64 H100: ViT `tp 2, pp 8` under an LLM
// `tp 4, pp 8`, devices 74 % busy).
std::vector<Plan> aligned_plans(const SectionGraph& g, const std::vector<std::vector<Shape>>& ranked, const Plan& from) {
  size_t lead = 0;
  for (size_t s = 1; s < ranked.size(); ++s)
    if (ranked[s].front().score > ranked[lead].front().score) lead = s;
  std::vector<Plan> out;
  for (size_t k = 0; k <= ranked[lead].size(); ++k) {
    const SectionPlan& target = k == 0 ? from.sections[lead] : ranked[lead][k - 1].plan;
    Plan plan = from;
    plan.sections[lead] = target;
    bool aligned = false;  // some other section follows the lead (one that cannot keeps its shape)
    for (size_t s = 0; s < ranked.size(); ++s) {
      const ParallelSpec& par = g.section(int(s)).parallel;
      if (s == lead || par.tp || par.pp) continue;
      // The lead's tp, pp and dp; where the section has no such shape (a
      // model that cannot split over the lead's tp, splits_over_tp, or a
      // shape that does not fit), its largest tp below it on the same
      // devices (tp·dp and pp the lead's), so that stages still line up.
      const Shape* pick = nullptr;
      for (const Shape& x : ranked[s])
        if (x.plan.pp == target.pp && x.plan.tp <= target.tp && x.plan.tp * x.plan.dp == target.tp * target.dp &&
            (!pick || x.plan.tp > pick->plan.tp))
          pick = &x;
      if (pick) plan.sections[s] = pick->plan, aligned = true;
    }
    if (!aligned || std::any_of(out.begin(), out.end(), [&](const Plan& p) {
          return p.sections[lead].tp == target.tp && p.sections[lead].pp == target.pp && p.sections[lead].dp == target.dp;
        }))
      continue;
    finish_plan(plan);
    out.push_back(std::move(plan));
  }
  return out;
}

// Bytes per device of a shared plan: every section's state and (the
// ranked estimate's) activations.
Fit co_located_fit(const std::vector<std::vector<Shape>>& ranked, const Plan& plan) {
  Fit total;
  for (size_t s = 0; s < ranked.size(); ++s)
    for (const Shape& x : ranked[s])
      if (x.plan.tp == plan.sections[s].tp && x.plan.pp == plan.sections[s].pp && x.plan.dp == plan.sections[s].dp &&
          x.plan.micro_batch == plan.sections[s].micro_batch &&
          x.plan.recompute_level == plan.sections[s].recompute_level) {
        total.weights += x.memory.weights;
        total.activations += x.memory.activations;
        break;
      }
  return total;
}
int64_t co_located_memory(const std::vector<std::vector<Shape>>& ranked, const Plan& plan) {
  return co_located_fit(ranked, plan).total();
}

// Each section on its own devices: start from the minimal shapes, then
// repeatedly give one more replica to the slowest section whose dp is auto,
// while devices remain and it has samples to spread; then reshape
// each for the devices it got. `minimal` has dp = the explicit dp or 1.
Plan disjoint_plan(const SectionGraph& g, const Cluster& cl, const CostModel& cost, const Batch& batch,
                   std::vector<SectionPlan> minimal) {
  const int n = int(g.nodes.size());
  int64_t free_devices = cl.devices;
  std::vector<double> step(static_cast<size_t>(n));
  std::vector<StepWork> work(static_cast<size_t>(n));
  std::vector<int64_t> mb_count(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) {
    const SectionPlan& p = minimal[size_t(s)];
    free_devices -= p.tp * p.pp * p.dp;
    work[size_t(s)] = step_work(g, cost, s, p, batch);
    step[size_t(s)] = step_s(cost, s, p, work[size_t(s)]);
    mb_count[size_t(s)] = active_count(g, s, batch);  // samples to spread (the reshape picks the micro-batch)
  }
  for (;;) {
    int pick = -1;
    for (int s = 0; s < n; ++s) {
      const SectionPlan& p = minimal[size_t(s)];
      if (g.section(s).parallel.dp || p.tp * p.pp > free_devices || p.dp >= mb_count[size_t(s)]) continue;
      if (pick < 0 || step[size_t(s)] > step[size_t(pick)]) pick = s;
    }
    if (pick < 0) break;
    SectionPlan& p = minimal[size_t(pick)];
    ++p.dp;
    p.devices = p.tp * p.pp * p.dp;
    free_devices -= p.tp * p.pp;
    step[size_t(pick)] = step_s(cost, pick, p, work[size_t(pick)]);
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

// The simulated steps of one plan_program call, remembered: the search
// meets the same candidate again (a pass that starts where another ended, a
// lever that changes nothing here, a finalist ranked on step 0 again), in
// 2.5–16 % of its calls on the examples' longest searches. Keyed by the
// plan, the batch (by address: plan_program's step-0 batch or one of its
// later_batches, alive for the call) and whether the later batches' memory
// was checked too (those are always plan_program's later_batches or
// copies). Plain data in, one number out: the cost model and the simulator
// keep no state between calls, so steps may be simulated on several
// threads at once (ahead, below); the memory of results is shared under a
// mutex, and on_simulation is called under it, one call at a time.
class StepSimulations {
 public:
  StepSimulations(const SectionGraph& g, const Cluster& cl, const CostModel& cost,
                  std::function<void(int64_t)> on_simulation, int64_t threads, int64_t resident_handoff_budget)
      : g_(g),
        cl_(cl),
        cost_(cost),
        on_simulation_(std::move(on_simulation)),
        threads_(threads > 0 ? threads : std::max<int64_t>(1, std::thread::hardware_concurrency())),
        resident_handoff_budget_(resident_handoff_budget) {}

  int64_t threads() const { return threads_; }

  // The simulated step of a candidate on `batch`; infinite when a device's
  // simulated peak memory (parameter state + in-flight activations,
  // producers ahead of their consumers included) exceeds the device: such
  // a plan loses to any that fits.
  // `later`: batches whose peak memory must fit too (PlannerOptions::later_batches).
  double step_s(const Plan& plan, const Batch& batch, const std::vector<Batch>& later = {}) {
    return step_below(plan, batch, later, std::numeric_limits<double>::infinity()).s;
  }
  // step_s, for a caller that keeps the plan only if it is faster than
  // `cutoff`: where the busiest device's work alone takes `cutoff` or more
  // (SimOptions::give_up_at) the step is not simulated, and `s` is that
  // bound (at_least). The bound holds for every in-flight cap. Bounds are
  // remembered apart from simulated steps.
  struct Step {
    double s;
    bool at_least;  // s is a lower bound of the step, at least `cutoff`
  };
  Step step_below(const Plan& plan, const Batch& batch, const std::vector<Batch>& later, double cutoff) {
    Key key{plan, &batch, !later.empty()};
    {
      std::lock_guard lock(mutex_);
      if (auto it = seen_.find(key); it != seen_.end()) return {it->second, false};
      if (auto it = bounds_.find(key); it != bounds_.end() && beyond(it->second, cutoff)) return {it->second, true};
    }
    const Step step = simulate_s(plan, batch, later, cutoff);
    std::lock_guard lock(mutex_);
    if (step.at_least) {
      bounds_.insert_or_assign(std::move(key), step.s);
      return step;
    }
    // Another thread may have simulated the same plan meanwhile: the same number.
    if (seen_.emplace(std::move(key), step.s).second && on_simulation_) on_simulation_(int64_t(seen_.size()));
    return step;
  }
  // Whether step_below would simulate nothing: the step, or a bound at least `cutoff`, is remembered.
  bool known(const Plan& plan, const Batch& batch, const std::vector<Batch>& later,
             double cutoff = std::numeric_limits<double>::infinity()) {
    std::lock_guard lock(mutex_);
    const Key key{plan, &batch, !later.empty()};
    if (seen_.contains(key)) return true;
    const auto it = bounds_.find(key);
    return it != bounds_.end() && beyond(it->second, cutoff);
  }

  // job(i) for every i < n, on up to threads() threads (this one among
  // them); a job that throws is dropped: these are simulations run ahead of
  // the search, which runs each again in its own order (a result it finds
  // remembered, an error raised on its own thread).
  void ahead(size_t n, const std::function<void(size_t)>& job) {
    std::atomic<size_t> next = 0;
    auto work = [&] {
      for (size_t i; (i = next++) < n;) try {
          job(i);
        } catch (...) {
        }
    };
    std::vector<std::jthread> helpers;
    for (size_t h = 1; h < std::min<size_t>(n, size_t(threads_)); ++h) try {
        helpers.emplace_back(work);
      } catch (const std::system_error&) {  // no more threads to be had: fewer helpers
        break;
      }
    work();
  }

 private:
  struct Key {
    Plan plan;
    const Batch* batch;
    bool later;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      size_t h = std::hash<const Batch*>{}(k.batch) ^ (k.later ? 0x9e3779b97f4a7c15ULL : 0);
      auto mix = [&h](int64_t v) { h = (h ^ std::hash<int64_t>{}(v)) * 0x100000001b3ULL; };
      for (const SectionPlan& p : k.plan.sections)
        for (int64_t v : {p.first_device, p.devices, p.tp, p.pp, p.dp, p.micro_batch, p.recompute_level,
                          int64_t(p.shard_optimizer)})
          mix(v);
      const ScheduleLevers& l = k.plan.levers;
      mix(l.reorder | l.token_micro_batches << 1 | l.per_step_micro_batch << 2 | l.overlap_grad_sync << 3 |
          l.critical_path_first << 4 | l.host_groups << 5 | l.consumer_groups << 6);
      mix(k.plan.in_flight_cap), mix(k.plan.cluster_devices);
      return h;
    }
  };

  // SimOptions::give_up_at's test, with its margin.
  static bool beyond(double bound, double cutoff) { return bound * (1 - 1e-9) >= cutoff; }

  Step simulate_s(const Plan& plan, const Batch& batch, const std::vector<Batch>& later, double cutoff) const {
    SimOptions options{.lower_bound = false,
                       .validate = false,
                       .give_up_at = cutoff,
                       .memory_limit_bytes = cl_.device.memory_bytes,
                       .resident_handoff_budget = resident_handoff_budget_};
    const SimResult r = simulate(g_, plan, wavefront_schedule(g_, plan, cost_, batch), cost_, options);
    if (r.gave_up) return {r.iteration_s, true};
    constexpr double kNever = std::numeric_limits<double>::infinity();
    if (r.over_memory) return {kNever, false};
    options.give_up_at = kNever;  // the later batches: memory only
    for (const Batch& b : later)
      if (simulate(g_, plan, wavefront_schedule(g_, plan, cost_, b), cost_, options).over_memory) return {kNever, false};
    return {r.iteration_s, false};
  }

  const SectionGraph& g_;
  const Cluster& cl_;
  const CostModel& cost_;
  std::function<void(int64_t)> on_simulation_;  // PlannerOptions::on_simulation
  const int64_t threads_;
  const int64_t resident_handoff_budget_;  // PlannerOptions::resident_handoff_budget
  std::mutex mutex_;  // guards seen_ and bounds_
  std::unordered_map<Key, double, KeyHash> seen_;    // simulated steps (infinite: does not fit)
  std::unordered_map<Key, double, KeyHash> bounds_;  // lower bounds where a step was not simulated (step_below)
};

// StepSimulations::step_s of the plan; when it does not fit, the in-flight cap is
// halved (down to 1) until it does — fewer micro-batches in flight, and
// producers fewer windows ahead — and then the largest cap between that
// and the last that did not fit is searched by bisection (kd_70b_to_8b on
// 64 H200: 3 does not fit, 1 does, 2 fits and is 1 % faster). Infinite
// when even cap 1 does not fit. For a caller that keeps the plan only if
// it is faster than `cutoff`: where no cap can be (step_below's bound), a
// value of at least `cutoff` is returned without simulating.
double simulated_fitting_s(StepSimulations& sims, Plan& plan, const Batch& batch, const std::vector<Batch>& later = {},
                           double cutoff = std::numeric_limits<double>::infinity()) {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  int64_t too_many = 0;  // the smallest cap known not to fit; 0 = none
  StepSimulations::Step step = sims.step_below(plan, batch, later, cutoff);
  while (!step.at_least && step.s == kNever && plan.in_flight_cap > 1) {
    too_many = plan.in_flight_cap;
    plan.in_flight_cap = std::max<int64_t>(1, plan.in_flight_cap / 2);
    step = sims.step_below(plan, batch, later, cutoff);
  }
  double t = step.s;
  if (step.at_least || t == kNever || too_many == 0) return t;
  for (int64_t fits = plan.in_flight_cap; too_many - fits > 1;) {
    Plan more = plan;
    more.in_flight_cap = (fits + too_many) / 2;
    const StepSimulations::Step u = sims.step_below(more, batch, later, cutoff);
    if (u.at_least) return u.s;
    if (u.s == kNever) {
      too_many = more.in_flight_cap;
    } else {
      fits = more.in_flight_cap;
      if (u.s < t) t = u.s, plan.in_flight_cap = fits;
    }
  }
  return t;
}

// Shapes the planner simulates per section beyond the estimate's best: the
// estimate (section_step_s) misses replica balance, pipeline fill under the
// in-flight cap and the other sections on shared devices. Bounded so that
// planning stays fast on large steps (omni_7b, 4,096 samples: estimate only).
int64_t simulated_alternatives(const SectionGraph& g, const Batch& batch) {
  return int64_t(batch.samples.size() * g.nodes.size()) <= 4096 ? 7 : 0;
}

// Coordinate search on a shared plan: section by section (the longest
// estimated step first), the next-ranked shapes that keep the plan within
// device memory, each simulated, the fastest kept.
Plan refine_co_located(StepSimulations& sims, const SectionGraph& g, const Cluster& cl, const CostModel& cost,
                       const Batch& batch, const std::vector<std::vector<Shape>>& ranked, Plan plan, double& best_s,
                       bool raise_cap, const std::vector<Batch>& later) {
  const int64_t alternatives = simulated_alternatives(g, batch);
  std::vector<size_t> order(ranked.size());
  for (size_t s = 0; s < order.size(); ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return ranked[a].front().score > ranked[b].front().score;
  });
  auto same = [](const SectionPlan& a, const SectionPlan& b) {
    return a.tp == b.tp && a.pp == b.pp && a.dp == b.dp && a.micro_batch == b.micro_batch &&
           a.recompute_level == b.recompute_level;
  };
  // One thing changed: tp or pp doubled or halved, dp doubled, halved or
  // the largest, any other micro-batch size (time is not unimodal in it:
  // token micro-batches), or another recomputation level.
  auto neighbour = [](const SectionPlan& a, const SectionPlan& b) {
    const int64_t x[] = {a.tp, a.pp, a.micro_batch, a.recompute_level};
    const int64_t y[] = {b.tp, b.pp, b.micro_batch, b.recompute_level};
    int changed = 0;
    bool near = true;
    for (int k = 0; k < 4; ++k)
      if (x[k] != y[k]) ++changed, near = near && (k >= 2 || x[k] == 2 * y[k] || y[k] == 2 * x[k]);
    const bool dp_near = a.dp == b.dp || a.dp == 2 * b.dp || b.dp == 2 * a.dp || a.devices == b.devices;
    return near && dp_near && changed + (a.dp != b.dp) == 1;
  };
  std::vector<std::vector<char>> seen(ranked.size());
  for (size_t s = 0; s < ranked.size(); ++s) seen[s].assign(ranked[s].size(), 0);
  // Section s at its k-th ranked shape in the current plan; nullopt where
  // that is its shape already or the states do not fit a device.
  auto candidate_of = [&](size_t s, size_t k) -> std::optional<Plan> {
    Plan candidate = plan;
    candidate.sections[s] = ranked[s][k].plan;
    // Only the states are checked before simulating: the estimate's
    // activations (every section's micro_batch largest samples in flight at
    // once) exceed what the simulation finds for token micro-batches and
    // frozen sections' transient ones (kd_32b_to_1_5b on 64 H100: teacher
    // micro-batch 8 and student 16 estimated at 130 GB, simulated at 77.5).
    if (same(candidate.sections[s], plan.sections[s]) || co_located_fit(ranked, candidate).weights > cl.device.memory_bytes)
      return std::nullopt;
    finish_plan(candidate);
    if (raise_cap) raise_in_flight_cap(g, cl, cost, batch, candidate);
    return candidate;
  };
  auto try_shape = [&](size_t s, size_t k) {
    if (seen[s][k]) return false;
    seen[s][k] = 1;
    std::optional<Plan> candidate = candidate_of(s, k);
    if (!candidate) return false;
    if (const double t = simulated_fitting_s(sims, *candidate, batch, later, best_s); t < best_s) {
      best_s = t, plan = std::move(*candidate);
      return true;
    }
    return false;
  };
  // With several threads, the next `most` shapes that try_shape would
  // simulate — from k on, before `end`, those `wanted` — are simulated
  // ahead at once into `sims`; returns where the next ones start. The
  // search then takes them one by one as before and finds each remembered,
  // so its result is the same for any number of threads. A candidate is
  // made of the section's shape and the others' (finish_plan and
  // raise_in_flight_cap set the cap afresh), so it is the same plan again
  // after another shape of that section was taken. The estimate's next
  // best are all tried: all ahead at once. A hill climb stops at its first
  // move: as many ahead as there are threads, so few are simulated in vain.
  auto ahead = [&](size_t s, size_t k, size_t end, auto wanted, int64_t most) {
    if (sims.threads() < 2) return end;
    std::vector<Plan> next;
    for (; k < end && int64_t(next.size()) < most; ++k)
      if (!seen[s][k] && wanted(k))
        if (std::optional<Plan> c = candidate_of(s, k); c && !sims.known(*c, batch, later, best_s))
          next.push_back(std::move(*c));
    // The best so far only falls: a bound beyond it now is beyond it then.
    const double cutoff = best_s;
    if (next.size() > 1)
      sims.ahead(next.size(), [&](size_t i) { simulated_fitting_s(sims, next[i], batch, later, cutoff); });
    return k;
  };
  for (size_t s : order) {
    // The estimate's next best, then a hill climb over neighbouring shapes.
    const size_t next_best = std::min(ranked[s].size(), size_t(alternatives) + 1);
    for (size_t k = 0, ready = 0; k < next_best; ++k) {
      if (k >= ready) ready = ahead(s, k, next_best, [](size_t) { return true; }, next_best);
      try_shape(s, k);
    }
    for (bool moved = alternatives > 0; moved;) {
      moved = false;
      auto near = [&](size_t k) { return neighbour(ranked[s][k].plan, plan.sections[s]); };
      for (size_t k = 0, ready = 0; k < ranked[s].size() && !moved; ++k) {
        if (k >= ready) ready = ahead(s, k, ranked[s].size(), near, sims.threads());
        if (near(k)) moved = try_shape(s, k);
      }
    }
  }
  return plan;
}

// The search for one setting of the levers (plan_program below);
// `also_ran` (when given) collects each shared search pass's best and the
// disjoint plan.
Plan search(StepSimulations& sims, const SectionGraph& g, const Cluster& cl, const CostModel& cost,
            const Batch& batch, const PlannerOptions& options, std::vector<Plan>* also_ran) {
  std::vector<SectionPlan> minimal;
  int64_t wanted = 0;
  for (int s = 0; s < int(g.nodes.size()); ++s) {
    const ParallelSpec& par = g.section(s).parallel;
    if (const int64_t n = par.tp.value_or(1) * par.pp.value_or(1) * par.dp.value_or(1); n > cl.devices)
      throw PlanError(fmt::format("section '{}': tp={} × pp={} × dp={} needs {} devices; the cluster has {}",
                                  g.section(s).name, par.tp.value_or(1), par.pp.value_or(1), par.dp.value_or(1), n,
                                  cl.devices));
    SectionPlan p = shape_section(g, cl, cost, s, batch, 0);
    p.dp = g.section(s).parallel.dp.value_or(p.dp);  // 1, or the fewest replicas whose sharded state fits
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
  std::vector<std::vector<Shape>> ranked;
  for (int s = 0; s < int(g.nodes.size()); ++s)
    ranked.push_back(ranked_shapes(g, cl, cost, s, batch, cl.devices, cl.device.memory_bytes));
  std::optional<Plan> best;
  double best_s = std::numeric_limits<double>::infinity();
  const std::vector<std::vector<Shape>>* best_ranked = nullptr;  // the shapes `best` was searched among, when shared
  auto prepare = [&](Plan plan) {
    plan.levers = options.levers;
    if (options.raise_in_flight_cap) raise_in_flight_cap(g, cl, cost, batch, plan);
    return plan;
  };
  // The shared placements from one set of ranked shapes; `pass_best` and
  // `runner_up`: the fastest two of this set, where the coordinate search
  // starts.
  auto search_shared = [&](const std::vector<std::vector<Shape>>& ranked) {
    std::optional<Plan> pass_best, runner_up;
    double pass_s = std::numeric_limits<double>::infinity(), runner_up_s = pass_s;
    auto consider = [&](Plan plan) {
      plan = prepare(std::move(plan));
      // Kept as the fastest or the runner-up: faster than the runner-up.
      if (const double t = simulated_fitting_s(sims, plan, batch, options.later_batches, runner_up_s); t < pass_s) {
        if (pass_best) runner_up_s = pass_s, runner_up = std::move(pass_best);
        pass_s = t, pass_best = std::move(plan);
      } else if (t < runner_up_s && t > pass_s) {  // an equal one: most likely the same plan again
        runner_up_s = t, runner_up = std::move(plan);
      }
    };
    std::optional<Plan> shared = co_located_plan(g, cl, ranked);
    if (!shared) return;
    std::optional<Plan> even = proportional_co_located_plan(cl, ranked);
    if (even && co_located_memory(ranked, *even) == co_located_memory(ranked, *shared)) even.reset();
    // The spread and the first two aligned starts that fit the device, from the fastest so far.
    auto spread_from = [&](const Plan& from) {
      std::optional<Plan> spread = spread_plan(g, cl, ranked, from);
      if (spread && co_located_memory(ranked, *spread) > cl.device.memory_bytes) spread.reset();
      return spread;
    };
    auto aligned_from = [&](const Plan& from) {
      std::vector<Plan> out;
      for (Plan& aligned : aligned_plans(g, ranked, from))
        if (out.size() < 2 && co_located_memory(ranked, aligned) <= cl.device.memory_bytes)
          out.push_back(std::move(aligned));
      return out;
    };
    // With several threads every start is simulated ahead, the spread and
    // aligned ones from `shared` (they are made again from the fastest).
    if (sims.threads() > 1) {
      std::vector<Plan> starts{prepare(*shared)};
      if (even) starts.push_back(prepare(*even));
      if (std::optional<Plan> spread = spread_from(*shared)) starts.push_back(prepare(*spread));
      for (Plan& aligned : aligned_from(*shared)) starts.push_back(prepare(std::move(aligned)));
      std::erase_if(starts, [&](const Plan& p) { return sims.known(p, batch, options.later_batches); });
      sims.ahead(starts.size(), [&](size_t i) { simulated_fitting_s(sims, starts[i], batch, options.later_batches); });
    }
    consider(*shared);
    if (even) consider(*even);
    if (std::optional<Plan> spread = spread_from(pass_best ? *pass_best : *shared)) consider(*spread);
    for (const Plan& aligned : aligned_from(pass_best ? *pass_best : *shared)) consider(aligned);
    // From the fastest start (or, when none fits in the simulation, the
    // first) the search may still find shapes that fit. The coordinate
    // search ends where no one section's move helps, which depends on where
    // it starts: it runs from the second fastest start too (internvl_20b on
    // 64 H100: 24.66 s from the fastest, 22.25 s from the second).
    Plan refined = refine_co_located(sims, g, cl, cost, batch, ranked, pass_best ? *pass_best : prepare(*shared), pass_s,
                                     options.raise_in_flight_cap, options.later_batches);
    if (runner_up) {
      Plan other = refine_co_located(sims, g, cl, cost, batch, ranked, *runner_up, runner_up_s, options.raise_in_flight_cap,
                                     options.later_batches);
      if (runner_up_s < pass_s) pass_s = runner_up_s, refined = std::move(other);
    }
    if (also_ran && pass_s < std::numeric_limits<double>::infinity()) also_ran->push_back(refined);
    if (pass_s < best_s) best_s = pass_s, best = std::move(refined), best_ranked = &ranked;
  };
  // First without recomputation (a section whose every shape needs it
  // keeps them): what recomputing buys is searched in the holds below, so
  // each hold only adds candidates to this search's.
  std::vector<std::vector<Shape>> plain = ranked;
  for (auto& r : plain)
    if (std::any_of(r.begin(), r.end(), [](const Shape& x) { return x.plan.recompute_level == 0; }))
      std::erase_if(r, [](const Shape& x) { return x.plan.recompute_level != 0; });
  search_shared(plain);
  // Recomputation frees the memory another section's faster shape needs,
  // which no single step of the coordinate search finds (it costs time
  // where it is switched on alone): the shared search again with each
  // `recompute = auto` section held to each level (half of its layers, all,
  // each stage whole).
  // Sharing every device, a step takes about as long as each section's own
  // fastest shape one after another (the ranked estimates) or longer: a
  // hold whose such bound is no better than the best found is skipped, the
  // most promising first.
  std::vector<std::pair<double, std::vector<std::vector<Shape>>>> holds;
  double free_bound = 0;  // Σ each section's fastest shape
  for (const auto& r : ranked) free_bound += r.empty() ? 0.0 : r.front().score;
  for (size_t s = 0; s < ranked.size(); ++s)
    for (int64_t level : {1, 2, 3}) {
      std::vector<std::vector<Shape>> held = ranked;
      std::erase_if(held[s], [&](const Shape& x) { return x.plan.recompute_level != level; });
      if (held[s].empty()) continue;
      // What the level frees on the section's best shape: under 1 % of a
      // device (a projector's few layers) it cannot make room for another
      // section's shape, and the hold is not run.
      const Shape& best = ranked[s].front();
      auto twin = std::find_if(held[s].begin(), held[s].end(), [&](const Shape& x) {
        return x.plan.tp == best.plan.tp && x.plan.pp == best.plan.pp && x.plan.dp == best.plan.dp &&
               x.plan.micro_batch == best.plan.micro_batch;
      });
      const int64_t freed = best.memory.activations - (twin != held[s].end() ? *twin : held[s].front()).memory.activations;
      if (freed * 100 < cl.device.memory_bytes) continue;
      holds.emplace_back(free_bound - ranked[s].front().score + held[s].front().score, std::move(held));
    }
  std::stable_sort(holds.begin(), holds.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [bound, held] : holds)
    if (bound < best_s) search_shared(held);
  // The coordinate search sweeps the sections once from each start, and a
  // section's best shape depends on the others' (a shape tried before
  // another section moved may win after): the best shared plan is swept
  // again until a sweep changes nothing. Only the best: sweeping every
  // start again found the same plans at 1.6-2x the planning time
  // (docs/planner.md).
  if (options.sweep_best_again && best_ranked && simulated_alternatives(g, batch) > 0) {
    for (;;) {
      Plan next = refine_co_located(sims, g, cl, cost, batch, *best_ranked, *best, best_s, options.raise_in_flight_cap,
                                    options.later_batches);
      if (next == *best) break;
      best = std::move(next);
    }
  }
  if (options.disjoint_placement && wanted <= cl.devices) {
    // Kept where it beats the shared search on this batch; a finalist
    // (plan_program) when it fits, since a plan that loses on step 0 may
    // win over the sampled steps (tiny_mllm on 8 H100: 0.887 ms against
    // the shared plan's 0.970 over four steps).
    Plan disjoint = prepare(disjoint_plan(g, cl, cost, batch, std::move(minimal)));
    const double t = simulated_fitting_s(sims, disjoint, batch, options.later_batches, best_s);
    if (also_ran && t < std::numeric_limits<double>::infinity()) also_ran->push_back(disjoint);
    if (t < best_s) best_s = t, best = std::move(disjoint);
  }
  if (!best) {
    // Neither fits side by side nor together: each section shaped for the
    // whole cluster on its own (the simulator reports the summed memory).
    Plan shared;
    shared.cluster_devices = cl.devices;
    for (const auto& r : ranked) shared.sections.push_back(r.front().plan);
    finish_plan(shared);
    shared.levers = options.levers;
    best = shared;
  }
  return *best;
}

// The search and the levers' alternatives, chosen on `batch` (step 0);
// `also_ran` as search's, over every search run.
Plan plan_on(StepSimulations& sims, const SectionGraph& g, const Cluster& cl, const CostModel& cost,
             const Batch& batch, const PlannerOptions& options, std::vector<Plan>* also_ran = nullptr) {
  Plan plan = search(sims, g, cl, cost, batch, options, also_ran);
  // Token micro-batches are not always faster (a section whose samples are
  // all alike gains nothing, and count-cut micro-batches may pack GEMMs
  // better), nor is running the longest path first (a producer on devices
  // its consumer does not hold waits behind their own work while its
  // consumer idles): where the search is affordable it is run with each
  // lever off too, and the fastest plan on this batch kept.
  if (simulated_alternatives(g, batch) > 0) {
    double best_s = sims.step_s(plan, batch, options.later_batches);
    // Each lever switched off on top of the best so far; `tie`: kept when
    // within 0.1 % too.
    auto also = [&](bool ScheduleLevers::*lever, bool tie) {
      if (!(plan.levers.*lever)) return;
      PlannerOptions off = options;
      off.levers = plan.levers;
      off.levers.*lever = false;
      Plan other = search(sims, g, cl, cost, batch, off, also_ran);
      if (const double t = sims.step_s(other, batch, options.later_batches);
          t < best_s || (tie && t <= best_s * (1 + 1e-3)))
        best_s = t, plan = std::move(other);
    };
    also(&ScheduleLevers::token_micro_batches, false);
    // Per-step micro-batches lead the search to other shapes (larger
    // micro-batches fill pipelines less): the search without them too.
    if (plan.levers.token_micro_batches) also(&ScheduleLevers::per_step_micro_batch, false);
    // A tie on this batch (0.1 %) says the dispatch rule did not matter on
    // it (the step is set by something else, e.g. the longest sample):
    // first ready, first served is kept, whose plan does not lean on the
    // priorities (llava15_7b on 64 H100: equal on step 0, 5 % slower on
    // steps 1-3 with the longest-path plan).
    also(&ScheduleLevers::critical_path_first, true);
    // The per-step micro-batch choice on or off for the chosen shapes,
    // simulated both ways (the cap refitted), the faster kept.
    Plan other = plan;
    other.levers.per_step_micro_batch = !plan.levers.per_step_micro_batch;
    if (other.levers.token_micro_batches && options.levers.per_step_micro_batch) {  // off in options: never on
      if (options.raise_in_flight_cap) {
        finish_plan(other);
        raise_in_flight_cap(g, cl, cost, batch, other);
      }
      if (const double t = simulated_fitting_s(sims, other, batch, options.later_batches, best_s); t < best_s)
        best_s = t, plan = std::move(other);
    }
    // Host groups (a producer replica over several consumer replicas) on
    // or off for the chosen shapes, where the plan has such a pair.
    const std::vector<int> hosts = host_producers(g, plan, batch);
    if (std::any_of(hosts.begin(), hosts.end(), [](int h) { return h >= 0; })) {
      Plan off = plan;
      off.levers.host_groups = false;
      if (const double t = simulated_fitting_s(sims, off, batch, options.later_batches, best_s); t < best_s)
        best_s = t, plan = std::move(off);
    }
  }
  return plan;
}

// PlannerOptions::later_batches: the plan's in-flight cap lowered, by
// halving and then bisection, to the largest whose peak memory fits on step
// 0's batch and every later one. False when even cap 1 does not fit.
bool fit_later_batches(StepSimulations& sims, const Batch& batch, const std::vector<Batch>& later, Plan& plan) {
  auto fits = [&](int64_t cap) {
    Plan p = plan;
    p.in_flight_cap = cap;
    return sims.step_s(p, batch, later) != std::numeric_limits<double>::infinity();
  };
  if (later.empty() || plan.in_flight_cap < 1 || fits(plan.in_flight_cap)) return true;
  int64_t too_many = plan.in_flight_cap, fit = std::max<int64_t>(1, too_many / 2);
  while (fit > 1 && !fits(fit)) too_many = fit, fit = std::max<int64_t>(1, fit / 2);
  if (!fits(fit)) return false;
  while (too_many - fit > 1)
    if (const int64_t mid = (fit + too_many) / 2; fits(mid)) fit = mid; else too_many = mid;
  plan.in_flight_cap = fit;
  return true;
}

}  // namespace

Plan plan_program(const SectionGraph& g, const Cluster& cl, const CostModel& cost, const Batch& batch,
                  const PlannerOptions& options) {
  // Searched on step 0 alone, then its in-flight cap fitted to the later
  // batches; where no cap fits them, searched again with every candidate's
  // memory checked on them all (slower: each candidate simulated on each).
  // Where the search is bounded (a step of more than 4,096 samples ×
  // sections, simulated_alternatives) only step 0 is checked, so that
  // planning stays fast; such a step's mix varies little between steps.
  PlannerOptions first = options;
  first.later_batches.clear();
  StepSimulations sims(g, cl, cost, options.on_simulation, options.threads, options.resident_handoff_budget);
  std::vector<Plan> also_ran;
  Plan plan = plan_on(sims, g, cl, cost, batch, first, &also_ran);
  if (simulated_alternatives(g, batch) == 0) return plan;
  // ScheduleLevers::consumer_groups flipped on the chosen plan (its shapes
  // and cap as they are), kept where it is faster over `mean`'s steps.
  auto with_consumer_groups = [&](auto mean) {
    Plan other = plan;
    other.levers.consumer_groups = !plan.levers.consumer_groups;
    if (mean(other) < mean(plan) * (1 - 1e-9)) plan = std::move(other);
  };
  if (options.later_batches.empty()) {
    with_consumer_groups([&](const Plan& p) { return sims.step_s(p, batch); });
    return plan;
  }
  // The search ranks on step 0 alone, and a run lasts many steps whose
  // samples and mix differ: its finalists (the chosen plan, each pass's
  // best and the disjoint plan, each cap fitted to the later batches,
  // since a lower cap can cost more than step 0 showed) are ranked by
  // their mean over all the batches;
  // the chosen plan is kept unless another is faster by more than rounding.
  // Each finalist is simulated once per batch, and once more only where its
  // cap had to be lowered; a finalist equal to an earlier one (passes often
  // end on the same plan) costs only lookups in `sims`, and cannot win.
  auto mean_s = [&](const Plan& p) {
    double sum = sims.step_s(p, batch);
    for (const Batch& b : options.later_batches) sum += sims.step_s(p, b);
    return sum / double(1 + options.later_batches.size());
  };
  // The mean with the cap first lowered where a batch does not fit;
  // nullopt when even cap 1 does not.
  auto fitted_mean_s = [&](Plan& p) -> std::optional<double> {
    const double t = mean_s(p);
    if (t != std::numeric_limits<double>::infinity()) return t;
    if (!fit_later_batches(sims, batch, options.later_batches, p)) return std::nullopt;
    return mean_s(p);
  };
  // With several threads, every finalist's steps are simulated ahead, at once.
  if (sims.threads() > 1) {
    std::vector<const Plan*> finalists{&plan};
    for (const Plan& p : also_ran)
      if (std::none_of(finalists.begin(), finalists.end(), [&](const Plan* q) { return *q == p; }))
        finalists.push_back(&p);
    std::vector<std::pair<const Plan*, const Batch*>> steps;
    for (const Plan* p : finalists) {
      if (!sims.known(*p, batch, {})) steps.emplace_back(p, &batch);
      for (const Batch& b : options.later_batches)
        if (!sims.known(*p, b, {})) steps.emplace_back(p, &b);
    }
    sims.ahead(steps.size(), [&](size_t i) { sims.step_s(*steps[i].first, *steps[i].second); });
  }
  std::optional<double> best_s = fitted_mean_s(plan);
  if (!best_s) {
    also_ran.clear();
    plan = plan_on(sims, g, cl, cost, batch, options, &also_ran);
    best_s = fitted_mean_s(plan).value_or(std::numeric_limits<double>::infinity());
  }
  for (Plan& other : also_ran) {
    if (const std::optional<double> t = fitted_mean_s(other); t && *t < *best_s * (1 - 1e-9))
      best_s = t, plan = std::move(other);
  }
  // Each section's micro-batch, where the program leaves it auto, tried at
  // the planner's other choices on the chosen plan (its other shapes as
  // they are, consumer groups flipped first), and kept where the mean over
  // the steps is lower: the search ranks on step 0 alone, where
  // neighbouring micro-batches often tie. Consumer groups flipped again.
  with_consumer_groups(mean_s);
  best_s = mean_s(plan);
  for (size_t s = 0; s < plan.sections.size(); ++s) {
    if (g.section(int(s)).micro_batch) continue;
    std::vector<Plan> others;
    for (int64_t mb : kMicroBatchChoices)
      if (mb != plan.sections[s].micro_batch) {
        others.push_back(plan);
        others.back().sections[s].micro_batch = mb;
      }
    if (sims.threads() > 1) {
      std::vector<std::pair<const Plan*, const Batch*>> steps;
      for (const Plan& p : others) {
        steps.emplace_back(&p, &batch);
        for (const Batch& b : options.later_batches) steps.emplace_back(&p, &b);
      }
      sims.ahead(steps.size(), [&](size_t i) { sims.step_s(*steps[i].first, *steps[i].second); });
    }
    for (Plan& other : others)
      if (const std::optional<double> t = fitted_mean_s(other); t && *t < *best_s * (1 - 1e-9))
        best_s = t, plan = std::move(other);
  }
  with_consumer_groups(mean_s);
  return plan;
}

}  // namespace maestro
