// The checker: from the parsed files of a program to the resolved Program,
// reporting every semantic error (names, types, units, defaults, the section
// and flow graph, data and train). Internal to dsl/.
#pragma once

#include <optional>
#include <vector>

#include "dsl/program.h"
#include "dsl/source.h"

namespace maestro::sect {

// One top-level declaration (any statement but import), in program order.
struct Decl {
  int file;
  size_t stmt;  // index into files[file].ast.stmts
};

// Returns the Program, or nullopt after reporting at least one error.
std::optional<Program> check_program(const std::vector<SourceFile>& files, const std::vector<Decl>& decls,
                                     Reporter& rep);

}  // namespace maestro::sect
