// The front end's entry points: read the main file, follow its imports (each
// file once, relative to the importing file, cycles reported with their
// chain), parse every file, then check the whole program (check.cpp).
// Declarations of an imported file take the place of its import statement.
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "dsl/check.h"
#include "dsl/frontend.h"
#include "dsl/limits.h"
#include "dsl/source.h"

namespace maestro {
namespace {

namespace fs = std::filesystem;
using sect::Reporter;
using sect::SourceFile;
using sect::Span;
using sect::Stmt;

constexpr size_t kMaxImportDepth = 64;

fs::path canonical_key(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : c;
}

// Reads a source file into out; returns "" or why it cannot be read.
std::string read_file(const fs::path& path, std::string& out) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return "it does not exist or is not a regular file";
  const auto bytes = fs::file_size(path, ec);
  if (!ec && bytes > uint64_t(limits::kSourceBytes))
    return fmt::format("it is {} bytes; a source file may be at most 1 MiB ({} bytes)", bytes, limits::kSourceBytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) return "it cannot be opened";
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return "";
}

// The place of the first byte that is not valid UTF-8, or line 0 when all are.
Span first_bad_utf8(const std::string& s, int file) {
  int line = 1, col = 1;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n != 0 && i + n <= s.size() && c != 0;
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok && n == 2) ok = c >= 0xC2;                                          // no overlong forms
    if (ok && n == 3) ok = !(c == 0xE0 && static_cast<unsigned char>(s[i + 1]) < 0xA0) &&
                           !(c == 0xED && static_cast<unsigned char>(s[i + 1]) >= 0xA0);  // no surrogates
    if (ok && n == 4) ok = c <= 0xF4 && !(c == 0xF0 && static_cast<unsigned char>(s[i + 1]) < 0x90) &&
                           !(c == 0xF4 && static_cast<unsigned char>(s[i + 1]) >= 0x90);
    if (!ok) return Span{file, line, col, 1};
    if (c == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
    i += n;
  }
  return Span{file, 0, 0, 1};
}

class Loader {
 public:
  std::vector<SourceFile> files;
  Reporter rep{files};
  std::vector<sect::Decl> decls;  // in program order, imports expanded in place
  bool parsed = true;

  int add(std::string display, fs::path absolute, std::string text) {
    SourceFile f;
    f.display = std::move(display);
    f.absolute = std::move(absolute);
    f.text = std::move(text);
    f.index_lines();
    files.push_back(std::move(f));
    return static_cast<int>(files.size()) - 1;
  }

  void load(int index) {
    Span bad = first_bad_utf8(files[index].text, index);
    if (bad.line > 0) {
      rep.error(bad, "this file is not UTF-8 text (an invalid byte or a NUL)");
      parsed = false;
      return;
    }
    if (!sect::parse_file(files[index], index, rep)) {
      parsed = false;
      return;
    }
    stack_.push_back(index);
    via_.push_back(Span{});
    // By index: importing appends to `files`, which may move this file's tree.
    for (size_t i = 0; i < files[index].ast.stmts.size(); ++i) {
      const Stmt& s = files[index].ast.stmts[i];
      if (s.kind == Stmt::Kind::Import) {
        via_.back() = import_span(index, s);
        import(index, s);
      } else {
        decls.push_back(sect::Decl{index, i});
      }
    }
    stack_.pop_back();
    via_.pop_back();
  }

 private:
  // From `import` to the end of its path.
  static Span import_span(int file, const Stmt& stmt) {
    int length = stmt.name_span.line == stmt.span.line ? stmt.name_span.col + stmt.name_span.length - stmt.span.col
                                                       : 6;
    return Span{file, stmt.span.line, stmt.span.col, length};
  }

  void import(int importer, const Stmt& stmt) {
    Span at = import_span(importer, stmt);
    if (stmt.name.empty()) {
      rep.error(stmt.name_span, "an import needs a file path");
      return;
    }
    fs::path relative(stmt.name);
    fs::path display_dir = fs::path(files[importer].display).parent_path();
    std::string display = relative.is_absolute() ? relative.string() : (display_dir / relative).lexically_normal().string();
    fs::path absolute = relative.is_absolute() ? relative : files[importer].absolute.parent_path() / relative;
    fs::path key = canonical_key(absolute);
    for (size_t level = 0; level < stack_.size(); ++level) {
      if (files[stack_[level]].absolute != key) continue;
      std::string chain;
      for (size_t k = level; k < stack_.size(); ++k)
        chain += fs::path(files[stack_[k]].display).filename().string() + " -> ";
      chain += key.filename().string();
      rep.error(level + 1 == stack_.size() ? at : via_[level], "import cycle: " + chain);
      return;
    }
    for (const SourceFile& f : files)
      if (f.absolute == key) return;  // read once already
    if (stack_.size() >= kMaxImportDepth) {
      rep.error(at, fmt::format("imports nested more than {} files deep", kMaxImportDepth));
      return;
    }
    std::string text;
    if (const std::string why = read_file(key, text); !why.empty()) {
      const bool absent = !fs::is_regular_file(key);
      rep.error(stmt.name_span, absent ? fmt::format("cannot read imported file \"{}\" (an import is relative to the "
                                                     "importing file's folder)", stmt.name)
                                       : fmt::format("cannot read imported file \"{}\": {}", stmt.name, why));
      return;
    }
    size_t total = text.size();
    for (const SourceFile& f : files) total += f.text.size();
    if (total > size_t(limits::kSourceBytes)) {  // the front end's memory is bounded by all files together
      rep.error(stmt.name_span, fmt::format("cannot read imported file \"{}\": the program's files would be {} "
                                           "bytes; together they may be at most 1 MiB ({} bytes)",
                                           stmt.name, total, limits::kSourceBytes));
      return;
    }
    load(add(display, key, std::move(text)));
  }

  std::vector<int> stack_;   // files being loaded, outermost first
  std::vector<Span> via_;    // at each level, the import statement being followed
};

std::optional<Program> finish(Loader& loader, Diagnostics& diags) {
  std::optional<Program> program;
  if (loader.parsed) program = sect::check_program(loader.files, loader.decls, loader.rep);
  if (loader.rep.count() > 0) program.reset();
  loader.rep.flush(diags);
  if (program) {
    program->file = loader.files[0].absolute.string();
    for (const SourceFile& f : loader.files) program->sources.push_back(f.absolute.string());
  }
  return program;
}

}  // namespace

std::optional<Program> load_program(const std::string& path, Diagnostics& diags) {
  Loader loader;
  std::string text;
  fs::path key = canonical_key(fs::absolute(path));
  if (const std::string why = read_file(key, text); !why.empty()) {
    diags.error(SourceLoc{path, 0, 0}, 1, fmt::format("cannot read this file ({})", why), "");
    return std::nullopt;
  }
  loader.load(loader.add(path, key, std::move(text)));
  return finish(loader, diags);
}

std::optional<Program> load_program_text(std::string_view text, const std::string& virtual_path,
                                         Diagnostics& diags) {
  if (text.size() > size_t(limits::kSourceBytes)) {
    diags.error(SourceLoc{virtual_path, 0, 0}, 1, "the source is larger than 1 MiB", "");
    return std::nullopt;
  }
  Loader loader;
  loader.load(loader.add(virtual_path, canonical_key(fs::absolute(virtual_path)), std::string(text)));
  return finish(loader, diags);
}

}  // namespace maestro
