// Chrome trace writer: spans on device tracks as the Trace Event Format's
// complete events (ph "X", microseconds), with process and thread names, so
// that Perfetto and chrome://tracing open it. One process ("devices"), one
// thread (track) per device, named "device N".
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace maestro {

struct TraceSpan {
  std::string name;      // "vision F mb3 r0 s0"
  std::string category;  // "forward" | "backward" | "grad_sync" | "optimizer"
  int64_t device = 0;
  double start_s = 0, duration_s = 0;
  nlohmann::json args;  // shown on click (section, micro-batch, samples…); may be null
};

nlohmann::json chrome_trace(const std::vector<TraceSpan>& spans, int64_t devices);
void write_chrome_trace(std::ostream& out, const std::vector<TraceSpan>& spans, int64_t devices);

}  // namespace maestro
