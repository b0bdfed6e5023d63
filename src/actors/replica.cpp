// The section replica (see actors.h).
#include <fmt/format.h>

#include <deque>
#include <nlohmann/json.hpp>

#include "actors/actors.h"
#include "actors/describe.h"
#include "actors/peer_tensors.h"

namespace maestro {

namespace {

struct ReplicaState {
  const char* name = "section-replica";
  std::deque<std::string> running;  // tasks handed to the worker, oldest first
  int64_t tasks_done = 0, busy_us = 0;
  int64_t memory_bytes = 0;           // the ranks' runners after their last task, summed
  int64_t bytes_in = 0, bytes_out = 0;  // flow tensors received (task inputs) and produced (outputs)
  // Per tensor-parallel rank: what this replica handed that rank's worker
  // and it has not answered yet, oldest first — the rank's state in
  // `topology` (the worker, busy computing, is not asked).
  std::vector<std::deque<std::string>> rank_pending;
};

// Sends `msg` to every worker (tensor-parallel ranks: they run it together)
// and delivers combine(replies, error) once all have answered — replies in
// rank order; a lost worker is an error naming it. `label` is what each
// rank is doing until it answers.
template <class Reply, class Msg, class Combine>
caf::response_promise ask_all(caf::stateful_actor<ReplicaState>* self, const std::vector<caf::actor>& workers,
                              const Msg& msg, const std::string& track, const std::string& label, Combine combine) {
  auto rp = self->make_response_promise<Reply>();
  struct Pending {
    std::vector<Reply> replies;
    std::string lost;
    size_t left;
  };
  auto st = std::make_shared<Pending>(Pending{std::vector<Reply>(workers.size()), {}, workers.size()});
  auto& pending = self->state.rank_pending;
  pending.resize(workers.size());
  auto answered = [self](size_t r) {
    auto& q = self->state.rank_pending[r];
    if (!q.empty()) q.pop_front();
  };
  for (size_t r = 0; r < workers.size(); ++r) {
    pending[r].push_back(label);
    self->request(workers[r], caf::infinite, msg)
        .then(
            [=](Reply& reply) mutable {
              answered(r);
              st->replies[r] = std::move(reply);
              if (--st->left == 0) rp.deliver(combine(st->replies, st->lost));
            },
            [=](caf::error& err) mutable {
              answered(r);
              if (st->lost.empty())
                st->lost = fmt::format("{}: worker{} lost: {}", track,
                                       workers.size() > 1 ? fmt::format(" of tp rank {}", r) : "", caf::to_string(err));
              if (--st->left == 0) rp.deliver(combine(st->replies, st->lost));
            });
  }
  return rp;
}

// "idle", "running X" or "running X (+n queued)" for a queue of labels.
std::string queue_state(const std::deque<std::string>& q) {
  if (q.empty()) return "idle";
  return q.size() == 1 ? "running " + q.front() : fmt::format("running {} (+{} queued)", q.front(), q.size() - 1);
}

// The first error of the ranks' replies, else `lost`.
template <class Reply>
std::string first_error(const std::vector<Reply>& replies, const std::string& lost) {
  for (const Reply& r : replies)
    if (!r.error.empty()) return r.error;
  return lost;
}

std::string task_label(const Task& t) {
  return fmt::format("{} mb {}", t.kind == Task::Kind::Forward ? "forward" : "backward", t.micro_batch);
}

// A task whose inputs include tensors of other processes (placeholders,
// peer_tensors.h): each is allocated in this process's receive pools and
// fetched — its owner puts it there one-sided — then the task, now holding
// local tensors only, is delegated back to this replica, whose answer goes
// to the scheduler. A failed fetch answers the task with the error.
caf::response_promise fetch_inputs(caf::stateful_actor<ReplicaState>* self, PeerTensors* peers, RunTask t,
                                   const std::string& track) {
  auto rp = self->make_response_promise();
  auto task = std::make_shared<RunTask>(std::move(t));
  struct Pending {
    size_t left = 0;
    std::string error;
  };
  auto st = std::make_shared<Pending>();
  auto finish = [self, rp, task, st, track]() mutable {
    if (st->error.empty()) {
      rp.delegate(caf::actor_cast<caf::actor>(self), std::move(*task));
      return;
    }
    TaskDone d;
    d.step = task->step;
    d.task = task->task.id;
    d.error = fmt::format("{}: step {}: {}", track, task->step, st->error);
    rp.deliver(std::move(d));
  };
  for (size_t i = 0; i < task->inputs.size(); ++i) {
    FlowTensor& in = task->inputs[i];
    if (!is_remote_placeholder(in.tensor)) continue;
    const auto [server, name] = peers->server_of(in.tensor.buffer->owner);
    const std::string what = fmt::format("fetching flow {} sample {} ({} bytes) from {}", in.flow, in.sample,
                                         in.tensor.bytes(), name.empty() ? "an unknown process" : name);
    TensorRef dst;
    try {
      if (!server) throw std::runtime_error("no tensor server for its owner");
      dst = peers->receive_buffer(in.tensor.shape, in.tensor.dtype);
    } catch (const std::exception& e) {
      if (st->error.empty()) st->error = fmt::format("{}: {}", what, e.what());
      continue;
    }
    if (dst.bytes() == 0) {  // nothing to move
      in.tensor = dst;
      continue;
    }
    ++st->left;
    const uint64_t key = in.tensor.buffer->offset;
    FetchTensor fetch{key, peers->transport().describe(dst), peers->announcement(dst)};
    self->request(server, std::chrono::seconds(60), std::move(fetch))
        .then(
            [=](std::string& error) mutable {
              if (error.empty())
                task->inputs[i].tensor = dst;
              else if (st->error.empty())
                st->error = fmt::format("{}: {}", what, error);
              if (--st->left == 0) finish();
            },
            [=](caf::error& e) mutable {
              if (st->error.empty()) st->error = fmt::format("{}: {}", what, caf::to_string(e));
              if (--st->left == 0) finish();
            });
  }
  if (st->left == 0) finish();
  return rp;
}

caf::behavior section_replica(caf::stateful_actor<ReplicaState>* self, std::vector<caf::actor> workers,
                              std::string track, caf::actor tracer, ActorInfo identity, int64_t memory_bytes) {
  self->state.memory_bytes = memory_bytes;
  // The workers die with their replica.
  for (const caf::actor& w : workers) self->link_to(w);
  return {
      [=](RunTask& t) -> caf::response_promise {
        if (PeerTensors* peers = peer_tensors(); peers && has_remote_inputs(t.inputs))
          return fetch_inputs(self, peers, std::move(t), track);
        // Rank 0's outputs (the ranks' are the same, gathered where split).
        self->state.running.push_back(task_label(t.task));
        for (const FlowTensor& in : t.inputs) self->state.bytes_in += int64_t(in.tensor.bytes());
        return ask_all<TaskDone>(self, workers, t, track, task_label(t.task), [=](std::vector<TaskDone>& done, const std::string& lost) {
          std::string error = first_error(done, lost);
          int64_t memory = 0;
          for (const TaskDone& r : done) memory += r.memory_bytes;
          TaskDone d = std::move(done[0]);
          auto& st = self->state;
          if (lost.empty()) {
            st.memory_bytes = memory;
            for (const FlowTensor& out : d.outputs) st.bytes_out += int64_t(out.tensor.bytes());
          }
          if (!st.running.empty()) st.running.pop_front();
          if (lost.empty()) ++st.tasks_done, st.busy_us += d.duration_us;
          d.step = t.step;
          d.task = t.task.id;
          d.error = std::move(error);
          if (d.error.empty()) {
            // The hand-off of the outputs' handles: from the worker finishing to here.
            const int64_t finished = d.begin_us + d.duration_us;
            caf::anon_send(tracer, TraceEvent{track, fmt::format("ship {} outputs", d.outputs.size()), "transfer",
                                          finished, trace_now_us() - finished});
          }
          return d;
        });
      },
      [=](const ReduceGrads& g) {
        // Every task of the step is done, so every fetch of its tensors: the exports go.
        if (PeerTensors* peers = peer_tensors()) peers->forget_exports();
        // The squared gradient norm: the sum of the ranks' shares (SectionModel::grad_sq_norm).
        return ask_all<GradsReduced>(self, workers, g, track, "reduce gradients", [](std::vector<GradsReduced>& r, const std::string& lost) {
          std::string error = first_error(r, lost);
          GradsReduced out = std::move(r[0]);
          for (size_t k = 1; k < r.size(); ++k) out.grad_sq_norm += r[k].grad_sq_norm;
          out.error = std::move(error);
          return out;
        });
      },
      [=](const ApplyGrads& a) {
        return ask_all<Applied>(self, workers, a, track, "optimizer step", [](std::vector<Applied>& r, const std::string& lost) {
          std::string error = first_error(r, lost);
          Applied out = std::move(r[0]);
          out.error = std::move(error);
          return out;
        });
      },
      [=](const SaveSection& s) {  // collective: rank 0 writes the gathered tensors
        return ask_all<Saved>(self, workers, s, track, "save", [](std::vector<Saved>& r, const std::string& lost) {
          std::string error = first_error(r, lost);
          Saved out = std::move(r[0]);
          out.error = std::move(error);
          return out;
        });
      },
      [=](const Describe&) {
        const auto& st = self->state;
        // Each tp rank's worker as this replica sees it: its actor id, what
        // it was handed and has not answered (running, then queued).
        nlohmann::json ranks = nlohmann::json::array();
        for (size_t r = 0; r < workers.size(); ++r) {
          const std::deque<std::string> none;
          const auto& q = r < st.rank_pending.size() ? st.rank_pending[r] : none;
          ranks.push_back({{"rank", r}, {"actor", workers[r].id()}, {"state", queue_state(q)},
                           {"queued", q.empty() ? 0 : q.size() - 1}});
        }
        const nlohmann::json detail = {{"tasks_done", st.tasks_done}, {"busy_s", double(st.busy_us) / 1e6},
                                       {"memory_bytes", st.memory_bytes}, {"bytes_in", st.bytes_in},
                                       {"bytes_out", st.bytes_out}, {"tp_ranks", workers.size()}, {"ranks", ranks}};
        ActorInfo i = describe_self(self, track, "section-replica", queue_state(st.running), detail.dump());
        i.section = identity.section;
        i.stage = identity.stage;
        i.replica = identity.replica;
        if (!identity.device.empty()) i.device = identity.device;
        return i;
      },
  };
}

}  // namespace

caf::actor spawn_section_replica(caf::actor_system& sys, std::vector<caf::actor> workers, std::string track,
                                 caf::actor tracer, ActorInfo identity, int64_t memory_bytes) {
  return sys.spawn(section_replica, std::move(workers), std::move(track), std::move(tracer), std::move(identity),
                   memory_bytes);
}

}  // namespace maestro
