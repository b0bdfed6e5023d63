// `[repl] listen = "HOST:PORT"`: the debug REPL served over TCP while the
// run goes on, for `maestro-repl HOST:PORT` (several clients at once).
// A random token is written to `[repl] token_file` (default: next to the
// checkpoint folder, "<dir>.repl-token") with mode 0600; a client's first
// line must be "token T". A wrong token is refused, logged on stderr and
// rate-limited (one failed attempt a second, for all clients). Lines are
// bounded (a longer one is refused whole); a client that never speaks, or
// sends garbage, costs one poll slot and never stalls training. Each answer
// ends with an empty line. `detach` and `quit` close the client; the run
// goes on after detach.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "actors/trainer.h"

namespace maestro {

// Bad [repl] settings (exit 2) or a socket that can't be opened (exit 1).
struct ReplServiceError : std::runtime_error {
  ReplServiceError(int code, const std::string& m) : std::runtime_error(m), exit_code(code) {}
  int exit_code;
};

class ReplService {
 public:
  // Binds the socket and writes the token file; throws ReplServiceError.
  ReplService(const std::string& listen, std::string token_file, const std::string& checkpoint_dir);
  ~ReplService();
  ReplFrontEnd front_end();
  const std::string& token_file() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace maestro
