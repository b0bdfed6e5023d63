// Chrome trace writer (nlohmann-json) and the trace clock.
#include "actors/trace.h"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace maestro {

int64_t trace_now_us() {
  static const auto origin = std::chrono::steady_clock::now();
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - origin)
      .count();
}

void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events) {
  std::map<std::string, int> tid_of_track;
  for (const TraceEvent& e : events) tid_of_track.emplace(e.track, 0);
  int next = 1;
  for (auto& [track, tid] : tid_of_track) tid = next++;

  nlohmann::json out = nlohmann::json::array();
  out.push_back({{"ph", "M"}, {"pid", 1}, {"tid", 0}, {"name", "process_name"}, {"args", {{"name", "maestro-run"}}}});
  for (const auto& [track, tid] : tid_of_track)
    out.push_back({{"ph", "M"}, {"pid", 1}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", track}}}});
  for (const TraceEvent& e : events)
    out.push_back({{"ph", "X"},
                   {"pid", 1},
                   {"tid", tid_of_track[e.track]},
                   {"name", e.name},
                   {"cat", e.category},
                   {"ts", e.begin_us},
                   {"dur", e.duration_us}});
  std::ofstream f(path);
  if (!f) throw std::runtime_error(fmt::format("cannot write the trace file '{}'", path));
  f << nlohmann::json{{"traceEvents", out}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  if (!f) throw std::runtime_error(fmt::format("cannot write the trace file '{}'", path));
}

}  // namespace maestro
