// The planning commands of maestro-run: `--print plan` (the resolved plan per
// section), `--print schedule` (the first step's wavefront schedule, wave by
// wave), `--simulate [--baseline NAME|all] [--steps N] [--trace
// FILE] [--json]` (the plan run on the modelled cluster, averaged over N
// sampled steps) and `--calibrate OUT.toml` (a device profile of this CPU).
// Bad cluster settings and plans that do not fit are invalid input: exit 2.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "actors/processes.h"
#include "actors/run_plan.h"
#include "actors/step_inputs.h"
#include "cli/command.h"
#include "cli/engine_calibration.h"
#include "cli/status_line.h"
#include "data/sampler.h"
#include "gpu/backend_factory.h"
#include "graph/section_graph.h"
#include "graph/tensor_parallel.h"
#include "plan/baselines.h"
#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/roofline_cost.h"
#include "plan/schedule.h"
#include "plan/simulator.h"

namespace maestro {

namespace {

constexpr int64_t kDefaultSimulatedSteps = 4;
// The plan's peak memory fits on steps 0-3 (PlannerOptions::later_batches).
constexpr int64_t kMemoryCheckedSteps = 4;

// Everything the planning commands share; built once, never moved (the cost
// model refers to the graph and the graph to the program).
struct Planned {
  SectionGraph graph;
  Cluster cluster;
  std::unique_ptr<RooflineCost> cost;
  std::unique_ptr<Sampler> sampler;
  Plan plan;

  Planned(const Program& program, const RuntimeConfig& config, StatusLine& status)
      : graph(build_graph(program)), cluster(make_cluster(config)) {
    cost = std::make_unique<RooflineCost>(graph, cluster);
    sampler = std::make_unique<Sampler>(program.data, program.train.global_batch);
    PlannerOptions options;
    options.threads = config.runtime.threads;
    for (int64_t k = 1; k < kMemoryCheckedSteps; ++k) options.later_batches.push_back(sampler->batch(k));
    status.show(fmt::format("planning on {} devices", cluster.devices), true);
    if (status.enabled())
      options.on_simulation = [&](int64_t n) {
        status.show(fmt::format("planning on {} devices: {} plans simulated", cluster.devices, n));
      };
    plan = plan_program(graph, cluster, *cost, sampler->batch(0), options);
  }
};

// Runs `body` on the planned program, a status line on a terminal's stderr
// meanwhile (cli/status_line.h); PlanError and unsamplable data are invalid
// input (exit 2).
template <class Body>
int with_plan(const Program& program, const RuntimeConfig& config, const CliOptions& cli, Body body) {
  StatusLine status(StatusLine::wanted(cli.quiet));
  std::unique_ptr<Planned> p;
  try {
    p = std::make_unique<Planned>(program, config, status);
    std::string out = body(*p, status);
    status.clear();
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  } catch (const PlanError& e) {
    status.clear();
    print_error(e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    status.clear();
    print_error(e.what());
    return 2;
  }
}

std::string cluster_line(const Cluster& c) {
  return fmt::format("{} × {} ({} node{} of {}{}; {:.0f} GB, {:.0f} TFLOP/s bf16 each)", c.devices, c.device.name,
                     c.nodes(), c.nodes() == 1 ? "" : "s", c.devices_per_node,
                     c.hosts.empty() ? "" : ": " + fmt::format("{}", fmt::join(c.hosts, ", ")),
                     double(c.device.memory_bytes) / 1e9, c.device.bf16_flops / 1e12);
}

// The hosts a section's devices are on: "node1", "node1..node4"; "" when the cluster names none.
std::string hosts_cell(const Cluster& c, const SectionPlan& sp) {
  const std::vector<std::string> h = c.hosts_of(sp.first_device, sp.devices);
  if (h.empty()) return "";
  return h.size() == 1 ? h[0] : h.front() + ".." + h.back();
}

std::string plan_table(const Planned& p) {
  const Batch batch = p.sampler->batch(0);
  const bool hosts = !p.cluster.hosts.empty();
  std::string out = fmt::format("{:<14} {:<7} {:>11} {:>3} {:>3} {:>4} {:>11} {:>13} {:>11}{}\n", "section", "mode",
                                "devices", "tp", "pp", "dp", "micro_batch", "memory/dev", "step est.",
                                hosts ? "   hosts" : "");
  for (size_t s = 0; s < p.graph.nodes.size(); ++s) {
    const SectionPlan& sp = p.plan.sections[s];
    int64_t activations = 0;
    for (const auto& mb : loader_order_micro_batches(p.graph, int(s), batch, sp.micro_batch))
      activations = std::max(activations, in_flight_activation_bytes(*p.cost, int(s), mb, sp, in_flight_micro_batches(sp.pp)));
    const int64_t memory = p.cost->weights_bytes_per_device(int(s), sp) + activations;
    const std::string note = recompute_note(p.graph.section(int(s)), sp);
    out += fmt::format("{:<14} {:<7} {:>11} {:>3} {:>3} {:>4} {:>11} {:>10.1f} GB {:>9.4g} s{}{}{}\n",
                       p.graph.nodes[s].name, p.graph.section(int(s)).mode == Mode::Train ? "train" : "frozen",
                       fmt::format("{}-{}", sp.first_device, sp.first_device + sp.devices - 1), sp.tp, sp.pp, sp.dp,
                       sp.micro_batch, double(memory) / 1e9, section_step_s(p.graph, *p.cost, int(s), sp, batch),
                       hosts ? "   " + hosts_cell(p.cluster, sp) : "",
                       sp.shard_optimizer ? "   optimizer sharded (ZeRO-1)" : "",
                       note.empty() ? "" : "  " + note);
  }
  return out;
}

// Each tensor-parallel section's shard on one rank (graph/tensor_parallel.h;
// layer 0's tensors stand for every layer's) and the bytes a rank
// all-reduces in step 0 (RooflineCost::tp_all_reduce_bytes).
std::string tp_lines(const Planned& p) {
  const Batch batch = p.sampler->batch(0);
  std::vector<const Sample*> samples;
  for (const Sample& x : batch.samples) samples.push_back(&x);
  std::string out;
  for (size_t s = 0; s < p.graph.nodes.size(); ++s) {
    const SectionPlan& sp = p.plan.sections[s];
    if (sp.tp <= 1) continue;
    const ModelSpec& model = p.graph.section(int(s)).model;
    out += fmt::format("{} per tp rank (tp {}):", p.graph.nodes[s].name, sp.tp);
    for (const TensorShape& t : model_tensors(model)) {
      const bool other_layer = t.name.find("layers.") != std::string::npos && t.name.find("layers.0.") == std::string::npos;
      if (other_layer && !std::holds_alternative<MlpSpec>(model.spec)) continue;
      const TensorShape shard = tp_shard_shape(model, t, sp.tp);
      if (shard.shape == t.shape) continue;  // replicated
      out += fmt::format(" {} [{}]", t.name, fmt::join(shard.shape, ", "));
    }
    if (const auto* tf = std::get_if<TransformerSpec>(&model.spec))
      out += fmt::format("; vocabulary {} padded to {}", tf->vocab, tp_padded_vocab(tf->vocab, sp.tp));
    out += std::holds_alternative<TransformerSpec>(model.spec) ? "; norms replicated\n"
                                                                : "; the rest (norms, embeddings, row-parallel biases) replicated\n";
    out += fmt::format("{} tp all-reduce per step (step 0, one rank, all replicas): {} bytes\n",
                       p.graph.nodes[s].name, p.cost->tp_all_reduce_bytes(int(s), samples, sp));
  }
  return out;
}

// The schedule levers the plan carries (docs/scheduler.md), on then off.
std::string levers_line(const ScheduleLevers& levers) {
  std::vector<std::string> on, off;
  for (const auto& [name, set] : levers.settings()) (set ? on : off).push_back(name);
  return fmt::format("schedule levers: on {}; off {}\n", on.empty() ? "none" : fmt::format("{}", fmt::join(on, ", ")),
                     off.empty() ? "none" : fmt::format("{}", fmt::join(off, ", ")));
}

// With --processes N: where a real run on this machine puts each section
// replica (the CPU run's plan, actors/run_plan.h; actors/processes.h).
std::string placement_lines(const Program& program, const RuntimeConfig& config, int64_t processes) {
  if (processes <= 1) return "";
  const Program runnable = cpu_runnable(program);
  const SectionGraph graph = build_graph(runnable);
  const StepInputs inputs(graph, runnable.data, runnable.train.global_batch);
  const RunPlan run = plan_run(graph, config, cpu_slots(config.runtime.threads), processes, inputs.step(0)->batch);
  const std::vector<std::vector<int>> placement =
      place_replicas(run.plan, int(processes), run.cluster ? run.cluster->devices_per_node : 0);
  std::vector<std::string> names;
  for (const SectionNode& n : graph.nodes) names.push_back(n.name);
  std::string out = fmt::format("training over {} processes:\n", processes);
  for (const std::string& line : placement_lines(placement, names, run.cluster ? &*run.cluster : nullptr))
    out += "  " + line + "\n";
  return out;
}

int print_plan_command(const Program& program, const RuntimeConfig& config, const CliOptions& cli) {
  return with_plan(program, config, cli, [&](const Planned& p, StatusLine&) {
    return fmt::format("plan: {} on {}\n", program.file, cluster_line(p.cluster)) + plan_table(p) +
           fmt::format("in-flight cap: {} micro-batches per replica\n", p.plan.in_flight_cap) +
           levers_line(p.plan.levers) + tp_lines(p) +
           placement_lines(program, config, cli.processes);
  });
}

int print_schedule_command(const Program& program, const RuntimeConfig& config, const CliOptions& cli) {
  return with_plan(program, config, cli, [&](const Planned& p, StatusLine&) {
    const Schedule sch = wavefront_schedule(p.graph, p.plan, *p.cost, p.sampler->batch(0));
    std::string out = fmt::format("schedule of step 0: {} samples, {} tasks in {} waves (in-flight cap {})\n",
                                  sch.batch.samples.size(), sch.tasks.size(), sch.waves.size(), sch.in_flight_cap);
    for (size_t w = 0; w < sch.waves.size(); ++w) {
      out += fmt::format("wave {}:", w);
      for (int64_t id : sch.waves[w]) {
        const Task& t = sch.tasks[size_t(id)];
        out += fmt::format(" {}.{}{}[r{} s{} {}]", p.graph.nodes[size_t(t.section)].name,
                           t.kind == Task::Kind::Forward ? "F" : "B", t.micro_batch, t.replica, t.stage,
                           sch.micro_batch_of(t).samples.size());
      }
      out += "\n";
    }
    return out;
  });
}

int simulate_command(const Program& program, const RuntimeConfig& config, const CliOptions& cli) {
  return with_plan(program, config, cli, [&](const Planned& p, StatusLine& status) {
    const int64_t steps = cli.steps.value_or(kDefaultSimulatedSteps);
    const std::string trace_path = cli.trace.empty() ? config.trace.path : cli.trace;
    std::vector<Batch> batches;
    double iteration = 0, lower_bound = 0;
    int64_t peak = 0, peak_step = 0;  // the most bytes any device holds, and on which step
    for (int64_t k = 0; k < steps; ++k) {
      status.show(fmt::format("simulating step {} of {}", k + 1, steps), true);
      batches.push_back(p.sampler->batch(k));
      const Schedule sch = wavefront_schedule(p.graph, p.plan, *p.cost, batches.back());
      const SimResult r = simulate(p.graph, p.plan, sch, *p.cost, {.trace = k == 0 && !trace_path.empty()});
      iteration += r.iteration_s / double(steps);
      lower_bound += r.lower_bound_s / double(steps);
      for (int64_t bytes : r.peak_memory_bytes)
        if (bytes > peak) peak = bytes, peak_step = k;
      if (k == 0 && !trace_path.empty()) {
        std::ofstream f(trace_path);
        write_chrome_trace(f, r.spans, p.plan.device_count());
        if (!f) throw std::runtime_error("cannot write the trace to " + trace_path);
      }
    }
    // The ladder (docs/planner.md, "Baselines"): the one named, or with
    // `all` every baseline, slowest rung first as the issue orders them.
    std::vector<BaselineResult> ladder;
    // A baseline that fits no device is reported as such (the wavefront's
    // result stands): kd_70b_to_8b on 8 H100 cannot hold its teacher's
    // logits for the whole step, which a sequential step needs.
    auto run_baseline = [&](const std::string& name) {
      status.show("baseline " + name, true);
      try {
        if (name == "sequential") ladder.push_back(sequential_baseline(p.graph, p.cluster, *p.cost, batches));
        if (name == "sequential-ideal") ladder.push_back(sequential_ideal_baseline(p.graph, p.cluster, *p.cost, batches));
        if (name == "megatron-ideal") ladder.push_back(tuned_megatron(p.graph, p.cluster, *p.cost, batches));
        if (name == "megatron") ladder.push_back(tuned_faithful_megatron(p.graph, p.cluster, *p.cost, batches));
        if (name == "mimo") ladder.push_back(tuned_mimo(p.graph, p.cluster, *p.cost, batches));
      } catch (const PlanError& e) {
        BaselineResult unfit;
        unfit.name = name;
        unfit.error = e.what();
        ladder.push_back(std::move(unfit));
      }
    };
    if (cli.baseline == "all")
      for (const char* name : {"sequential", "sequential-ideal", "megatron", "megatron-ideal", "mimo"}) run_baseline(name);
    else if (!cli.baseline.empty())
      run_baseline(cli.baseline);
    // `baseline`/`speedup` (text and JSON): the named one, megatron for `all`.
    std::optional<BaselineResult> baseline;
    for (const BaselineResult& b : ladder)
      if (b.name == (cli.baseline == "all" ? "megatron" : cli.baseline)) baseline = b;

    std::string out = fmt::format("simulate: {} on {}, mean of {} step{} of {} samples\n", program.file,
                                  cluster_line(p.cluster), steps, steps == 1 ? "" : "s", program.train.global_batch);
    out += plan_table(p);
    out += fmt::format("iteration  {:.6g} s   lower bound {:.6g} s   utilization {:.1f}%\n", iteration, lower_bound,
                       100 * lower_bound / iteration);
    // Parameter state plus in-flight activations, simulated (the table's
    // memory/dev is the planner's estimate per section).
    out += fmt::format("memory     {:.1f} GB peak on a device (step {}) of {:.0f} GB{}\n", double(peak) / 1e9, peak_step,
                       double(p.cluster.device.memory_bytes) / 1e9,
                       peak > p.cluster.device.memory_bytes ? ": does not fit, the plan would run out of memory" : "");
    if (cli.baseline == "all")
      for (const BaselineResult& b : ladder)
        out += b.error.empty() ? fmt::format("{:<16} {:.6g} s   speedup {:.3f}×{}{}\n", b.name, b.iteration_s,
                                             b.iteration_s / iteration,
                                             b.iteration_s < iteration ? " (the baseline is faster)" : "",
                                             b.config.empty() ? "" : "   " + b.config)
                               : fmt::format("{:<16} does not fit: {}\n", b.name, b.error);
    else if (baseline && !baseline->error.empty())
      out += fmt::format("{:<10} does not fit: {}\n", baseline->name, baseline->error);
    else if (baseline)
      out += fmt::format("{:<10} {:.6g} s{}\nspeedup    {:.3f}×\n", baseline->name, baseline->iteration_s,
                         baseline->config.empty() ? "" : "   " + baseline->config, baseline->iteration_s / iteration);
    // Sections whose tp or pp the program fixes (written, or the language's
    // defaults tp = 1, pp = 1), which every baseline tunes freely.
    std::vector<std::string> pinned;
    nlohmann::ordered_json pinned_json = nlohmann::ordered_json::object();
    for (size_t s = 0; s < p.graph.nodes.size(); ++s) {
      const ParallelSpec& par = p.graph.section(int(s)).parallel;
      if (!par.tp && !par.pp) continue;
      const SectionPlan& sp = p.plan.sections[s];
      pinned.push_back(fmt::format("{}{}{}", p.graph.nodes[s].name, par.tp ? fmt::format(" tp {}", sp.tp) : "",
                                   par.pp ? fmt::format(" pp {}", sp.pp) : ""));
      if (par.tp) pinned_json[p.graph.nodes[s].name]["tp"] = sp.tp;
      if (par.pp) pinned_json[p.graph.nodes[s].name]["pp"] = sp.pp;
    }
    if (!ladder.empty() && !pinned.empty())
      out += fmt::format(
          "pinned     {}: written or the defaults (tp = 1, pp = 1), where the baselines choose every module's tp "
          "and pp; `parallel {{ tp = auto; pp = auto; }}` gives the planner the same freedom\n",
          fmt::join(pinned, ", "));
    if (!trace_path.empty()) out += fmt::format("trace of step 0: {}\n", trace_path);
    if (cli.json) {
      nlohmann::ordered_json j;
      j["mode"] = "simulate";
      j["devices"] = p.cluster.devices;
      j["device"] = p.cluster.device.name;
      j["steps"] = steps;
      j["iteration_s"] = iteration;
      j["lower_bound_s"] = lower_bound;
      j["utilization"] = lower_bound / iteration;
      j["peak_memory_bytes"] = peak;
      j["peak_memory_step"] = peak_step;
      j["fits_memory"] = peak <= p.cluster.device.memory_bytes;
      j["plan"] = nlohmann::ordered_json::object();
      for (size_t s = 0; s < p.graph.nodes.size(); ++s) {
        const SectionPlan& sp = p.plan.sections[s];
        j["plan"][p.graph.nodes[s].name] = {{"tp", sp.tp}, {"pp", sp.pp}, {"dp", sp.dp},
                                            {"micro_batch", sp.micro_batch}, {"devices", sp.devices},
                                            {"shard_optimizer", sp.shard_optimizer},
                                            {"recompute", recomputed_layers(p.graph.section(int(s)), sp)},
                                            {"recompute_stage", recomputes_stage(p.graph.section(int(s)), sp)}};
        if (!p.cluster.hosts.empty())
          j["plan"][p.graph.nodes[s].name]["hosts"] = p.cluster.hosts_of(sp.first_device, sp.devices);
      }
      j["in_flight_cap"] = p.plan.in_flight_cap;
      j["levers"] = nlohmann::ordered_json::object();
      for (const auto& [name, set] : p.plan.levers.settings()) j["levers"][name] = set;
      if (baseline && !baseline->error.empty()) {
        j["baseline"] = {{"name", baseline->name}, {"error", baseline->error}};
      } else if (baseline) {
        j["baseline"] = {{"name", baseline->name}, {"iteration_s", baseline->iteration_s}, {"config", baseline->config}};
        j["speedup"] = baseline->iteration_s / iteration;
      }
      if (!ladder.empty()) {
        j["pinned"] = pinned_json;  // {section: {tp, pp}} of the fixed degrees
        // Each rung, then Maestro itself; speedup = the rung's time / Maestro's.
        j["ladder"] = nlohmann::ordered_json::array();
        for (const BaselineResult& b : ladder)
          j["ladder"].push_back(b.error.empty() ? nlohmann::ordered_json{{"name", b.name},
                                                                         {"iteration_s", b.iteration_s},
                                                                         {"config", b.config},
                                                                         {"speedup", b.iteration_s / iteration}}
                                                : nlohmann::ordered_json{{"name", b.name}, {"error", b.error}});
        j["ladder"].push_back({{"name", "maestro"}, {"iteration_s", iteration}, {"config", ""}, {"speedup", 1.0}});
      }
      out += j.dump() + "\n";
    }
    return out;
  });
}

int calibrate_command(const Program&, const RuntimeConfig& config, const CliOptions& cli) {
  // `[runtime] backend` picks the device: cuda (or auto on a GPU machine) profiles CUDA device 0.
  BackendChoice backend;
  try {
    backend = choose_backend(config.runtime.backend);
  } catch (const std::exception& e) {
    print_error(std::string(config.file.empty() ? "" : config.file + ": ") + e.what());
    return 2;
  }
  DeviceSpec d;
  try {
#if MAESTRO_HAVE_CUDA_BACKEND
    d = backend.kind == BackendKind::Cuda ? calibrate_local_gpu(0) : calibrate_local_cpu(0);
#else
    d = calibrate_local_cpu(0);
#endif
  } catch (const std::runtime_error& e) {  // a CUDA fault
    print_error(e.what());
    return 1;
  }
  try {
    write_device_profile(d, cli.calibrate);
  } catch (const PlanError& e) {
    print_error(e.what());
    return 1;
  }
  std::string attention;  // "0.17 at 64, 0.19 at 256, ... tokens"
  for (const auto& [tokens, e] : d.attention.points)
    attention += fmt::format("{}{:.2f} at {:.0f}", attention.empty() ? "" : ", ", e, tokens);
  attention += " tokens";
  fmt::print("calibrated {}: {}gemm {:.1f} GFLOP/s, memory {:.1f} GB/s, {:.1f} GB, engine efficiency {:.2f} · size / "
             "(size + {:.0f}), attention {} -> {}\n",
             backend_kind_name(backend.kind), backend.kind == BackendKind::Cuda ? "bf16 " : "s",
             backend.kind == BackendKind::Cuda ? d.bf16_flops / 1e9 : d.fp32_flops / 1e9, d.memory_bytes_per_s / 1e9,
             double(d.memory_bytes) / 1e9, d.gemm.max, d.gemm.half_size, attention, cli.calibrate);
  return 0;
}

CommandRegistration print_plan("print-plan", &print_plan_command);
CommandRegistration print_schedule("print-schedule", &print_schedule_command);
CommandRegistration simulate_reg("simulate", &simulate_command);
CommandRegistration calibrate_reg("calibrate", &calibrate_command);

}  // namespace

}  // namespace maestro
