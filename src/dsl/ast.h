// The syntax tree of one .sect file, as the front end's parser builds it from
// ANTLR's parse tree (parse.cpp). Internal to dsl/: it keeps the shape of the
// text (blocks are lists of entries, calls carry any arguments) so that the
// checker (check.cpp) can give each mistake its own message and place.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace maestro::sect {

// A span on one line of one file: file index into the loader's file table.
struct Span {
  int file = 0;
  int line = 0;
  int col = 0;     // 1-based
  int length = 1;  // columns, >= 1
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Number,  // text: the literal as written ("8MiB"); value parsed by the checker
    String,  // text: the decoded value
    Bool,    // flag
    Auto,
    Name,    // text: the identifier (a let, a model, or an enum word)
    Call,    // text: callee; items: arguments; arg_names: "" for a positional one
    List,    // items
    Neg,     // items[0]
    Not,     // items[0]
    Arith,   // items[0] ops[0] items[1] ops[1] items[2] ...; ops are '+', '-', '*', '/'
    And,     // items (two or more)
    Or,      // items (two or more)
  } kind = Kind::Number;
  Span span;
  std::string text;
  bool flag = false;
  std::vector<ExprPtr> items;
  std::vector<std::string> arg_names;
  std::vector<Span> arg_name_spans;
  std::vector<char> ops;
};

struct Block;

// `key = value;` or `key { ... }`.
struct Entry {
  std::string key;
  Span key_span;
  ExprPtr value;                 // null for a block entry
  std::unique_ptr<Block> block;  // null for an assignment
};

struct Block {
  Span open;  // the `{`
  std::vector<Entry> entries;
};

struct Stmt {
  enum class Kind { Import, Let, Model, Section, Flow, Data, Train } kind = Kind::Let;
  Span span;                        // the keyword
  std::string name;                 // import path (decoded), let/model/section name
  Span name_span;
  ExprPtr value;                    // let, model
  std::unique_ptr<Block> block;     // section, data, train
  std::vector<std::string> chain;   // flow: section names
  std::vector<Span> chain_spans;
  std::string flow_kind;            // flow: "" (default) or the word after ':'
  Span flow_kind_span;
};

struct File {
  std::vector<Stmt> stmts;
};

}  // namespace maestro::sect
