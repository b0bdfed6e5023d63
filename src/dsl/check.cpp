// The checker (check.h): evaluates lets, resolves model names to built-in
// specs, reads each section, flow, data and train block into the Program,
// applies the defaults of the language, and checks every rule of meaning. It
// keeps going after an error so that one run reports all of them. This file
// is the driver: the order of the passes. The passes live by idea in
// check_expressions.cpp, builtin_models.cpp, check_blocks.cpp and
// check_rules.cpp, on the Checker of checker.h.
#include "dsl/checker.h"

namespace maestro::sect {

std::optional<Program> Checker::run() {
  collect_names();
  for (auto& [name, let] : lets_) let_value(name, let.stmt->name_span, 0);
  for (const Stmt* s : model_order_) model_named(s->name, s->name_span);
  const Stmt* data = nullptr;
  const Stmt* train = nullptr;
  for (const Decl& d : decls_) {
    const Stmt& s = stmt(d);
    if (s.kind == Stmt::Kind::Section) read_section(s);
    if (s.kind == Stmt::Kind::Data) one_block(s, data, "data");
    if (s.kind == Stmt::Kind::Train) one_block(s, train, "train");
  }
  Span top{0, 1, 1, 1};
  if (data == nullptr) rep_.error(top, "the program has no 'data' block");
  else read_data(*data);
  if (train == nullptr) rep_.error(top, "the program has no 'train' block");
  else read_train(*train);
  if (program_.sections.empty()) rep_.error(top, "the program has no section");
  for (const Decl& d : decls_)
    if (stmt(d).kind == Stmt::Kind::Flow) read_flow(stmt(d));
  check_flow_cycles();
  check_sections_against_program();
  check_frozen_sections();
  if (rep_.count() > 0) return std::nullopt;
  return std::move(program_);
}

std::optional<Program> check_program(const std::vector<SourceFile>& files, const std::vector<Decl>& decls,
                                     Reporter& rep) {
  return Checker(files, decls, rep).run();
}

}  // namespace maestro::sect
