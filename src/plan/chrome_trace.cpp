// Chrome trace writer (see chrome_trace.h). Trace Event Format: metadata
// events name the process and each device's thread; spans are complete
// events with microsecond timestamps.
#include "plan/chrome_trace.h"

namespace maestro {

nlohmann::json chrome_trace(const std::vector<TraceSpan>& spans, int64_t devices) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"tid", 0}, {"args", {{"name", "devices"}}}});
  for (int64_t d = 0; d < devices; ++d) {
    events.push_back(
        {{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", d}, {"args", {{"name", "device " + std::to_string(d)}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", 0}, {"tid", d}, {"args", {{"sort_index", d}}}});
  }
  for (const TraceSpan& s : spans) {
    nlohmann::json e{{"ph", "X"},           {"name", s.name}, {"cat", s.category},
                     {"ts", s.start_s * 1e6}, {"dur", s.duration_s * 1e6}, {"pid", 0},
                     {"tid", s.device}};
    if (!s.args.is_null()) e["args"] = s.args;
    events.push_back(std::move(e));
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

void write_chrome_trace(std::ostream& out, const std::vector<TraceSpan>& spans, int64_t devices) {
  out << chrome_trace(spans, devices).dump() << '\n';
}

}  // namespace maestro
