// `maestro-run --worker HOST:PORT`: a worker process of a multi-process run
// (actors/processes.h). It has no model of its own: the coordinator sends
// the model's source, the run options it resolved and its plan; the worker
// builds the same runnable program, graph and step inputs from them, as the
// train command does, then hosts the replicas it is assigned on the
// coordinator's backend (cpu or cuda, with its --gpu-selfcheck).
#include <fmt/format.h>

#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "actors/processes.h"
#include "actors/run_plan.h"
#include "actors/step_inputs.h"
#include "cli/command.h"
#include "dsl/frontend.h"
#include "gpu/device_query.h"

namespace maestro {

namespace {

// What the worker's runners refer to: built once per Assignment, alive
// until the process ends.
struct BuiltRun {
  Program runnable;
  SectionGraph graph;
  std::unique_ptr<StepInputs> inputs;
  Plan plan;
};

}  // namespace

int run_worker(const std::string& address, int32_t rank) {
  std::vector<std::unique_ptr<BuiltRun>> built;  // outlives serve_worker's actors
  auto prepare = [&](const RunSpec& spec) -> WorkerRun {
    Diagnostics diags;
    std::optional<Program> loaded = load_program_text(spec.model_source, spec.model_path, diags);
    if (!loaded) {
      std::ostringstream text;
      diags.render(text);
      throw std::invalid_argument("the coordinator's model does not load here: " + text.str());
    }
    Program program = std::move(*loaded);
    if (spec.steps >= 0) program.train.steps = spec.steps;
    program.train.optimizer.shard = spec.shard;
    auto b = std::make_unique<BuiltRun>();
    b->runnable = cpu_runnable(program);
    b->graph = build_graph(b->runnable);
    b->inputs = std::make_unique<StepInputs>(b->graph, b->runnable.data, b->runnable.train.global_batch);
    b->plan = spec.plan;  // the coordinator's
    if (b->plan.sections.size() != b->graph.nodes.size())
      throw std::invalid_argument(fmt::format("the coordinator's plan has {} sections, its model {} here",
                                              b->plan.sections.size(), b->graph.nodes.size()));
    WorkerRun run;
    run.graph = &b->graph;
    run.plan = &b->plan;
    run.train = &b->runnable.train;
    run.options.schedule = spec.schedule;
    if (spec.stop_after >= 0) run.options.stop_after = spec.stop_after;
    run.options.resume = spec.resume;
    run.options.seed = spec.seed;
    run.options.threads = spec.threads;
    // The coordinator's backend, resolved on this machine: a worker that
    // cannot run it refuses its share (exit 2 on both sides).
    run.options.backend = worker_backend(spec.backend, cuda_backend_built(), cuda_device_count().value_or(-1));
    const std::optional<AttentionPath> attention = parse_attention_path(spec.gpu_attention);
    if (!attention) throw std::invalid_argument("the coordinator's --gpu-attention " + spec.gpu_attention + " is unknown here");
    set_gpu_settings({spec.gpu_selfcheck, b->runnable.train.precision == Precision::BF16, false, *attention});
    built.push_back(std::move(b));
    return run;
  };
  return serve_worker(address, prepare, rank);
}

}  // namespace maestro
