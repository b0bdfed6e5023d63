// The data loader, checkpointer and tracer actors (see actors.h).
#include <fmt/format.h>

#include <map>

#include "actors/actors.h"
#include "actors/checkpoint.h"

namespace maestro {

namespace {

// ------------------------------------------------------------- data loader
struct LoaderState {
  std::map<int64_t, std::shared_ptr<const StepData>> ready;  // prefetched steps
  std::string error;                                         // first failure, reported on request
};

// A self-message: materialise this step now (prefetch).
struct Prefetch {
  int64_t step = 0;
};

}  // namespace
}  // namespace maestro

// In-process only: the loader sends it to itself (a type in an anonymous
// namespace of this file; no other actor can name it).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(maestro::Prefetch)

namespace maestro {
namespace {

caf::behavior data_loader(caf::stateful_actor<LoaderState>* self, StepDataSource source, int64_t last_step,
                          caf::actor tracer) {
  auto materialise = [self, source, tracer](int64_t step) {
    if (self->state.ready.count(step) || !self->state.error.empty()) return;
    const int64_t begin = trace_now_us();
    try {
      self->state.ready[step] = source(step);
    } catch (const std::exception& e) {
      self->state.error = fmt::format("data for step {}: {}", step, e.what());
    }
    self->send(tracer, TraceEvent{"data loader", fmt::format("load step {}", step), "data", begin,
                                  trace_now_us() - begin});
  };
  return {
      [=](const GetBatch& g) -> BatchReady {
        materialise(g.step);
        BatchReady out;
        if (auto it = self->state.ready.find(g.step); it != self->state.ready.end()) {
          out.data = it->second;
          self->state.ready.erase(it);
        } else {
          out.error = self->state.error;
        }
        if (g.step + 1 < last_step) self->send(self, Prefetch{g.step + 1});
        return out;
      },
      [=](const Prefetch& p) { materialise(p.step); },
  };
}

// ------------------------------------------------------------ checkpointer
struct CheckpointerState {
  std::unique_ptr<CheckpointWriter> writer;
  CheckpointState pending;
  size_t saved = 0;
  std::string error;
  caf::response_promise reply;
  int64_t begin_us = 0;
};

caf::behavior checkpointer(caf::stateful_actor<CheckpointerState>* self, CheckpointerConfig cfg, caf::actor tracer) {
  return {
      [=](const WriteCheckpoint& w) {
        auto& st = self->state;
        st.reply = self->make_response_promise();
        st.begin_us = trace_now_us();
        st.saved = 0;
        st.error.clear();
        st.pending = CheckpointState{w.steps_done, w.samples, cfg.seed, cfg.data_seed, cfg.global_batch,
                                     cfg.schedule,  cfg.names,  w.losses};
        auto finish = [self, tracer] {
          auto& st = self->state;
          CheckpointWritten out;
          if (st.error.empty()) {
            try {
              out.dir = st.writer->commit(st.pending);
            } catch (const std::exception& e) {
              out.error = e.what();
            }
          }
          if (!st.error.empty()) out.error = st.error;
          st.writer.reset();  // removes the temporary folder unless committed
          self->send(tracer, TraceEvent{"checkpointer", fmt::format("checkpoint step {}", st.pending.step),
                                        "checkpoint", st.begin_us, trace_now_us() - st.begin_us});
          st.reply.deliver(out);
        };
        try {
          st.writer = std::make_unique<CheckpointWriter>(cfg.root, w.steps_done, cfg.keep);
        } catch (const std::exception& e) {
          st.error = e.what();
          finish();
          return st.reply;
        }
        for (size_t i = 0; i < cfg.replica0.size(); ++i) {
          self->request(cfg.replica0[i], caf::infinite, SaveSection{st.writer->section_path(cfg.names[i])})
              .then(
                  [=](const Saved& s) {
                    auto& st = self->state;
                    if (!s.error.empty() && st.error.empty()) st.error = s.error;
                    if (++st.saved == cfg.replica0.size()) finish();
                  },
                  [=](caf::error& err) {
                    auto& st = self->state;
                    if (st.error.empty()) st.error = fmt::format("section '{}' did not save: {}", cfg.names[i],
                                                                 caf::to_string(err));
                    if (++st.saved == cfg.replica0.size()) finish();
                  });
        }
        if (cfg.replica0.empty()) finish();
        return st.reply;
      },
  };
}

// ------------------------------------------------------------------ tracer
struct TracerState {
  std::vector<TraceEvent> events;
};

caf::behavior tracer(caf::stateful_actor<TracerState>* self, bool keep_events) {
  return {
      [=](const TraceEvent& e) {
        if (keep_events) self->state.events.push_back(e);
      },
      [=](const FlushTrace& f) -> std::string {
        try {
          write_chrome_trace(f.path, self->state.events);
        } catch (const std::exception& e) {
          return e.what();
        }
        return {};
      },
  };
}

}  // namespace

caf::actor spawn_data_loader(caf::actor_system& sys, StepDataSource source, int64_t last_step, caf::actor tracer) {
  return sys.spawn<caf::detached>(data_loader, std::move(source), last_step, std::move(tracer));
}

caf::actor spawn_checkpointer(caf::actor_system& sys, CheckpointerConfig config, caf::actor tracer) {
  return sys.spawn<caf::detached>(checkpointer, std::move(config), std::move(tracer));
}

caf::actor spawn_tracer(caf::actor_system& sys, bool keep_events) { return sys.spawn(tracer, keep_events); }

}  // namespace maestro
