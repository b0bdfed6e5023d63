// The megatron and sequential baselines (see baselines.h).
#include "plan/baselines.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "graph/counts.h"
#include "plan/planner.h"
#include "plan/shared_devices_fit.h"
#include "plan/simulator.h"

namespace maestro {

namespace {

int64_t max_layers(const SectionGraph& g) {
  int64_t n = 1;
  for (size_t s = 0; s < g.nodes.size(); ++s)
    n = std::max(n, std::visit([](const auto& m) { return m.layers; }, g.section(int(s)).model.spec));
  return n;
}

}  // namespace

std::string MegatronConfig::str() const {
  return fmt::format("tp={} pp={} dp={} micro_batch={}{}{}", tp, pp, dp, micro_batch,
                     distributed_optimizer ? " distributed_optimizer" : "",
                     recompute_level_note(recompute_level));
}

Plan megatron_plan(const SectionGraph& g, const Cluster& cl, const MegatronConfig& c) {
  Plan plan;
  plan.cluster_devices = cl.devices;
  plan.in_flight_cap = c.pp;
  for (size_t s = 0; s < g.nodes.size(); ++s)
    plan.sections.push_back(
        {0, c.tp * c.pp * c.dp, c.tp, c.pp, c.dp, c.micro_batch, c.distributed_optimizer, c.recompute_level});
  return plan;
}

Schedule megatron_schedule(const SectionGraph& g, const Plan& plan, Batch batch, int64_t micro_batch) {
  Schedule sch = monolithic_schedule(g, plan, std::move(batch), micro_batch);
  // The chunk of loader order a task's micro-batch comes from; keep only the
  // dependencies inside a chunk (the data rules), drop the lane chaining.
  auto chunk = [&](const Task& t) {
    const auto& samples = sch.micro_batch_of(t).samples;
    return *std::min_element(samples.begin(), samples.end()) / micro_batch;
  };
  for (Task& t : sch.tasks) {
    const int64_t c = chunk(t);
    std::erase_if(t.deps, [&](int64_t d) { return chunk(sch.tasks[size_t(d)]) != c; });
  }
  sch.waves = compute_waves(sch.tasks);
  sch.in_flight_cap = plan.in_flight_cap;
  return sch;
}

std::string megatron_memory_problem(const SectionGraph& g, const Cluster& cl, const CostModel& cost,
                                    const MegatronConfig& c, const Batch& batch) {
  const Plan plan = megatron_plan(g, cl, c);
  int64_t weights = 0, activations = 0;
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    weights += cost.weights_bytes_per_device(int(s), plan.sections[s]);
    int64_t worst = 0;
    for (const auto& mb : loader_order_micro_batches(g, int(s), batch, c.micro_batch))
      worst = std::max(worst, in_flight_activation_bytes(cost, int(s), mb, plan.sections[s], in_flight_micro_batches(c.pp)));
    activations += worst;
  }
  if (weights + activations <= cl.device.memory_bytes) return "";
  return fmt::format("{:.1f} GB of weights + {:.1f} GB of activations per device exceeds {}'s {:.0f} GB",
                     double(weights) / 1e9, double(activations) / 1e9, cl.device.name,
                     double(cl.device.memory_bytes) / 1e9);
}

double megatron_iteration_s(const SectionGraph& g, const Cluster& cl, const CostModel& cost, const MegatronConfig& c,
                            const std::vector<Batch>& batches) {
  const Plan plan = megatron_plan(g, cl, c);
  double sum = 0;
  for (const Batch& b : batches)
    sum += simulate(g, plan, megatron_schedule(g, plan, b, c.micro_batch), cost, {.lower_bound = false}).iteration_s;
  return sum / double(batches.size());
}

BaselineResult tuned_megatron(const SectionGraph& g, const Cluster& cl, const CostModel& cost,
                              const std::vector<Batch>& batches) {
  std::optional<MegatronConfig> best;
  double best_s = std::numeric_limits<double>::infinity();
  std::string last_problem;
  bool recompute_auto = false;
  for (size_t s = 0; s < g.nodes.size(); ++s)
    recompute_auto |= g.section(int(s)).mode == Mode::Train && g.section(int(s)).recompute_auto;
  for (int64_t tp : kDegreeChoices) {
    if (tp > std::min(cl.devices_per_node, cl.devices)) continue;
    bool splits = true;  // every section at the one tp
    for (size_t s = 0; s < g.nodes.size(); ++s) splits &= splits_over_tp(g.section(int(s)).model, tp);
    if (!splits) continue;
    for (int64_t pp : kDegreeChoices) {
      if (tp * pp > cl.devices || pp > max_layers(g)) continue;
      for (int64_t mb : kMicroBatchChoices)
        for (bool distributed_optimizer : {false, true})
          for (int64_t recompute : {0, 1, 2, 3}) {  // more only while it does not fit with less
            const MegatronConfig c{tp, pp, cl.devices / (tp * pp), mb, distributed_optimizer, recompute};
            if ((distributed_optimizer && c.dp <= 1) || (recompute && !recompute_auto)) continue;
            if (const std::string p = megatron_memory_problem(g, cl, cost, c, batches.front()); !p.empty()) {
              last_problem = c.str() + ": " + p;
              continue;
            }
            const double t = megatron_iteration_s(g, cl, cost, c, {batches.front()});
            if (t < best_s) best_s = t, best = c;
            break;
          }
    }
  }
  if (!best) throw PlanError("megatron-ideal baseline: no configuration fits (last tried " + last_problem + ")");
  return {"megatron-ideal", megatron_iteration_s(g, cl, cost, *best, batches), best->str(), best, ""};
}

namespace {

std::string sequential_shape(const SectionGraph& g, int s, const SectionPlan& p) {
  return fmt::format("{}{} tp={} pp={} dp={} micro_batch={}{}{}", s ? "; " : "", g.nodes[size_t(s)].name, p.tp, p.pp,
                     p.dp, p.micro_batch, p.shard_optimizer ? " distributed_optimizer" : "",
                     recompute_note(g.section(s), p));
}

// A trained section whose outputs feed another: its backward waits for the
// consumers' backward, so in a sequential step it comes after theirs.
bool backward_deferred(const SectionGraph& g, int s) {
  return g.section(s).mode == Mode::Train && !g.nodes[size_t(s)].consumers.empty();
}

// A forward-only pass of section s over the batch: its micro-batches
// balanced over dp, plus the pipeline's fill (section_step_s's rule).
double forward_pass_s(const SectionGraph& g, const CostModel& cost, int s, const SectionPlan& p, const Batch& batch) {
  double work = 0, largest = 0;
  for (const auto& mb : loader_order_micro_batches(g, s, batch, p.micro_batch)) {
    const double f = cost.forward_s(s, mb, p);
    work += f;
    largest = std::max(largest, f);
  }
  return std::max(work / double(p.dp), largest) + double(p.pp - 1) * largest;
}

// Bytes per device of section s's outputs over the whole batch (each flow
// it feeds; logits by vocabulary), split over its tp·dp devices: what the
// consumers' phase finds waiting.
int64_t held_outputs_bytes(const SectionGraph& g, int s, const SectionPlan& p, const Batch& batch) {
  const ModelSpec& model = g.section(s).model;
  int64_t bytes = 0;
  for (int e : g.nodes[size_t(s)].consumers) {
    const int64_t width = g.edges[size_t(e)].kind == FlowKind::Logits ? std::get<TransformerSpec>(model.spec).vocab
                                                                       : model.output_width();
    for (const Sample& x : batch.samples)
      if (g.carries(e, x.modalities))
        bytes += g.emitted(s, {x.modalities, x.text_tokens, x.images, x.audio_frames}) * width;
  }
  return bytes * precision_bytes(g.program->train.precision) / (p.tp * p.dp);
}

// One way to run a section in the sequential step.
struct SequentialOption {
  SectionPlan plan;
  bool twice = false;       // forward only first, forward again with the backward
  bool holds = false;       // keeps its activations from its forward to its backward
  int64_t resident = 0;     // on the devices the whole step: state, held activations, held outputs
  int64_t activations = 0;  // in flight during its own phase
  double step_s = 0;        // on batches[0], the extra forward included
};

std::vector<SequentialOption> sequential_options(const SectionGraph& g, const Cluster& cl, const CostModel& cost, int s,
                                                 const Batch& batch) {
  std::vector<const Sample*> active;
  for (const Sample& x : batch.samples)
    if (g.active(s, x.modalities)) active.push_back(&x);
  std::vector<SequentialOption> all;
  for (const ShapeOption& x : shapes_alone(g, cl, cost, s, batch)) {
    const int64_t resident = x.state_bytes + held_outputs_bytes(g, s, x.plan, batch);
    if (!backward_deferred(g, s)) {
      all.push_back({x.plan, false, false, resident, x.activation_bytes, x.step_s});
      continue;
    }
    // Holding: the replica's share of the step's activations stays from the
    // forward phase to the backward one (its own phase runs on them); a
    // stage recomputed whole holds its inputs and runs its micro-batches'
    // forwards again in its phase (counted as its in-flight activations:
    // over by their inputs, which are also held).
    const bool replays = recomputes_stage(g.section(s), x.plan);
    all.push_back({x.plan, false, true, resident + cost.kept_activation_bytes(s, active, x.plan) / x.plan.dp,
                   replays ? x.activation_bytes : 0, x.step_s});
    all.push_back({x.plan, true, false, resident, x.activation_bytes, x.step_s + forward_pass_s(g, cost, s, x.plan, batch)});
  }
  return pareto_best(std::move(all));
}

}  // namespace

BaselineResult sequential_baseline(const SectionGraph& g, const Cluster& cl, const CostModel& cost,
                                   const std::vector<Batch>& batches, bool overlap_grad_sync) {
  std::vector<std::vector<SequentialOption>> options;
  for (size_t s = 0; s < g.nodes.size(); ++s) options.push_back(sequential_options(g, cl, cost, int(s), batches.front()));
  const std::vector<SequentialOption> chosen = choose_least_sum(options, cl.device.memory_bytes);
  if (chosen.empty()) {
    int64_t states = 0;
    for (const auto& o : options) states += least_resident(o);
    throw PlanError(fmt::format(
        "sequential baseline: the sections' shapes do not fit one {} ({:.0f} GB) together: at least {:.1f} GB of "
        "parameter state and held tensors before any section's activations",
        cl.device.name, double(cl.device.memory_bytes) / 1e9, double(states) / 1e9));
  }
  std::string config;
  for (size_t s = 0; s < g.nodes.size(); ++s)
    config += sequential_shape(g, int(s), chosen[s].plan) +
              (chosen[s].twice ? " forward_twice" : chosen[s].holds ? " holds_activations" : "");
  double sum = 0;
  for (const Batch& b : batches)
    for (size_t s = 0; s < g.nodes.size(); ++s) {
      sum += section_step_s(g, cost, int(s), chosen[s].plan, b, overlap_grad_sync);
      if (chosen[s].twice) sum += forward_pass_s(g, cost, int(s), chosen[s].plan, b);
    }
  return {"sequential", sum / double(batches.size()), config, std::nullopt, ""};
}

BaselineResult sequential_ideal_baseline(const SectionGraph& g, const Cluster& cl, const CostModel& cost,
                                         const std::vector<Batch>& batches, bool overlap_grad_sync) {
  std::vector<SectionPlan> alone;
  std::string config;
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    alone.push_back(best_shape_alone(g, cl, cost, int(s), batches.front()));
    config += sequential_shape(g, int(s), alone.back());
  }
  double sum = 0;
  for (const Batch& b : batches)
    for (size_t s = 0; s < g.nodes.size(); ++s) sum += section_step_s(g, cost, int(s), alone[s], b, overlap_grad_sync);
  return {"sequential-ideal", sum / double(batches.size()), config, std::nullopt, ""};
}

}  // namespace maestro
