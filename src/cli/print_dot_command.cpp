// `--print dot`: the section graph as a Graphviz digraph. Sections are boxes
// labelled with their model and parameter count; frozen sections are grey
// and dashed; logits flows are dashed edges.
#include <fmt/format.h>

#include <cstdio>

#include "cli/command.h"
#include "cli/describe.h"
#include "graph/section_graph.h"

namespace maestro {

namespace {

// A DOT double-quoted string (section names are identifiers; model summaries
// hold no quotes, but escape anyway).
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

int print_dot_command(const Program& program, const RuntimeConfig&, const CliOptions&) {
  const SectionGraph graph = build_graph(program);
  std::string out = "digraph maestro {\n  rankdir=LR;\n  node [shape=box, style=\"rounded\", fontname=\"Helvetica\"];\n";
  for (int n : graph.topo_order) {
    const Section& s = graph.section(n);
    std::string label = s.name + "\\n" + model_summary(s.model) + "\\n" + format_count(graph.nodes[n].params) + " params";
    if (!s.loss.empty()) label += "\\nloss: " + loss_summary(s.loss);
    const std::string style =
        s.mode == Mode::Frozen ? ", style=\"rounded,dashed,filled\", fillcolor=\"#e0e0e0\"" : "";
    out += fmt::format("  {} [label=\"{}\"{}];\n", quoted(s.name), label, style);
  }
  for (const GraphEdge& e : graph.edges) {
    const std::string attrs = e.kind == FlowKind::Logits ? " [style=dashed, label=\"logits\"]" : "";
    out += fmt::format("  {} -> {}{};\n", quoted(graph.nodes[e.from].name), quoted(graph.nodes[e.to].name), attrs);
  }
  out += "}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

CommandRegistration reg("print-dot", &print_dot_command);

}  // namespace

}  // namespace maestro
