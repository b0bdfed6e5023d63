// The run's levelled log: lines on stderr, "maestro-run: [info] …", for
// what a user watching a run wants to know (warn: something is off but the
// run goes on; info: checkpoints, steering, resumes; debug: every step's
// end with its loss and time; trace: every task dispatched and done). The
// level is process-wide and atomic: `--log-level` sets it at start-up and
// the REPL's `loglevel LEVEL` changes it while the run trains. A disabled
// level costs one relaxed atomic load (the message is never formatted).
// Errors that end the run are not log lines: the command prints them.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string_view>

namespace maestro {

enum class LogLevel { Error = 0, Warn, Info, Debug, Trace };

// "error" | "warn" | "info" | "debug" | "trace"; nullopt for anything else.
std::optional<LogLevel> parse_log_level(std::string_view name);
const char* log_level_name(LogLevel level);
// "error, warn, info, debug, trace", for messages.
const char* log_level_names();

void set_log_level(LogLevel level);
LogLevel log_level();
bool log_enabled(LogLevel level);

// One whole line on stderr (one write: lines of several threads never mix);
// on a terminal it first clears the line a progress bar may be drawing.
void log_line(LogLevel level, std::string_view text);

template <class... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(level)) log_line(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace maestro
