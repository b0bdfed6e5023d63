// The Chrome trace writer: valid JSON, one named thread per track, complete
// ("X") slices with their category, times in microseconds.
#include <boost/test/unit_test.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "actors/trace.h"

using namespace maestro;

BOOST_AUTO_TEST_CASE(chrome_trace_has_a_track_per_actor) {
  const std::string path = (std::filesystem::temp_directory_path() / ("maestro-trace-" + std::to_string(::getpid()) + ".json")).string();
  const int64_t t0 = trace_now_us();
  BOOST_TEST(trace_now_us() >= t0);
  write_chrome_trace(path, {{"llm/0 worker", "forward mb 0", "task", 10, 5},
                            {"scheduler", "step 0", "step", 0, 30},
                            {"llm/0 worker", "backward mb 0", "task", 16, 9}});
  nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
  std::map<int, std::string> names;
  int slices = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "X") {
      ++slices;
      BOOST_TEST(e.contains("cat"));
      if (e["name"] == "backward mb 0") {
        BOOST_TEST(names[e["tid"]] == "llm/0 worker");
        BOOST_TEST(e["ts"] == 16);
        BOOST_TEST(e["dur"] == 9);
      }
    }
  }
  BOOST_TEST(names.size() == 2u);
  BOOST_TEST(slices == 3);
  std::filesystem::remove(path);
  BOOST_CHECK_THROW(write_chrome_trace("/nonexistent/dir/t.json", {}), std::runtime_error);
}
