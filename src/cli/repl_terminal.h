// `maestro-run --repl`: the debug REPL on this terminal while the run goes on.
// On a terminal, libedit gives line editing, history and tab completion of
// command and section names, and the progress line is the prompt itself
// ("[step 12/40 loss 4.1234] maestro> "), redrawn by the REPL's own thread,
// so the two never garble each other. Otherwise commands are read line by
// line from stdin (scriptable) and answers and progress lines are printed
// whole under one lock. End of input detaches; the run goes on.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "actors/trainer.h"

namespace maestro {

class TerminalRepl {
 public:
  // `names`: completed after a command (sections); `interrupt`: set by
  // SIGINT — a paused run is resumed so that it can checkpoint and stop.
  TerminalRepl(std::vector<std::string> names, const std::atomic<bool>* interrupt);
  ~TerminalRepl();
  ReplFrontEnd front_end();
  // The progress line of a step: into the prompt on a terminal, else printed.
  void progress(const std::string& text);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace maestro
