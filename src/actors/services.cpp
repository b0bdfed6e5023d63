// The data loader, checkpointer and tracer actors (see actors.h).
#include <fmt/format.h>

#include <memory>
#include <utility>
#include <nlohmann/json.hpp>

#include "actors/actors.h"
#include "actors/checkpoint.h"
#include "actors/describe.h"
#include "data/data_error.h"
#include "data/prefetcher.h"

namespace maestro {

namespace {

// ------------------------------------------------------------- data loader
// The steps are made (sample contents decoded) by a Prefetcher's threads,
// ahead of use in step order, at most kLoaderDepth steps past the one taken;
// the actor hands them out and records on the trace how long it waited.
constexpr int kLoaderDepth = 2;

struct LoaderState {
  std::unique_ptr<Prefetcher<std::shared_ptr<const StepData>>> prefetcher;
  std::string error;  // first failure, reported on request
  bool bad_input = false;  // that failure is bad data (DataError)
  int64_t handed = 0;      // steps handed out
};

caf::behavior data_loader(caf::stateful_actor<LoaderState>* self, StepDataSource source, int64_t last_step,
                          caf::actor tracer, int threads) {
  self->state.prefetcher = std::make_unique<Prefetcher<std::shared_ptr<const StepData>>>(
      [source, tracer](int64_t step, int thread) {
        const int64_t begin = trace_now_us();
        auto d = source(step);
        std::string track = thread < 0 ? std::string("data loader") : fmt::format("data loader thread {}", thread);
        caf::anon_send(tracer, TraceEvent{std::move(track), fmt::format("load step {}", step), "data", begin,
                                          trace_now_us() - begin});
        return d;
      },
      last_step, threads, kLoaderDepth);
  return {
      [=](const GetBatch& g) -> BatchReady {
        BatchReady out;
        if (!self->state.error.empty()) {
          out.error = self->state.error;
          out.bad_input = self->state.bad_input;
          return out;
        }
        const int64_t begin = trace_now_us();
        try {
          out.data = self->state.prefetcher->get(g.step);
        } catch (const DataError& e) {  // bad input found while decoding (manifest:line and the file named)
          out.error = self->state.error = fmt::format("data for step {}: {}", g.step, e.what());
          out.bad_input = self->state.bad_input = true;
        } catch (const std::exception& e) {
          out.error = self->state.error = fmt::format("data for step {}: {}", g.step, e.what());
        }
        self->send(tracer, TraceEvent{"data loader", fmt::format("wait for step {}", g.step), "data", begin,
                                      trace_now_us() - begin});
        ++self->state.handed;
        return out;
      },
      [=](const Describe&) {
        const auto& st = self->state;
        return describe_self(self, "data loader", "loader", st.error.empty() ? "idle" : "failed: " + st.error,
                             fmt::format(R"({{"steps_handed":{},"threads":{}}})", st.handed, threads));
      },
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
  int64_t written = 0;
  std::string last;  // last folder committed
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
              out.dir = st.last = st.writer->commit(st.pending);
              ++st.written;
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
        const size_t saves = cfg.replica0.size() + cfg.gatherers.size();
        for (size_t i = 0; i < saves; ++i) {
          const bool writes = i < cfg.replica0.size();
          const std::string name = writes ? cfg.names[i] : "a gatherer";
          self->request(writes ? cfg.replica0[i] : cfg.gatherers[i - cfg.replica0.size()], caf::infinite,
                        SaveSection{writes ? st.writer->section_path(name) : ""})
              .then(
                  [=](const Saved& s) {
                    auto& st = self->state;
                    if (!s.error.empty() && st.error.empty()) st.error = s.error;
                    if (++st.saved == saves) finish();
                  },
                  [=](caf::error& err) {
                    auto& st = self->state;
                    if (st.error.empty()) st.error = fmt::format("section '{}' did not save: {}", name,
                                                                 caf::to_string(err));
                    if (++st.saved == saves) finish();
                  });
        }
        if (cfg.replica0.empty()) finish();
        return st.reply;
      },
      [=](const Describe&) {
        const auto& st = self->state;
        return describe_self(self, "checkpointer", "checkpointer",
                             st.writer ? fmt::format("writing step {}", st.pending.step) : "idle",
                             nlohmann::json{{"root", cfg.root}, {"written", st.written}, {"last", st.last}}.dump());
      },
  };
}

// ------------------------------------------------------------------ tracer
struct TracerState {
  std::vector<TraceEvent> events;
  int64_t received = 0;
  std::string recording;                  // the REPL's `trace start FILE`, "" = none
  std::vector<TraceEvent> recorded;       // its events
};

caf::behavior tracer(caf::stateful_actor<TracerState>* self, bool keep_events) {
  return {
      [=](const TraceEvent& e) {
        ++self->state.received;
        if (keep_events) self->state.events.push_back(e);
        if (!self->state.recording.empty()) self->state.recorded.push_back(e);
      },
      [=](const RecordTrace& r) -> std::string {
        auto& st = self->state;
        if (r.start) {
          if (!st.recording.empty()) return "error: trace: already recording into " + st.recording;
          st.recording = r.path;
          st.recorded.clear();
          return "recording the trace into " + r.path;
        }
        if (st.recording.empty()) return "error: trace: not recording (trace start FILE)";
        const std::string path = std::exchange(st.recording, "");
        try {
          write_chrome_trace(path, st.recorded);
        } catch (const std::exception& e) {
          return std::string("error: trace: ") + e.what();
        }
        const size_t n = st.recorded.size();
        st.recorded.clear();
        return fmt::format("wrote {} events to {}", n, path);
      },
      [=](const Describe&) {
        const auto& st = self->state;
        return describe_self(self, "tracer", "tracer",
                             !st.recording.empty() ? "recording into " + st.recording : keep_events ? "recording" : "counting",
                             fmt::format(R"({{"events":{},"kept":{}}})", st.received, st.events.size()));
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

caf::actor spawn_data_loader(caf::actor_system& sys, StepDataSource source, int64_t last_step, caf::actor tracer,
                             int threads) {
  return sys.spawn<caf::detached>(data_loader, std::move(source), last_step, std::move(tracer), threads);
}

caf::actor spawn_checkpointer(caf::actor_system& sys, CheckpointerConfig config, caf::actor tracer) {
  return sys.spawn<caf::detached>(checkpointer, std::move(config), std::move(tracer));
}

caf::actor spawn_tracer(caf::actor_system& sys, bool keep_events) { return sys.spawn(tracer, keep_events); }

}  // namespace maestro
