// The debug REPL's command parser (actors/repl_command.h): every command,
// its arguments and errors, and properties over random input — any byte
// string is answered (a command or an error, never a throw), and a valid
// command parses the same however it is spaced.
#define BOOST_TEST_MODULE repl
#include <boost/test/unit_test.hpp>

#include <random>

#include "actors/repl_command.h"

using maestro::parse_repl_command;
using maestro::ReplCommand;
using Kind = ReplCommand::Kind;

BOOST_AUTO_TEST_SUITE(repl_command)

BOOST_AUTO_TEST_CASE(every_command_parses) {
  BOOST_TEST(parse_repl_command("topology").ok);
  BOOST_TEST((parse_repl_command("topology").command.kind == Kind::Topology));
  BOOST_TEST((parse_repl_command("  sections  ").command.kind == Kind::Sections));
  BOOST_TEST((parse_repl_command("plan --json").command.json));
  BOOST_TEST((parse_repl_command("graph").command.kind == Kind::Graph));
  BOOST_TEST((parse_repl_command("wave --json").command.kind == Kind::Wave));
  auto st = parse_repl_command("stats llm --json");
  BOOST_TEST((st.command.kind == Kind::Stats));
  BOOST_TEST(st.command.arg == "llm");
  BOOST_TEST(st.command.json);
  BOOST_TEST(parse_repl_command("stats").command.arg.empty());
  BOOST_TEST(parse_repl_command("actor llm/0").command.arg == "llm/0");
  BOOST_TEST(parse_repl_command("actor  llm/0   replica --json").command.arg == "llm/0 replica");
  BOOST_TEST((parse_repl_command("pause").command.kind == Kind::Pause));
  BOOST_TEST((parse_repl_command("trace start /tmp/t.json").command.kind == Kind::TraceStart));
  BOOST_TEST(parse_repl_command("trace start /tmp/t.json").command.arg == "/tmp/t.json");
  BOOST_TEST((parse_repl_command("trace stop").command.kind == Kind::TraceStop));
  BOOST_TEST((parse_repl_command("resume").command.kind == Kind::Resume));
  BOOST_TEST((parse_repl_command("loglevel").command.kind == Kind::LogLevel));
  BOOST_TEST(parse_repl_command("loglevel").command.arg.empty());
  BOOST_TEST(parse_repl_command("loglevel debug --json").command.arg == "debug");
  BOOST_TEST(parse_repl_command("loglevel debug --json").command.json);
  BOOST_TEST(parse_repl_command("step 3").command.count == 3);
  BOOST_TEST((parse_repl_command("checkpoint").command.kind == Kind::Checkpoint));
  BOOST_TEST((parse_repl_command("detach").command.kind == Kind::Detach));
  BOOST_TEST((parse_repl_command("quit\r\n").command.kind == Kind::Quit));
  BOOST_TEST(parse_repl_command("help step").command.arg == "step");
  BOOST_TEST((parse_repl_command("").command.kind == Kind::Empty));
  BOOST_TEST((parse_repl_command("   # a comment").command.kind == Kind::Empty));
  for (const std::string& name : maestro::repl_command_names()) {
    BOOST_TEST(!maestro::repl_help(name).empty(), name);
    BOOST_TEST(parse_repl_command("help " + name).ok, name);
  }
}

BOOST_AUTO_TEST_CASE(bad_lines_name_what_is_wrong) {
  auto check = [](std::string line, std::string part) {
    auto p = parse_repl_command(line);
    BOOST_TEST(!p.ok, line);
    BOOST_TEST(p.error.find(part) != std::string::npos, p.error + " lacks " + part);
  };
  check("frobnicate", "unknown command 'frobnicate'");
  check("step", "usage: step N");
  check("step 0", "whole number");
  check("step -2", "whole number");
  check("step 3x", "whole number");
  check("step 99999999999999999999", "whole number");
  check("actor", "usage: actor NAME");
  check("topology extra", "usage: topology");
  check("stats llm vision", "usage: stats");
  check("trace", "usage: trace start FILE");
  check("trace start", "usage: trace start FILE");
  check("trace stop now", "usage: trace start FILE");
  check("trace begin x", "usage: trace start FILE");
  check("plan --yaml", "unknown option '--yaml'");
  check("loglevel verbose", "LEVEL is one of error, warn, info, debug, trace, not 'verbose'");
  check("loglevel DEBUG", "not 'DEBUG'");
  check("loglevel info debug", "usage: loglevel [LEVEL]");
  check("help nothing", "unknown command 'nothing'");
  check(std::string("topo\x01logy"), "not printable");
  check(std::string(maestro::kReplMaxLine + 1, 'a'), "line too long");
  BOOST_TEST(parse_repl_command(std::string(maestro::kReplMaxLine - 8, ' ') + "topology").ok);
}

// Property: any byte string gets an answer — a command, or an error that is
// short and printable — and never an exception.
BOOST_AUTO_TEST_CASE(random_bytes_are_answered) {
  std::mt19937_64 rng(15);
  const std::string alphabet = "topologysectionsplangraphwavestatsactorpauseresumestepcheckpointdetachquithelp 0123456789-#\t\r\n";
  for (int i = 0; i < 20000; ++i) {
    std::string line(rng() % 80, '\0');
    for (char& c : line) c = (i % 2) ? char(rng() & 0xff) : alphabet[rng() % alphabet.size()];
    maestro::ReplParse p;
    BOOST_REQUIRE_NO_THROW(p = parse_repl_command(line));
    if (!p.ok) {
      BOOST_TEST(!p.error.empty());
      BOOST_TEST(p.error.size() < 200u);
      for (char c : p.error) BOOST_TEST((c >= 0x20 && c < 0x7f));
    }
  }
}

// Property: a valid command means the same with any spacing and --json placed anywhere after the name.
BOOST_AUTO_TEST_CASE(spacing_does_not_change_meaning) {
  std::mt19937_64 rng(7);
  const std::vector<std::string> lines = {"topology", "stats llm", "actor scheduler", "actor llm/1 replica", "step 12", "help wave", "wave"};
  const char* blanks[] = {" ", "  ", "\t", " \t "};
  for (const std::string& line : lines) {
    const auto ref = parse_repl_command(line);
    BOOST_REQUIRE(ref.ok);
    for (int i = 0; i < 200; ++i) {
      std::string spaced = blanks[rng() % 4];
      for (char c : line) spaced += c == ' ' ? std::string(blanks[rng() % 4]) : std::string(1, c);
      spaced += blanks[rng() % 4];
      const auto p = parse_repl_command(spaced);
      BOOST_REQUIRE(p.ok);
      BOOST_TEST((p.command.kind == ref.command.kind));
      BOOST_TEST(p.command.arg == ref.command.arg);
      BOOST_TEST(p.command.count == ref.command.count);
      BOOST_TEST(!p.command.json);
      BOOST_TEST(parse_repl_command(spaced + " --json").command.json);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
