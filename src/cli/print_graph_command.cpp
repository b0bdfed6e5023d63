// `--print graph`: the section graph as an aligned table (one row per
// section in topological order: model and key dimensions, mode, parameters,
// inputs, activity condition, parallel plan, micro-batch, loss), then the flows.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>

#include "cli/command.h"
#include "cli/describe.h"
#include "graph/section_graph.h"

namespace maestro {

namespace {

constexpr size_t kColumns = 9;
using Row = std::array<std::string, kColumns>;

int print_graph_command(const Program& program, const RuntimeConfig&, const CliOptions&) {
  const SectionGraph graph = build_graph(program);
  std::vector<Row> rows = {
      {"section", "model", "mode", "params", "consumes", "when", "parallel", "micro_batch", "loss"}};
  for (int n : graph.topo_order) {
    const Section& s = graph.section(n);
    rows.push_back({s.name, model_summary(s.model), s.mode == Mode::Train ? "train" : "frozen",
                    format_count(graph.nodes[n].params), consumes_summary(s.consumes), s.when.str(),
                    parallel_summary(s.parallel), s.micro_batch ? fmt::format("{}", *s.micro_batch) : "auto",
                    loss_summary(s.loss) + recompute_label(s)});
  }
  std::array<size_t, kColumns> width{};
  for (const Row& row : rows)
    for (size_t c = 0; c < kColumns; ++c) width[c] = std::max(width[c], row[c].size());

  std::string out;
  for (const Row& row : rows) {
    std::string line;
    for (size_t c = 0; c < kColumns; ++c)
      line += c + 1 < kColumns ? fmt::format("{:<{}}  ", row[c], width[c]) : row[c];
    out += line + "\n";
  }
  out += fmt::format("\n{} sections, {} parameters\n", graph.nodes.size(), format_count(graph.total_params()));
  if (program.train.optimizer.shard)
    out += "optimizer: adamw, sharded (ZeRO-1: each train section's dp replicas keep 1/dp of its state)\n";
  out += fmt::format("\nflows ({}):\n", graph.edges.size());
  for (const GraphEdge& e : graph.edges)
    out += fmt::format("  {} -> {} : {}\n", graph.nodes[e.from].name, graph.nodes[e.to].name,
                       e.kind == FlowKind::Activations ? "activations" : "logits");
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

CommandRegistration reg("print-graph", &print_graph_command);

}  // namespace

}  // namespace maestro
