// The debug REPL's command parser (repl_command.h).
#include "actors/repl_command.h"

#include <charconv>

#include "log/log.h"

namespace maestro {

namespace {

struct CommandInfo {
  const char* name;
  ReplCommand::Kind kind;
  int min_args, max_args;  // words after the name, --json not counted
  const char* usage;
  const char* what;
};

const CommandInfo kCommands[] = {
    {"help", ReplCommand::Kind::Help, 0, 1, "help [CMD]", "list the commands, or say what CMD does"},
    {"topology", ReplCommand::Kind::Topology, 0, 0, "topology [--json]",
     "every actor of the run (scheduler, loader, checkpointer, tracer, each section replica / pp stage) with its "
     "process, host, device, mailbox depth and state; each actor answers for itself"},
    {"sections", ReplCommand::Kind::Sections, 0, 0, "sections [--json]",
     "the sections: mode, tp, pp, dp, micro-batch, devices"},
    {"plan", ReplCommand::Kind::Plan, 0, 0, "plan [--json]", "the run's resource plan, one line per section"},
    {"graph", ReplCommand::Kind::Graph, 0, 0, "graph [--json]", "the section graph as text: sections and flows"},
    {"wave", ReplCommand::Kind::Wave, 0, 0, "wave [--json]",
     "the current step's frontier per section: tasks done, in flight, waiting"},
    {"stats", ReplCommand::Kind::Stats, 0, 1, "stats [SECTION] [--json]",
     "steps done, last loss, samples/s; per section: tasks run and compute busy time"},
    {"actor", ReplCommand::Kind::Actor, 1, 4, "actor NAME [--json]",
     "one actor in detail (NAME as topology shows it, spaces included)"},
    {"trace", ReplCommand::Kind::TraceStart, 1, 2, "trace start FILE | trace stop",
     "record a Chrome trace of the run from now into FILE; stop writes it"},
    {"loglevel", ReplCommand::Kind::LogLevel, 0, 1, "loglevel [LEVEL]",
     "show the run's log level, or set it: error, warn, info (checkpoints, steering), debug (every step), trace "
     "(every task); log lines go to the run's stderr"},
    {"pause", ReplCommand::Kind::Pause, 0, 0, "pause", "pause at the next step boundary"},
    {"resume", ReplCommand::Kind::Resume, 0, 0, "resume", "continue a paused run"},
    {"step", ReplCommand::Kind::Step, 1, 1, "step N", "run N more steps, then pause at that step boundary"},
    {"checkpoint", ReplCommand::Kind::Checkpoint, 0, 0, "checkpoint",
     "write a checkpoint of the completed steps now (at the next step boundary if a step is running)"},
    {"detach", ReplCommand::Kind::Detach, 0, 0, "detach", "leave the REPL; the run goes on"},
    {"quit", ReplCommand::Kind::Quit, 0, 0, "quit", "stop the run cleanly after a checkpoint (exit 0)"},
};

const CommandInfo* find(std::string_view name) {
  for (const CommandInfo& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// A word for an error message: printable ASCII only, cut short.
std::string shown(std::string_view w) {
  std::string s;
  for (char c : w.substr(0, 40)) s += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (w.size() > 40) s += "...";
  return s;
}

ReplParse fail(std::string message) {
  ReplParse p;
  p.error = std::move(message);
  return p;
}

}  // namespace

ReplParse parse_repl_command(std::string_view line) {
  if (line.size() > kReplMaxLine)
    return fail("line too long (" + std::to_string(line.size()) + " bytes; at most " + std::to_string(kReplMaxLine) + ")");
  std::vector<std::string_view> words;
  for (size_t i = 0; i < line.size();) {
    if (is_space(line[i])) {
      ++i;
      continue;
    }
    const unsigned char c = static_cast<unsigned char>(line[i]);
    if (c < 0x20 || c >= 0x7f) return fail("byte " + std::to_string(int(c)) + " at column " + std::to_string(i + 1) + " is not printable ASCII");
    if (line[i] == '#' && words.empty()) break;  // comment
    size_t j = i;
    while (j < line.size() && !is_space(line[j])) ++j;
    words.push_back(line.substr(i, j - i));
    i = j;
  }
  for (std::string_view w : words)
    for (size_t k = 0; k < w.size(); ++k) {
      const unsigned char c = static_cast<unsigned char>(w[k]);
      if (c < 0x20 || c >= 0x7f) return fail("'" + shown(w) + "' holds a byte that is not printable ASCII");
    }
  ReplParse p;
  if (words.empty()) {
    p.ok = true;
    return p;
  }
  const CommandInfo* info = find(words[0]);
  if (!info) return fail("unknown command '" + shown(words[0]) + "' (try help)");
  p.command.kind = info->kind;
  std::vector<std::string_view> args;
  for (size_t k = 1; k < words.size(); ++k) {
    if (words[k] == "--json") p.command.json = true;
    else if (words[k].starts_with("--")) return fail(std::string(info->name) + ": unknown option '" + shown(words[k]) + "'");
    else args.push_back(words[k]);
  }
  if (int(args.size()) < info->min_args || int(args.size()) > info->max_args)
    return fail(std::string(info->name) + ": usage: " + info->usage);
  for (size_t k = 0; k < args.size(); ++k) p.command.arg += (k ? " " : "") + std::string(args[k]);  // one space between words
  if (info->kind == ReplCommand::Kind::Help && !args.empty() && !find(args[0]))
    return fail("help: unknown command '" + shown(args[0]) + "'");
  if (info->kind == ReplCommand::Kind::TraceStart) {
    if (args[0] == "stop" && args.size() == 1) {
      p.command.kind = ReplCommand::Kind::TraceStop;
      p.command.arg.clear();
    } else if (args[0] == "start" && args.size() == 2) {
      p.command.arg = std::string(args[1]);
    } else {
      return fail(std::string("trace: usage: ") + info->usage);
    }
  }
  if (info->kind == ReplCommand::Kind::LogLevel && !args.empty() && !parse_log_level(args[0]))
    return fail("loglevel: LEVEL is one of " + std::string(log_level_names()) + ", not '" + shown(args[0]) + "'");
  if (info->kind == ReplCommand::Kind::Step) {
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(args[0].data(), args[0].data() + args[0].size(), n);
    if (ec != std::errc{} || end != args[0].data() + args[0].size() || n < 1 || n > 1'000'000'000)
      return fail("step: N must be a whole number from 1 to 1000000000, not '" + shown(args[0]) + "'");
    p.command.count = n;
  }
  p.ok = true;
  return p;
}

const std::vector<std::string>& repl_command_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const CommandInfo& c : kCommands) v.emplace_back(c.name);
    return v;
  }();
  return names;
}

std::string repl_help(std::string_view cmd) {
  std::string out;
  if (cmd.empty()) {
    for (const CommandInfo& c : kCommands) {
      std::string u = c.usage;
      u.resize(std::max<size_t>(u.size() + 1, 26), ' ');
      out += "  " + u + c.what + "\n";
    }
    out += "every query takes --json for a one-line JSON answer\n";
    return out;
  }
  const CommandInfo* c = find(cmd);
  if (!c) return "";
  return std::string("usage: ") + c->usage + "\n" + c->what + "\n";
}

}  // namespace maestro
