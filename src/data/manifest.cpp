// Manifest: JSON-lines text data (see manifest.h). Parsed with nlohmann-json.
#include "data/manifest.h"

#include <fmt/format.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace maestro {

Manifest Manifest::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(fmt::format("{}: cannot open the manifest", path));
  Manifest m;
  m.path_ = path;
  std::string text;
  int line_no = 0;
  while (std::getline(in, text)) {
    ++line_no;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    auto where = [&] { return fmt::format("{}:{}", path, line_no); };
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw DataError(fmt::format("{}: not a JSON object ({})", where(), e.what()));
    }
    if (!j.is_object()) throw DataError(fmt::format("{}: expected a JSON object", where()));
    if (j.contains("images") || j.contains("audio"))
      throw DataError(fmt::format("{}: '{}' in a manifest is not yet supported (text and tokens only)",
                                  where(), j.contains("images") ? "images" : "audio"));
    Line l;
    l.line = line_no;
    const bool has_text = j.contains("text"), has_tokens = j.contains("tokens");
    if (has_text == has_tokens)
      throw DataError(fmt::format("{}: expected exactly one of \"text\" or \"tokens\"", where()));
    if (has_text) {
      if (!j["text"].is_string()) throw DataError(fmt::format("{}: \"text\" must be a string", where()));
      for (unsigned char c : j["text"].get<std::string>()) l.tokens.push_back(c);
    } else {
      const auto& t = j["tokens"];
      if (!t.is_array()) throw DataError(fmt::format("{}: \"tokens\" must be a list of integers", where()));
      for (const auto& v : t) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
            v.get<int64_t>() > std::numeric_limits<int32_t>::max())
          throw DataError(fmt::format("{}: \"tokens\" must hold non-negative integers, got {}", where(),
                                      v.dump()));
        l.tokens.push_back(static_cast<int32_t>(v.get<int64_t>()));
      }
    }
    if (l.tokens.size() < 2)
      throw DataError(fmt::format("{}: a sample needs at least 2 tokens to predict one", where()));
    for (auto key = j.begin(); key != j.end(); ++key)
      if (key.key() != "text" && key.key() != "tokens")
        throw DataError(fmt::format("{}: unknown key \"{}\"", where(), key.key()));
    m.samples_.push_back(std::move(l));
  }
  if (m.samples_.empty()) throw DataError(fmt::format("{}: the manifest holds no samples", path));
  return m;
}

Batch Manifest::batch(int64_t step, int64_t global_batch) const {
  Batch b;
  b.step = step;
  b.samples.reserve(global_batch);
  for (int64_t i = 0; i < global_batch; ++i) {
    Sample s;
    s.id = step * global_batch + i;
    s.modalities.add(Modality::Text);
    s.text_tokens = static_cast<int32_t>(tokens(s.id).size());
    b.samples.push_back(s);
  }
  return b;
}

const std::vector<int32_t>& Manifest::tokens(int64_t sample_id) const {
  return samples_[size_t(sample_id % size())].tokens;
}

void Manifest::check_vocab(int64_t vocab, const std::string& section) const {
  for (const Line& l : samples_)
    for (int32_t t : l.tokens)
      if (t >= vocab)
        throw DataError(fmt::format("{}:{}: token id {} is outside the vocabulary of section '{}' ({})",
                                    path_, l.line, t, section, vocab));
}

}  // namespace maestro
