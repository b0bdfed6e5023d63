// The compute worker of a section replica (see actors.h): the only code
// that touches a replica's SectionRunner, one message at a time on its own
// thread. Its trace events go anonymously: the tracer may be in another
// process, and a message with a sender would make the middleman keep this
// (detached) actor alive for the remote side, holding the shutdown.
#include <fmt/format.h>

#include "actors/actors.h"
#include "actors/section_runner.h"

namespace maestro {

namespace {

std::string task_name(const Task& t) {
  return fmt::format("{} mb {}", t.kind == Task::Kind::Forward ? "forward" : "backward", t.micro_batch);
}

caf::behavior compute_worker(caf::event_based_actor* self, std::shared_ptr<SectionRunner> runner, int section,
                             int stage, int replica, caf::actor tracer) {
  const std::string track = fmt::format("{}/{} worker{}", runner->part_name(), replica,
                                        runner->tp_rank() > 0 ? fmt::format(" tp{}", runner->tp_rank()) : "");
  auto where = [runner, stage, replica](int64_t step) {
    const std::string part = runner->part_name() == runner->section_name() ? "" : fmt::format(", stage {}", stage);
    return fmt::format("section '{}'{}, replica {}, step {}", runner->section_name(), part, replica, step);
  };
  return {
      [=](const RunTask& t) -> TaskDone {
        TaskDone d;
        d.step = t.step;
        d.task = t.task.id;
        d.begin_us = trace_now_us();
        try {
          SectionRunner::Result r = t.task.kind == Task::Kind::Forward ? runner->forward(t) : runner->backward(t);
          d.outputs = std::move(r.outputs);
          d.stage_out = std::move(r.stage_out);
        } catch (const std::exception& e) {
          d.error = fmt::format("{}: {} failed: {}", where(t.step), task_name(t.task), e.what());
        }
        d.duration_us = trace_now_us() - d.begin_us;
        d.memory_bytes = int64_t(runner->memory_bytes());
        caf::anon_send(tracer, TraceEvent{track, task_name(t.task), "task", d.begin_us, d.duration_us});
        return d;
      },
      [=](const ReduceGrads& g) -> GradsReduced {
        const int64_t begin = trace_now_us();
        GradsReduced out{section, stage, replica, 0, {}, {}};
        try {
          SectionRunner::StepScalars r = runner->reduce_grads();
          out.grad_sq_norm = r.grad_sq_norm;
          out.losses = std::move(r.losses);
        } catch (const std::exception& e) {
          out.error = fmt::format("{}: reducing gradients failed: {}", where(g.step), e.what());
        }
        caf::anon_send(tracer, TraceEvent{track, "all-reduce", "sync", begin, trace_now_us() - begin});
        return out;
      },
      [=](const ApplyGrads& a) -> Applied {
        const int64_t begin = trace_now_us();
        Applied out{section, stage, replica, {}};
        try {
          runner->apply(a.scale, a.lr);
        } catch (const std::exception& e) {
          out.error = fmt::format("{}: optimizer step failed: {}", where(a.step), e.what());
        }
        caf::anon_send(tracer, TraceEvent{track, "adamw", "sync", begin, trace_now_us() - begin});
        return out;
      },
      [=](const SaveSection& s) -> Saved {
        const int64_t begin = trace_now_us();
        Saved out{section, {}};
        try {
          runner->save(s.path);
        } catch (const std::exception& e) {
          out.error = fmt::format("section '{}': saving '{}' failed: {}", runner->section_name(), s.path, e.what());
        }
        caf::anon_send(tracer, TraceEvent{track, "save", "checkpoint", begin, trace_now_us() - begin});
        return out;
      },
  };
}

}  // namespace

caf::actor spawn_compute_worker(caf::actor_system& sys, std::shared_ptr<SectionRunner> runner, int section,
                                int stage, int replica, caf::actor tracer) {
  return sys.spawn<caf::detached>(compute_worker, std::move(runner), section, stage, replica, std::move(tracer));
}

}  // namespace maestro
