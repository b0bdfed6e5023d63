// The files a front-end run has read, and the error collector that points
// into them. Internal to dsl/. Errors are kept with their file index so they
// can be put in source order (file read order, then line, then column) before
// they are handed to the user's Diagnostics.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "dsl/ast.h"
#include "dsl/frontend.h"

namespace maestro::sect {

struct SourceFile {
  std::string display;            // as the user wrote it (or joined onto the importer's folder)
  std::filesystem::path absolute; // canonical when the file exists on disk
  std::string text;
  std::vector<size_t> line_starts;  // byte offset of each line
  File ast;

  void index_lines();
  std::string line(int n) const;  // 1-based, without the newline
};

class Reporter {
 public:
  explicit Reporter(std::vector<SourceFile>& files) : files_(files) {}
  void error(Span span, std::string message);
  // A place as the user reads it in a message: "line 12", or "common.sect:12"
  // when it is in another file than `from`.
  std::string where(Span place, Span from) const;
  size_t count() const { return errors_.size(); }
  // Sorts by (file, line, column), keeping discovery order among equals.
  void flush(Diagnostics& diags);

 private:
  struct Pending {
    Span span;
    std::string message;
  };
  std::vector<SourceFile>& files_;
  std::vector<Pending> errors_;
};

// Parses `file.text` into `file.ast`. Reports lexical and syntax errors;
// returns false when there were any (the tree is then left empty).
bool parse_file(SourceFile& file, int file_index, Reporter& rep);

// Decodes a string literal's escapes (\" \\ \n \t); reports a bad one.
bool decode_string(const std::string& literal, Span span, std::string& out, Reporter& rep);

// Edit distance, for "did you mean" hints.
size_t edit_distance(const std::string& a, const std::string& b);
// "; did you mean 'x'?" for the closest candidate, or "" when none is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace maestro::sect
