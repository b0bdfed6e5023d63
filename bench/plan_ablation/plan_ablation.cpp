// The planner's and wavefront scheduler's levers switched off one at a time
// (docs/PERFORMANCE.md §3): for one model and cluster, the mean simulated
// iteration of the full plan, of the plan with sample reordering off, with
// token micro-batches off, with disjoint placement off, with the
// in-flight cap left at the largest pp, all of them off, with devices
// serving tasks first ready first served (not longest path first), with the grad sync
// overlapped (against the sequential baseline under the same rule), with
// the per-step micro-batch choice alone off (token budgets of micro_batch ×
// the step's mean), with `recompute = auto` sections held to no
// recomputation (only where the program has one), and the two
// sequential baselines (each section alone on all devices; baselines.h).
// Each variant is planned with its lever off, so the planner adapts to it.
// Usage: bench_plan_ablation MODEL.sect CLUSTER.toml [STEPS]
#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "config/runtime_config.h"
#include "data/sampler.h"
#include "dsl/frontend.h"
#include "plan/baselines.h"
#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/roofline_cost.h"
#include "plan/schedule.h"
#include "plan/simulator.h"

namespace {

using namespace maestro;

std::string layout(const SectionGraph& g, const Plan& plan) {
  std::string out;
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const SectionPlan& p = plan.sections[s];
    out += fmt::format("{}{} {}-{} tp{} pp{} dp{} mb{}{}", s ? "; " : "", g.nodes[s].name, p.first_device,
                       p.first_device + p.devices - 1, p.tp, p.pp, p.dp, p.micro_batch,
                       recompute_note(g.section(int(s)), p));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: {} MODEL.sect CLUSTER.toml [STEPS]\n", argv[0]);
    return 2;
  }
  Diagnostics diags;
  const std::optional<Program> program = load_program(argv[1], diags);
  if (!program) {
    fmt::print(stderr, "{}: cannot load the program\n", argv[1]);
    return 2;
  }
  try {
    const SectionGraph g = build_graph(*program);
    const Cluster cl = make_cluster(load_runtime_config(argv[2]));
    const RooflineCost cost(g, cl);
    const Sampler sampler(program->data, program->train.global_batch);
    const int64_t steps = argc > 3 ? std::atoll(argv[3]) : 4;
    std::vector<Batch> batches;
    for (int64_t k = 0; k < steps; ++k) batches.push_back(sampler.batch(k));
    const double sequential = sequential_baseline(g, cl, cost, batches).iteration_s;
    const double sequential_overlapped = sequential_baseline(g, cl, cost, batches, true).iteration_s;
    const double ideal = sequential_ideal_baseline(g, cl, cost, batches).iteration_s;
    const double ideal_overlapped = sequential_ideal_baseline(g, cl, cost, batches, true).iteration_s;
    struct Variant {
      const char* name;
      PlannerOptions options;
    };
    std::vector<Variant> variants{{"full", {}},     {"reorder off", {}}, {"token mb off", {}},       {"disjoint off", {}},
                                  {"cap = pp", {}}, {"all off", {}},     {"critical path off", {}}};
    variants[1].options.levers.reorder = false;
    variants[2].options.levers.token_micro_batches = false;
    variants[3].options.disjoint_placement = false;
    variants[4].options.raise_in_flight_cap = false;
    variants[5].options = {false, false, {false, false, false, false, false, false}, false, {}, {}};
    variants[6].options.levers.critical_path_first = false;
    fmt::print(
        "{} on {} × {}, mean of {} steps; sequential {:.4f} s ({:.4f} s with grad sync overlap), sequential-ideal "
        "{:.4f} s ({:.4f} s)\n",
        argv[1], cl.devices, cl.device.name, steps, sequential, sequential_overlapped, ideal, ideal_overlapped);
    // Off by default (docs/PERFORMANCE.md §3): the full plan with the grad
    // sync overlapped against the sequential baseline under the same rule.
    // Per-step adaptation alone off: token micro-batches of micro_batch × the mean.
    variants.push_back({"per-step mb off", {}});
    variants.back().options.levers.per_step_micro_batch = false;
    // Host groups off: a producer over several consumer replicas deals its own samples.
    variants.push_back({"host groups off", {}});
    variants.back().options.levers.host_groups = false;
    variants.push_back({"sync overlap on", {}});
    variants.back().options.levers.overlap_grad_sync = true;
    // Recomputation off: the program's `recompute = auto` sections as
    // `recompute = false` (a program of its own; the same baseline).
    Program no_recompute = *program;
    bool any_auto = false;
    for (Section& s : no_recompute.sections) any_auto |= std::exchange(s.recompute_auto, false);
    const SectionGraph g_off = build_graph(no_recompute);
    const RooflineCost cost_off(g_off, cl);
    if (any_auto) variants.push_back({"recompute off", {}});
    for (Variant& v : variants) {
      const bool off = std::string(v.name) == "recompute off";
      const SectionGraph& vg = off ? g_off : g;
      const CostModel& vc = off ? static_cast<const CostModel&>(cost_off) : cost;
      v.options.later_batches.assign(batches.begin() + 1, batches.end());  // as maestro-run: memory fits every step
      const Plan plan = plan_program(vg, cl, vc, batches.front(), v.options);
      double iteration = 0, lower = 0;
      for (const Batch& b : batches) {
        const SimResult r = simulate(vg, plan, wavefront_schedule(vg, plan, vc, b), vc);
        iteration += r.iteration_s / double(steps);
        lower += r.lower_bound_s / double(steps);
      }
      const bool overlap = v.options.levers.overlap_grad_sync;
      fmt::print("  {:<18} {:.4f} s  lower bound {:.4f} s  vs sequential {:.3f}x (ideal {:.3f}x)  [{}]\n", v.name,
                 iteration, lower, (overlap ? sequential_overlapped : sequential) / iteration,
                 (overlap ? ideal_overlapped : ideal) / iteration, layout(vg, plan));
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", argv[1], e.what());
    return 2;
  }
  return 0;
}
