// The registry behind CommandRegistration and find_command (command.h): a
// name → function table that command files fill in during static
// initialisation. A function-local static, so registration order between
// files does not matter.
#include <map>
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

CommandFn find_command(const std::string& name) {
  const auto it = registry().find(name);
  if (it == registry().end()) throw std::logic_error("no command '" + name + "' is registered");
  return it->second;
}

}  // namespace maestro
