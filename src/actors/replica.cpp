// The section replica (see actors.h).
#include <fmt/format.h>

#include <deque>

#include "actors/actors.h"
#include "actors/describe.h"

namespace maestro {

namespace {

struct ReplicaState {
  const char* name = "section-replica";
  std::deque<std::string> running;  // tasks handed to the worker, oldest first
  int64_t tasks_done = 0, busy_us = 0;
};

std::string task_label(const Task& t) {
  return fmt::format("{} mb {}", t.kind == Task::Kind::Forward ? "forward" : "backward", t.micro_batch);
}

caf::behavior section_replica(caf::stateful_actor<ReplicaState>* self, caf::actor worker, std::string track,
                              caf::actor tracer, ActorInfo identity) {
  // The worker dies with its replica.
  self->link_to(worker);
  return {
      [=](const RunTask& t) {
        auto rp = self->make_response_promise<TaskDone>();
        self->state.running.push_back(task_label(t.task));
        self->request(worker, caf::infinite, t)
            .then(
                [=](TaskDone& d) mutable {
                  auto& st = self->state;
                  if (!st.running.empty()) st.running.pop_front();
                  ++st.tasks_done;
                  st.busy_us += d.duration_us;
                  // The hand-off of the outputs' handles: from the worker finishing to here.
                  const int64_t finished = d.begin_us + d.duration_us;
                  self->send(tracer, TraceEvent{track, fmt::format("ship {} outputs", d.outputs.size()), "transfer",
                                                finished, trace_now_us() - finished});
                  rp.deliver(std::move(d));
                },
                [=](caf::error& err) mutable {
                  if (!self->state.running.empty()) self->state.running.pop_front();
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
      [=](const Describe&) {
        const auto& st = self->state;
        std::string state = "idle";
        if (!st.running.empty())
          state = st.running.size() == 1 ? "running " + st.running.front()
                                         : fmt::format("running {} (+{} queued)", st.running.front(), st.running.size() - 1);
        ActorInfo i = describe_self(self, track, "section-replica", state,
                                    fmt::format(R"({{"tasks_done":{},"busy_s":{:.6f}}})", st.tasks_done, st.busy_us * 1e-6));
        i.section = identity.section;
        i.stage = identity.stage;
        i.replica = identity.replica;
        if (!identity.device.empty()) i.device = identity.device;
        return i;
      },
  };
}

}  // namespace

caf::actor spawn_section_replica(caf::actor_system& sys, caf::actor worker, std::string track, caf::actor tracer,
                                 ActorInfo identity) {
  return sys.spawn(section_replica, std::move(worker), std::move(track), std::move(tracer), std::move(identity));
}

}  // namespace maestro
