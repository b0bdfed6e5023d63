// Chrome trace events of a run (the JSON that Perfetto and chrome://tracing
// open): one track per actor or compute worker, tasks and transfers as
// complete ("X") slices. The tracer actor collects TraceEvents; this file
// holds the plain data and the writer, so nothing here depends on CAF.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace maestro {

struct TraceEvent {
  std::string track;     // "replica llm/0 worker", "scheduler", ...
  std::string name;      // "forward mb 3", "grad sync", ...
  std::string category;  // "task" | "transfer" | "sync" | "step" | "checkpoint"
  int64_t begin_us = 0;  // since the run's start
  int64_t duration_us = 0;
};

// Microseconds since a fixed process-wide origin (the first call).
int64_t trace_now_us();

// Writes {"traceEvents":[...]} with one thread (tid) per track, named by
// "thread_name" metadata events. Throws std::runtime_error when it can't.
void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events);

}  // namespace maestro
