// Error collection and rendering: `file:line:col: error: message`, the source
// line, and a caret line under the span. Also the "did you mean" helper.
#include <algorithm>
#include <ostream>

#include <fmt/format.h>

#include "dsl/source.h"

namespace maestro {

void Diagnostics::error(SourceLoc loc, int length, std::string message, std::string source_line) {
  errors_.push_back(Diagnostic{std::move(loc), std::max(1, length), std::move(message), std::move(source_line)});
}

void Diagnostics::render(std::ostream& out) const {
  for (const Diagnostic& d : errors_) {
    if (d.loc.line <= 0) {  // about a whole file (one that cannot be read)
      out << fmt::format("{}: error: {}\n", d.loc.file, d.message);
      continue;
    }
    out << fmt::format("{}:{}:{}: error: {}\n", d.loc.file, d.loc.line, d.loc.col, d.message);
    out << d.source_line << '\n';
    // Keep tabs so the caret lines up under tab-indented text.
    std::string caret;
    for (int i = 0; i + 1 < d.loc.col; ++i)
      caret += (static_cast<size_t>(i) < d.source_line.size() && d.source_line[i] == '\t') ? '\t' : ' ';
    caret += '^';
    caret.append(static_cast<size_t>(std::max(0, d.length - 1)), '~');
    out << caret << '\n';
  }
}

namespace sect {

void SourceFile::index_lines() {
  line_starts.assign(1, 0);
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n') line_starts.push_back(i + 1);
}

std::string SourceFile::line(int n) const {
  if (n < 1 || static_cast<size_t>(n) > line_starts.size()) return "";
  size_t begin = line_starts[n - 1];
  size_t end = text.find('\n', begin);
  if (end == std::string::npos) end = text.size();
  if (end > begin && text[end - 1] == '\r') --end;
  return text.substr(begin, end - begin);
}

void Reporter::error(Span span, std::string message) { errors_.push_back(Pending{span, std::move(message)}); }

std::string Reporter::where(Span place, Span from) const {
  if (place.file == from.file) return fmt::format("line {}", place.line);
  // The file's name only: the message stays the same however the program was named.
  return fmt::format("{}:{}", std::filesystem::path(files_[place.file].display).filename().string(), place.line);
}

void Reporter::flush(Diagnostics& diags) {
  std::stable_sort(errors_.begin(), errors_.end(), [](const Pending& a, const Pending& b) {
    return std::tie(a.span.file, a.span.line, a.span.col) < std::tie(b.span.file, b.span.line, b.span.col);
  });
  for (Pending& e : errors_) {
    const SourceFile& f = files_[e.span.file];
    diags.error(SourceLoc{f.display, e.span.line, e.span.col}, e.span.length, std::move(e.message),
                f.line(e.span.line));
  }
  errors_.clear();
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  // Close enough: at most a third of the word's letters differ (at least two).
  size_t best = std::max<size_t>(2, word.size() / 3) + 1;
  const std::string* choice = nullptr;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best) {
      best = d;
      choice = &c;
    }
  }
  return choice ? fmt::format("; did you mean '{}'?", *choice) : "";
}

}  // namespace sect
}  // namespace maestro
