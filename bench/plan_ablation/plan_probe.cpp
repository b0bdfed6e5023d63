// What-if probe for the planner's diagnoses (docs/planner.md, "The points
// below parity"): each section's sequential shape (best_shape_alone) and
// its estimate on step 0, then hand-given layouts simulated on step 0 with
// their peak memory per device, whether or not they fit — to see what a
// plan would gain if memory allowed it, which the planner cannot show; and
// the planner's plan and each layout on steps 0-3 with their peak memory
// (the planner chooses on step 0 only), and step 0's fullest device: what
// its memory holds at its peak, section by section.
// Usage: bench_plan_probe MODEL.sect CLUSTER.toml ["tp,pp,dp,mb[,first[,level]];… per section" CAP]...
// (level: SectionPlan::recompute_level 0-3, for a `recompute = auto`
// section; CAP: the in-flight cap, optionally followed by `p` — per-step
// micro-batches off —, `t` — token micro-batches off — and `c` — critical
// path first off.)
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "config/runtime_config.h"
#include "data/sampler.h"
#include "dsl/frontend.h"
#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/roofline_cost.h"
#include "plan/schedule.h"
#include "plan/simulator.h"

using namespace maestro;

int main(int argc, char** argv) {
  if (argc < 3 || argc % 2 == 0) {
    fmt::print(stderr, "usage: {} MODEL.sect CLUSTER.toml [\"tp,pp,dp,mb[,first[,level]];...\" CAP]...\n", argv[0]);
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
    const Batch batch = Sampler(program->data, program->train.global_batch).batch(0);
    // The largest active sample of section s (the memory bound's micro-batch of 1).
    auto largest = [&](int s) {
      const Sample* big = nullptr;
      int64_t most = 0;
      for (const Sample& x : batch.samples)
        if (const int64_t t = g.tokens(s, {x.modalities, x.text_tokens, x.images, x.audio_frames}); t > most)
          most = t, big = &x;
      return std::pair{big, most};
    };
    auto describe = [&](int s, const SectionPlan& p, const char* what) {
      const auto [big, tokens] = largest(s);
      fmt::print("  {} {:<12} tp{} pp{} dp{} mb{}{}{}: estimate {:.3f} s, state {:.1f} GB, largest sample {} tokens "
                 "{:.1f} GB of activations\n",
                 what, g.nodes[size_t(s)].name, p.tp, p.pp, p.dp, p.micro_batch, p.shard_optimizer ? " zero1" : "",
                 recompute_note(g.section(s), p),
                 section_step_s(g, cost, s, p, batch), double(cost.weights_bytes_per_device(s, p)) / 1e9, tokens,
                 big ? double(cost.activation_bytes(s, {big}, p)) / 1e9 : 0.0);
    };
    for (int s = 0; s < int(g.nodes.size()); ++s) describe(s, best_shape_alone(g, cl, cost, s, batch), "alone");
    // The planner chooses on step 0; a layout on steps 0-3, with its peak
    // memory per device on each.
    const Sampler sampler(program->data, program->train.global_batch);
    // Step 0's fullest device: its sections' weights and each section's
    // activations in flight at its peak.
    auto fullest = [&](const Plan& plan) {
      SimOptions o;
      o.memory_breakdown = true;
      const SimResult x = simulate(g, plan, wavefront_schedule(g, plan, cost, batch), cost, o);
      const size_t d = size_t(std::max_element(x.peak_memory_bytes.begin(), x.peak_memory_bytes.end()) -
                              x.peak_memory_bytes.begin());
      int64_t activations = 0;
      for (int64_t b : x.peak_activations_by_section[d]) activations += b;
      fmt::print("    step 0's fullest device {}: {:.1f} GB = weights {:.1f} GB + activations", d,
                 double(x.peak_memory_bytes[d]) / 1e9, double(x.peak_memory_bytes[d] - activations) / 1e9);
      for (size_t s = 0; s < g.nodes.size(); ++s)
        if (x.peak_activations_by_section[d][s] != 0)
          fmt::print(" {} {:.1f} GB", g.nodes[s].name, double(x.peak_activations_by_section[d][s]) / 1e9);
      fmt::print("\n");
    };
    auto steps = [&](const Plan& plan) {
      double sum = 0;
      fmt::print("    steps 0-3:");
      for (int64_t k = 0; k < 4; ++k) {
        const SimResult x = simulate(g, plan, wavefront_schedule(g, plan, cost, sampler.batch(k)), cost);
        sum += x.iteration_s;
        fmt::print("{} {:.3f} s ({:.1f} GB)", k ? "," : "", x.iteration_s,
                   double(*std::max_element(x.peak_memory_bytes.begin(), x.peak_memory_bytes.end())) / 1e9);
      }
      fmt::print("; mean {:.4f} s\n", sum / 4);
    };
    {
      PlannerOptions options;  // as maestro-run: memory fits on steps 0-3
      for (int64_t k = 1; k < 4; ++k) options.later_batches.push_back(sampler.batch(k));
      const Plan plan = plan_program(g, cl, cost, batch, options);
      const ScheduleLevers& l = plan.levers;
      fmt::print("the planner's plan (in-flight cap {}; levers: reorder {}, token micro-batches {}, per step {}, "
                 "critical path first {}, host groups {}, sync overlap {}):\n",
                 plan.in_flight_cap, l.reorder, l.token_micro_batches, l.per_step_micro_batch, l.critical_path_first,
                 l.host_groups, l.overlap_grad_sync);
      for (int s = 0; s < int(g.nodes.size()); ++s) describe(s, plan.sections[size_t(s)], "    ");
      steps(plan);
      fullest(plan);
    }
    for (int a = 3; a + 1 < argc; a += 2) {
      Plan plan;
      plan.cluster_devices = cl.devices;
      plan.in_flight_cap = std::atoll(argv[a + 1]);
      // CAP may end in lever switches (see the top).
      for (const char* c = argv[a + 1]; *c; ++c) {
        if (*c == 'p') plan.levers.per_step_micro_batch = false;
        if (*c == 't') plan.levers.token_micro_batches = false;
        if (*c == 'c') plan.levers.critical_path_first = false;
      }
      std::stringstream list(argv[a]);
      std::string part;
      for (int s = 0; std::getline(list, part, ';'); ++s) {
        if (s >= int(g.nodes.size())) throw std::invalid_argument(fmt::format("'{}': more sections than the program", argv[a]));
        long tp = 0, pp = 0, dp = 0, mb = 0, first = 0, level = 0;
        if (std::sscanf(part.c_str(), "%ld,%ld,%ld,%ld,%ld,%ld", &tp, &pp, &dp, &mb, &first, &level) < 4 || tp < 1 ||
            pp < 1 || dp < 1 || mb < 1 || first < 0 || level < 0 || level > 3 ||
            (level > 0 && !(g.section(s).recompute_auto && g.section(s).mode == Mode::Train)))
          throw std::invalid_argument(fmt::format(
              "'{}': want tp,pp,dp,micro_batch[,first_device[,recompute level 0-3 (SectionPlan::recompute_level): a "
              "train section with recompute = auto]]",
              part));
        SectionPlan p;
        p.tp = tp, p.pp = pp, p.dp = dp, p.micro_batch = mb, p.first_device = first, p.devices = tp * pp * dp;
        p.shard_optimizer = dp > 1 && g.section(s).mode == Mode::Train;
        p.recompute_level = level;
        describe(s, p, "    ");
        plan.sections.push_back(p);
      }
      if (plan.sections.size() != g.nodes.size())
        throw std::invalid_argument(fmt::format("'{}': one shape per section", argv[a]));
      const SimResult r = simulate(g, plan, wavefront_schedule(g, plan, cost, batch), cost);
      double busy = 0;
      for (double b : r.device_busy_s) busy += b / double(r.device_busy_s.size());
      fmt::print("{} cap {}: step 0 {:.3f} s (compute ends {:.3f} s, devices busy {:.3f} s on average), lower bound "
                 "{:.3f} s, peak {:.1f} GB per device\n",
                 argv[a], argv[a + 1], r.iteration_s, r.compute_end_s, busy, r.lower_bound_s,
                 double(*std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end())) / 1e9);
      steps(plan);
      fullest(plan);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", argv[1], e.what());
    return 2;
  }
  return 0;
}
