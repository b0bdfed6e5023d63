// The registry behind CommandRegistration and find_command (command.h): a
// name → function table that command files fill in during static
// initialisation (a function-local static, so registration order between
// files does not matter); and print_error, the one error format.
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <regex>
#include <stdexcept>

#include "cli/command.h"

namespace maestro {

namespace {
std::map<std::string, CommandFn>& registry() {
  static std::map<std::string, CommandFn> commands;
  return commands;
}
}  // namespace

CommandRegistration::CommandRegistration(const char* name, CommandFn fn) { registry()[name] = fn; }

void print_error(const std::string& message) {
  static const std::regex located{R"(^([^\s:][^:\n]*:\d+:\d+): (.*)$)"};
  std::smatch m;
  if (message.find(": error: ") != std::string::npos) fmt::print(stderr, "{}\n", message);
  else if (std::regex_match(message, m, located)) fmt::print(stderr, "{}: error: {}\n", m[1].str(), m[2].str());
  else fmt::print(stderr, "maestro-run: error: {}\n", message);
}

CommandFn find_command(const std::string& name) {
  const auto it = registry().find(name);
  if (it == registry().end()) throw std::logic_error("no command '" + name + "' is registered");
  return it->second;
}

}  // namespace maestro
