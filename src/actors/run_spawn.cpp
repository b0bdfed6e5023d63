// Spawning a run's actors (train_phases.h).
#include <fmt/format.h>

#include "actors/actors.h"
#include "actors/repl.h"
#include "actors/section_runner.h"
#include "actors/train_phases.h"
#include "nn/section_model.h"

namespace maestro {

std::vector<std::vector<std::vector<caf::actor>>> spawn_replicas(caf::actor_system& sys, RunSetup& setup,
                                                                 const SectionGraph& graph, const TrainOptions& options,
                                                                 caf::actor tracer, std::vector<caf::actor>& all) {
  std::vector<std::vector<std::vector<caf::actor>>> out(graph.nodes.size());
  for (size_t s = 0; s < graph.nodes.size(); ++s)
    for (size_t k = 0; k < setup.runners[s].size(); ++k) {
      out[s].emplace_back();
      for (size_t r = 0; r < setup.runners[s][k].size(); ++r) {
        if (setup.runners[s][k][r].empty()) {  // hosted by another process
          out[s][k].emplace_back();
          continue;
        }
        std::vector<caf::actor> workers;  // one per tp rank
        int64_t memory = 0;
        for (const std::shared_ptr<SectionRunner>& runner : setup.runners[s][k][r]) {
          memory += int64_t(runner->memory_bytes());
          workers.push_back(spawn_compute_worker(sys, runner, int(s), int(k), int(r), tracer));
          all.push_back(workers.back());
        }
        ActorInfo identity;
        identity.section = graph.nodes[s].name;
        identity.stage = int(k);
        identity.replica = int(r);
        identity.device = options.backend == BackendKind::Cuda ? "cuda" : "cpu";
        const std::string track = fmt::format("{}/{} replica", setup.runners[s][k][r][0]->part_name(), r);
        caf::actor replica = spawn_section_replica(sys, std::move(workers), track, tracer, std::move(identity), memory);
        out[s][k].push_back(replica);
        all.push_back(replica);
      }
    }
  setup.runners.clear();  // the workers own them now
  return out;
}

RunActors spawn_run(caf::actor_system& sys, RunSetup& setup, const SectionGraph& graph, const Plan& plan,
                    const StepInputs& inputs, const TrainSpec& train, const TrainOptions& options) {
  RunActors out;
  out.tracer = setup.tracer ? setup.tracer : spawn_tracer(sys, !options.trace_path.empty());
  out.all.push_back(out.tracer);
  SchedulerConfig sc;
  sc.graph = &graph;
  sc.plan = &plan;
  sc.replicas = spawn_replicas(sys, setup, graph, options, out.tracer, out.all);
  for (size_t s = 0; s < sc.replicas.size(); ++s)  // the other processes' replicas (processes.h)
    for (size_t k = 0; k < sc.replicas[s].size(); ++k)
      for (size_t r = 0; r < sc.replicas[s][k].size(); ++r)
        if (!sc.replicas[s][k][r]) sc.replicas[s][k][r] = setup.remote.at(s).at(k).at(r);
  const StepInputs* in = &inputs;
  sc.loader = spawn_data_loader(sys, [in](int64_t step) { return in->step(step); }, setup.last_step, out.tracer);
  out.all.push_back(sc.loader);
  const std::string ckpt_root = options.checkpoint_dir.empty() ? train.checkpoint_dir : options.checkpoint_dir;
  if (!ckpt_root.empty()) {
    CheckpointerConfig cc{ckpt_root, {}, {}, {}, setup.seed, inputs.data_seed(), train.global_batch, options.schedule,
                          options.checkpoint_keep, {}};
    for (size_t s = 0; s < graph.nodes.size(); ++s)
      for (int64_t k = 0; k < plan.sections[s].pp && graph.section(int(s)).mode == Mode::Train; ++k) {
        cc.sections.push_back(int(s));
        cc.names.push_back(part_name(graph.nodes[s].name, int(k), int(plan.sections[s].pp)));
        cc.replica0.push_back(sc.replicas[s][size_t(k)][0]);
        if (run_shards_optimizer(train, plan, int(s)))  // SectionRunner shards when dp > 1
          for (size_t r = 1; r < sc.replicas[s][size_t(k)].size(); ++r) cc.gatherers.push_back(sc.replicas[s][size_t(k)][r]);
      }
    sc.checkpointer = spawn_checkpointer(sys, std::move(cc), out.tracer);
    out.all.push_back(sc.checkpointer);
    // Without `every`, one checkpoint at the end (and on Ctrl-C).
    sc.checkpoint_every = train.checkpoint_every > 0 ? train.checkpoint_every : setup.last_step;
  }
  std::shared_ptr<const StepSchedules> schedules = setup.schedules;
  sc.schedule_of = [schedules](const Batch& b) { return schedules->of(b); };
  sc.lr_at = [&train](int64_t step) { return lr_at(train, step); };
  sc.grad_clip = train.grad_clip;
  sc.tracer = out.tracer;
  sc.losses = setup.past_losses;
  sc.global_batch = train.global_batch;
  sc.interrupt = options.interrupt;
  out.scheduler = spawn_scheduler(sys, sc);
  out.all.push_back(out.scheduler);
  if (!options.repl.empty()) {  // it asks every actor but the compute workers (busy computing) to describe itself
    ReplConfig rc{&graph, &plan, out.scheduler, out.tracer, {out.scheduler, sc.loader}};
    if (sc.checkpointer) rc.actors.push_back(sc.checkpointer);
    rc.actors.push_back(out.tracer);
    for (const auto& stages : sc.replicas)
      for (const auto& replicas : stages) rc.actors.insert(rc.actors.end(), replicas.begin(), replicas.end());
    out.repl = spawn_repl(sys, std::move(rc));
    out.all.push_back(out.repl);
  }
  return out;
}

}  // namespace maestro
