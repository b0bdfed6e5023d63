// `maestro-run MODEL.sect --check`: the program parsed and validated (main.cpp
// did that); print a one-line summary with the parameter counts and, with
// --json, the check summary of runtime-config.md as the last stdout line.
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/describe.h"
#include "graph/section_graph.h"

namespace maestro {

namespace {

int check_command(const Program& program, const RuntimeConfig& config, const CliOptions& cli) {
  const SectionGraph graph = build_graph(program);
  const int64_t total = graph.total_params();
  std::string per_section;
  for (const SectionNode& node : graph.nodes)
    per_section += fmt::format("{}{} {}", per_section.empty() ? "" : ", ", node.name,
                               format_count_in_unit_of(node.params, total));
  const auto plural = [](size_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); };
  std::string out = fmt::format("ok: {} — {}, {}, {} parameters ({})\n", cli.model_path,
                                plural(graph.nodes.size(), "section"), plural(graph.edges.size(), "flow"),
                                format_count(total), per_section);
  if (cli.json) {
    nlohmann::ordered_json summary;
    summary["mode"] = "check";
    summary["sections"] = graph.nodes.size();
    summary["flows"] = graph.edges.size();
    summary["params"] = nlohmann::ordered_json::object();
    for (const SectionNode& node : graph.nodes) summary["params"][node.name] = node.params;
    summary["total_params"] = total;
    summary["backend"] = detected_backend(config);
    out += summary.dump() + "\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

CommandRegistration reg("check", &check_command);

}  // namespace

}  // namespace maestro
