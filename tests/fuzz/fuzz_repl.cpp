// libFuzzer entry point for the debug REPL's command parser
// (actors/repl_command.h): any bytes give a command or a short printable
// error, never a crash, a hang or a sanitizer report; a parsed command
// means the same with a trailing blank; step counts stay in range.
// Run with tests/fuzz/run.sh BUILD SECONDS fuzz_repl.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "actors/repl_command.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  const maestro::ReplParse p = maestro::parse_repl_command(line);
  if (!p.ok) {
    if (p.error.empty() || p.error.size() > 200) std::abort();
    for (char c : p.error)
      if (c < 0x20 || c >= 0x7f) std::abort();
    return 0;
  }
  if (p.command.kind == maestro::ReplCommand::Kind::Step && (p.command.count < 1 || p.command.count > 1'000'000'000))
    std::abort();
  if (size < maestro::kReplMaxLine && line.find('#') == std::string::npos) {
    const maestro::ReplParse q = maestro::parse_repl_command(line + " ");
    if (!q.ok || q.command.kind != p.command.kind || q.command.arg != p.command.arg || q.command.json != p.command.json)
      std::abort();
  }
  return 0;
}
