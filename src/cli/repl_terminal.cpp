// The terminal front end of the debug REPL (repl_terminal.h).
#include "cli/repl_terminal.h"

#include <editline/readline.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <chrono>
#include <mutex>
#include <thread>

#include "actors/repl_command.h"

namespace maestro {

struct TerminalRepl::Impl {
  std::vector<std::string> names;
  const std::atomic<bool>* interrupt = nullptr;
  bool tty = false;
  std::function<std::string(const std::string&)> ask;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<bool> reading{true};  // until detach, quit or end of input
  bool resumed_for_interrupt = false;
  bool line_done = false;  // tty: a line was entered (the REPL thread's own)
  std::mutex out;          // stdout: answers and progress lines
  std::string progress;    // tty: the latest progress text, shown in the prompt
  bool progress_changed = false;

  // Runs one line; false once the REPL stops reading (detach, quit).
  bool run_line(const std::string& line) {
    const std::string answer = ask(line);
    {
      std::lock_guard<std::mutex> lock(out);
      if (!answer.empty()) std::fputs(answer.ends_with('\n') ? answer.c_str() : (answer + "\n").c_str(), stdout);
      std::fflush(stdout);
    }
    const ReplParse p = parse_repl_command(line);
    return !(p.ok && (p.command.kind == ReplCommand::Kind::Detach || p.command.kind == ReplCommand::Kind::Quit));
  }

  void check_interrupt() {
    if (interrupt && interrupt->load() && !resumed_for_interrupt) {
      resumed_for_interrupt = true;
      ask("resume");
    }
  }

  // After detach or end of input: Ctrl-C still reaches a paused run.
  void watch_interrupt() {
    while (!stop.load()) {
      check_interrupt();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  // Not a terminal: lines from stdin, bounded (a longer line is refused whole).
  void read_lines() {
    std::string line;
    bool too_long = false;
    char buf[4096];
    while (!stop.load() && reading) {
      check_interrupt();
      pollfd p{STDIN_FILENO, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n <= 0) break;  // end of input: detach
      for (ssize_t i = 0; i < n && reading; ++i) {
        if (buf[i] != '\n') {
          if (line.size() <= kReplMaxLine) line += buf[i];
          else too_long = true;
          continue;
        }
        reading = run_line(too_long ? std::string(kReplMaxLine + 1, 'x') : line);
        line.clear();
        too_long = false;
      }
    }
  }

  std::string prompt() const {
    return progress.empty() ? std::string("maestro> ") : "[" + progress + "] maestro> ";
  }

  // A terminal: libedit's callback interface, polled, so that this thread
  // also redraws the prompt when the progress changes and sees `stop`.
  void edit_lines();
};

namespace {

TerminalRepl::Impl* g_repl = nullptr;  // libedit's callbacks are plain functions

char* complete_name(const char* text, int state) {
  static size_t next;
  static std::vector<std::string> pool;
  if (state == 0) {
    next = 0;
    pool.clear();
    // the first word completes commands; later words section names (and commands, for help)
    const bool first = std::strspn(rl_line_buffer, " \t") + std::strlen(text) >= std::strlen(rl_line_buffer) &&
                       std::strchr(rl_line_buffer + std::strspn(rl_line_buffer, " \t"), ' ') == nullptr;
    if (first || std::strncmp(rl_line_buffer, "help", 4) == 0) pool = repl_command_names();
    if (!first) pool.insert(pool.end(), g_repl->names.begin(), g_repl->names.end());
  }
  while (next < pool.size()) {
    const std::string& c = pool[next++];
    if (c.compare(0, std::strlen(text), text) == 0) return strdup(c.c_str());
  }
  return nullptr;
}

char** complete(const char* text, int, int) {
  rl_attempted_completion_over = 1;
  return rl_completion_matches(text, complete_name);
}

void on_line(char* line) {
  TerminalRepl::Impl* r = g_repl;
  if (!line) {  // Ctrl-D: detach
    r->reading = false;
    std::fputs("\n", stdout);
    return;
  }
  std::string s(line);
  std::free(line);
  if (s.find_first_not_of(" \t") != std::string::npos) add_history(s.c_str());
  r->reading = r->run_line(s);
  r->line_done = true;
}

}  // namespace

void TerminalRepl::Impl::edit_lines() {
  g_repl = this;
  rl_catch_signals = 0;
  rl_attempted_completion_function = complete;
  rl_callback_handler_install(prompt().c_str(), on_line);
  while (!stop.load() && reading) {
    check_interrupt();
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) rl_callback_read_char();
    std::lock_guard<std::mutex> lock(out);
    if (line_done && reading) {  // libedit leaves callback mode after a line: a fresh prompt
      line_done = false;
      rl_callback_handler_remove();
      rl_callback_handler_install(prompt().c_str(), on_line);
      progress_changed = false;
    }
    if (progress_changed && reading) {
      progress_changed = false;
      std::fputs("\r\033[K", stdout);  // redraw the prompt and the typed text on a clean line
      std::fflush(stdout);
      rl_set_prompt(prompt().c_str());
      rl_forced_update_display();
    }
  }
  rl_callback_handler_remove();
  std::fputs("\n", stdout);
  std::fflush(stdout);
  g_repl = nullptr;
}

TerminalRepl::TerminalRepl(std::vector<std::string> names, const std::atomic<bool>* interrupt)
    : impl_(std::make_shared<Impl>()) {
  impl_->names = std::move(names);
  impl_->interrupt = interrupt;
  impl_->tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
}

TerminalRepl::~TerminalRepl() {
  impl_->stop.store(true);
  if (impl_->thread.joinable()) impl_->thread.join();
}

ReplFrontEnd TerminalRepl::front_end() {
  std::shared_ptr<Impl> impl = impl_;
  return ReplFrontEnd{
      [impl](std::function<std::string(const std::string&)> ask) {
        impl->ask = std::move(ask);
        impl->thread = std::thread([impl] {
          impl->tty ? impl->edit_lines() : impl->read_lines();
          impl->watch_interrupt();
        });
      },
      [impl] {
        impl->stop.store(true);
        if (impl->thread.joinable()) impl->thread.join();
      }};
}

void TerminalRepl::progress(const std::string& text) {
  std::lock_guard<std::mutex> lock(impl_->out);
  if (impl_->tty && impl_->thread.joinable() && !impl_->stop.load() && impl_->reading.load()) {
    impl_->progress = text;
    impl_->progress_changed = true;
    return;
  }
  std::fputs((text + "\n").c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace maestro
