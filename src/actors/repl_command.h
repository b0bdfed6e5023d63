// The debug REPL's command language, free of CAF so it can be unit- and
// fuzz-tested alone: one line in, one ReplCommand (or an error naming what
// is wrong) out. The repl actor (repl.cpp) executes commands; the front ends
// (src/cli/repl_*) read lines and complete names with repl_command_names().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace maestro {

// Longer lines are refused whole (never parsed in part).
constexpr size_t kReplMaxLine = 4096;

struct ReplCommand {
  enum class Kind {
    Empty,  // blank line or a comment ("# ...")
    Help, Topology, Sections, Plan, Graph, Wave, Stats, Actor,
    Pause, Resume, Step, Checkpoint, Detach, Quit, TraceStart, TraceStop, LogLevel,
  };
  Kind kind = Kind::Empty;
  bool json = false;   // `--json` anywhere after the command
  std::string arg;     // help CMD, stats SECTION, actor NAME, trace start FILE, loglevel LEVEL
  int64_t count = 0;   // step N
};

struct ReplParse {
  bool ok = false;
  ReplCommand command;
  std::string error;  // when !ok: what is wrong, naming the word
};

ReplParse parse_repl_command(std::string_view line);

// Every command's name, in help order.
const std::vector<std::string>& repl_command_names();
// `help` (empty cmd): one line per command; `help CMD`: its usage and what
// it does. An unknown name gets "" (the caller says so).
std::string repl_help(std::string_view cmd);

}  // namespace maestro
