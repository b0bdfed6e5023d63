// The section replica (see actors.h).
#include <fmt/format.h>

#include "actors/actors.h"

namespace maestro {

namespace {

struct ReplicaState {
  const char* name = "section-replica";
};

// Sends `msg` to every worker (tensor-parallel ranks: they run it together)
// and delivers combine(replies, error) once all have answered — replies in
// rank order; a lost worker is an error naming it.
template <class Reply, class Msg, class Combine>
caf::response_promise ask_all(caf::stateful_actor<ReplicaState>* self, const std::vector<caf::actor>& workers,
                              const Msg& msg, const std::string& track, Combine combine) {
  auto rp = self->make_response_promise<Reply>();
  struct Pending {
    std::vector<Reply> replies;
    std::string lost;
    size_t left;
  };
  auto st = std::make_shared<Pending>(Pending{std::vector<Reply>(workers.size()), {}, workers.size()});
  for (size_t r = 0; r < workers.size(); ++r)
    self->request(workers[r], caf::infinite, msg)
        .then(
            [=](Reply& reply) mutable {
              st->replies[r] = std::move(reply);
              if (--st->left == 0) rp.deliver(combine(st->replies, st->lost));
            },
            [=](caf::error& err) mutable {
              if (st->lost.empty())
                st->lost = fmt::format("{}: worker{} lost: {}", track,
                                       workers.size() > 1 ? fmt::format(" of tp rank {}", r) : "", caf::to_string(err));
              if (--st->left == 0) rp.deliver(combine(st->replies, st->lost));
            });
  return rp;
}

// The first error of the ranks' replies, else `lost`.
template <class Reply>
std::string first_error(const std::vector<Reply>& replies, const std::string& lost) {
  for (const Reply& r : replies)
    if (!r.error.empty()) return r.error;
  return lost;
}

caf::behavior section_replica(caf::stateful_actor<ReplicaState>* self, std::vector<caf::actor> workers,
                              std::string track, caf::actor tracer) {
  // The workers die with their replica.
  for (const caf::actor& w : workers) self->link_to(w);
  return {
      [=](const RunTask& t) {
        // Rank 0's outputs (the ranks' are the same, gathered where split).
        return ask_all<TaskDone>(self, workers, t, track, [=](std::vector<TaskDone>& done, const std::string& lost) {
          std::string error = first_error(done, lost);
          TaskDone d = std::move(done[0]);
          d.step = t.step;
          d.task = t.task.id;
          d.error = std::move(error);
          if (d.error.empty()) {
            // The hand-off of the outputs' handles: from the worker finishing to here.
            const int64_t finished = d.begin_us + d.duration_us;
            self->send(tracer, TraceEvent{track, fmt::format("ship {} outputs", d.outputs.size()), "transfer",
                                          finished, trace_now_us() - finished});
          }
          return d;
        });
      },
      [=](const ReduceGrads& g) {
        // The squared gradient norm: the sum of the ranks' shares (SectionModel::grad_sq_norm).
        return ask_all<GradsReduced>(self, workers, g, track, [](std::vector<GradsReduced>& r, const std::string& lost) {
          std::string error = first_error(r, lost);
          GradsReduced out = std::move(r[0]);
          for (size_t k = 1; k < r.size(); ++k) out.grad_sq_norm += r[k].grad_sq_norm;
          out.error = std::move(error);
          return out;
        });
      },
      [=](const ApplyGrads& a) {
        return ask_all<Applied>(self, workers, a, track, [](std::vector<Applied>& r, const std::string& lost) {
          std::string error = first_error(r, lost);
          Applied out = std::move(r[0]);
          out.error = std::move(error);
          return out;
        });
      },
      [=](const SaveSection& s) {  // collective: rank 0 writes the gathered tensors
        return ask_all<Saved>(self, workers, s, track, [](std::vector<Saved>& r, const std::string& lost) {
          std::string error = first_error(r, lost);
          Saved out = std::move(r[0]);
          out.error = std::move(error);
          return out;
        });
      },
  };
}

}  // namespace

caf::actor spawn_section_replica(caf::actor_system& sys, std::vector<caf::actor> workers, std::string track,
                                 caf::actor tracer) {
  return sys.spawn(section_replica, std::move(workers), std::move(track), std::move(tracer));
}

}  // namespace maestro
