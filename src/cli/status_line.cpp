// StatusLine (see status_line.h).
#include "cli/status_line.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace maestro {

bool StatusLine::wanted(bool quiet) { return !quiet && ::isatty(STDERR_FILENO) == 1; }

StatusLine::StatusLine(bool enabled) : enabled_(enabled), start_(Clock::now()) {}

StatusLine::~StatusLine() { clear(); }

void StatusLine::show(const std::string& text, bool force) {
  if (!enabled_) return;
  const Clock::time_point now = Clock::now();
  if (shown_ && !force && now - last_ < std::chrono::milliseconds(100)) return;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  // \r to the line's start, \033[K erases what a longer line left.
  fmt::print(stderr, "\rmaestro-run: {} ({:.1f} s)\033[K", text, elapsed);
  std::fflush(stderr);
  shown_ = true;
  last_ = now;
}

void StatusLine::clear() {
  if (!shown_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace maestro
