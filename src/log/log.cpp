// The run's levelled log (log.h).
#include "log/log.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <string>

namespace maestro {

namespace {

constexpr std::array<const char*, 5> kNames = {"error", "warn", "info", "debug", "trace"};
std::atomic<int> g_level{int(LogLevel::Warn)};

}  // namespace

std::optional<LogLevel> parse_log_level(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (name == kNames[i]) return LogLevel(i);
  return std::nullopt;
}

const char* log_level_name(LogLevel level) { return kNames.at(size_t(level)); }
const char* log_level_names() { return "error, warn, info, debug, trace"; }

void set_log_level(LogLevel level) { g_level.store(int(level), std::memory_order_relaxed); }
LogLevel log_level() { return LogLevel(g_level.load(std::memory_order_relaxed)); }
bool log_enabled(LogLevel level) { return int(level) <= g_level.load(std::memory_order_relaxed); }

void log_line(LogLevel level, std::string_view text) {
  static const bool tty = ::isatty(STDERR_FILENO) == 1;
  std::string line = fmt::format("{}maestro-run: [{}] {}\n", tty ? "\r\033[K" : "", log_level_name(level), text);
  // One write(2) per line: atomic with respect to other threads' lines.
  for (size_t at = 0; at < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + at, line.size() - at);
    if (n <= 0) return;
    at += size_t(n);
  }
}

}  // namespace maestro
