// The front end's entry points: read a .sect file (and its imports), check
// it, and either return the resolved Program or report every error found.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/program.h"

namespace maestro {

// One error, pointing at a span of a source line.
struct Diagnostic {
  SourceLoc loc;            // where the span starts
  int length = 1;           // caret span length in columns (>= 1)
  std::string message;      // "unknown key 'micro_bach' in section 'vision'; did you mean 'micro_batch'?"
  std::string source_line;  // the full text of that line (no newline)
};

// Collects every error of a run, in source order of discovery.
class Diagnostics {
 public:
  void error(SourceLoc loc, int length, std::string message, std::string source_line);
  bool ok() const { return errors_.empty(); }
  const std::vector<Diagnostic>& errors() const { return errors_; }
  // `file:line:col: error: message`, the source line, a caret line; one per error.
  void render(std::ostream& out) const;

 private:
  std::vector<Diagnostic> errors_;
};

// Reads `path` and its imports. Returns the Program when there is no error.
std::optional<Program> load_program(const std::string& path, Diagnostics& diags);

// Same, for source text held in memory (tests, fuzzing); imports resolve
// relative to `virtual_path`'s folder.
std::optional<Program> load_program_text(std::string_view text, const std::string& virtual_path,
                                         Diagnostics& diags);

}  // namespace maestro
