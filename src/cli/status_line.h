// StatusLine: one line on stderr that says what a long command is doing
// while it works — planning a large cluster simulates thousands of plans
// and takes tens of seconds (docs/PERFORMANCE.md, "Planning time") before
// `--simulate` or `--print plan` prints anything. The line is rewritten in
// place at most ten times a second and erased before the command's output,
// so stdout is the same with or without it. Only where stderr is a terminal
// and `--quiet` is not given; elsewhere (pipes, files, CI logs) it writes
// nothing.
#pragma once

#include <chrono>
#include <string>

namespace maestro {

class StatusLine {
 public:
  // Whether to write at all: `--quiet` not given and stderr a terminal.
  static bool wanted(bool quiet);

  explicit StatusLine(bool enabled);
  ~StatusLine();  // erases the line
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;

  bool enabled() const { return enabled_; }
  // "maestro-run: TEXT (12.3 s)", the seconds since construction; skipped
  // when the line was written less than 0.1 s ago, unless `force` (a new
  // phase of the work).
  void show(const std::string& text, bool force = false);
  // Erases the line (before the command prints its output).
  void clear();

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_;
  bool shown_ = false;
  Clock::time_point start_, last_;
};

}  // namespace maestro
