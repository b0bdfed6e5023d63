// The section replica (see actors.h).
#include <fmt/format.h>

#include "actors/actors.h"

namespace maestro {

namespace {

struct ReplicaState {
  const char* name = "section-replica";
};

caf::behavior section_replica(caf::stateful_actor<ReplicaState>* self, caf::actor worker, std::string track,
                              caf::actor tracer) {
  // The worker dies with its replica.
  self->link_to(worker);
  return {
      [=](const RunTask& t) {
        auto rp = self->make_response_promise<TaskDone>();
        self->request(worker, caf::infinite, t)
            .then(
                [=](TaskDone& d) mutable {
                  // The hand-off of the outputs' handles: from the worker finishing to here.
                  const int64_t finished = d.begin_us + d.duration_us;
                  self->send(tracer, TraceEvent{track, fmt::format("ship {} outputs", d.outputs.size()), "transfer",
                                                finished, trace_now_us() - finished});
                  rp.deliver(std::move(d));
                },
                [=](caf::error& err) mutable {
                  TaskDone d;
                  d.step = t.step;
                  d.task = t.task.id;
                  d.error = fmt::format("{}: worker lost: {}", track, caf::to_string(err));
                  rp.deliver(std::move(d));
                });
        return rp;
      },
      [=](const ReduceGrads& g) { return self->delegate(worker, g); },
      [=](const ApplyGrads& a) { return self->delegate(worker, a); },
      [=](const SaveSection& s) { return self->delegate(worker, s); },
  };
}

}  // namespace

caf::actor spawn_section_replica(caf::actor_system& sys, caf::actor worker, std::string track, caf::actor tracer) {
  return sys.spawn(section_replica, std::move(worker), std::move(track), std::move(tracer));
}

}  // namespace maestro
