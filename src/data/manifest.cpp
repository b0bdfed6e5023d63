// Manifest: JSON-lines data (see manifest.h). Parsed with nlohmann-json.
#include "data/manifest.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "data/image.h"
#include "data/log_mel.h"
#include "data/wav.h"

namespace maestro {

namespace fs = std::filesystem;

namespace {

constexpr int kHop = 160;  // audio samples per mel frame (10 ms at 16 kHz)

// `rel` resolved against `dir`; a relative path may not leave dir's tree.
std::string resolve(const fs::path& dir, const std::string& rel) {
  const fs::path p(rel);
  if (rel.empty()) throw DataError("an empty path");
  if (p.is_absolute()) return p.string();
  const fs::path normal = p.lexically_normal();
  std::error_code ec;
  const fs::path full = fs::weakly_canonical(dir / normal, ec);
  const fs::path root = fs::weakly_canonical(dir, ec);
  const auto [r, f] = std::mismatch(root.begin(), root.end(), full.begin(), full.end());
  if ((!normal.empty() && *normal.begin() == "..") || r != root.end())
    throw DataError(fmt::format("\"{}\" is outside the manifest's folder (use an absolute path)", rel));
  return (dir / normal).string();
}

// A file the manifest names must exist and be a regular file (not a
// folder, a FIFO or a device that could block or never end).
const std::string& regular_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw DataError(fmt::format("{}: no such file", path));
  if (!fs::is_regular_file(st)) throw DataError(fmt::format("{}: not a regular file", path));
  return path;
}

std::vector<std::string> string_list(const nlohmann::json& j, const char* key) {
  const auto& v = j[key];
  if (!v.is_array() || v.empty())
    throw DataError(fmt::format("\"{}\" must be a non-empty list of file names", key));
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string()) throw DataError(fmt::format("\"{}\" must hold file names, got {}", key, e.dump()));
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

Manifest Manifest::load(const std::string& path, const ManifestOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(fmt::format("{}: cannot open the manifest", path));
  return parse(in, path, options);
}

Manifest Manifest::parse(std::istream& in, const std::string& path, const ManifestOptions& options) {
  Manifest m;
  m.path_ = path;
  m.options_ = options;
  const fs::path dir = fs::absolute(fs::path(path)).parent_path();
  std::string text;
  int line_no = 0;
  while (std::getline(in, text)) {
    ++line_no;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    const std::string where = fmt::format("{}:{}", path, line_no);
    try {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception& e) {
        throw DataError(fmt::format("not a JSON object ({})", e.what()));
      }
      if (!j.is_object()) throw DataError("expected a JSON object");
      for (auto key = j.begin(); key != j.end(); ++key)
        if (key.key() != "text" && key.key() != "tokens" && key.key() != "images" && key.key() != "video" &&
            key.key() != "audio")
          throw DataError(fmt::format("unknown key \"{}\" (text, tokens, images, video, audio)", key.key()));
      Line l;
      l.line = line_no;
      const bool has_text = j.contains("text"), has_tokens = j.contains("tokens");
      if (has_text == has_tokens) throw DataError("expected exactly one of \"text\" or \"tokens\"");
      if (has_text) {
        if (!j["text"].is_string()) throw DataError("\"text\" must be a string");
        for (unsigned char c : j["text"].get<std::string>()) l.tokens.push_back(c);
      } else {
        const auto& t = j["tokens"];
        if (!t.is_array()) throw DataError("\"tokens\" must be a list of integers");
        for (const auto& v : t) {
          if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
            throw DataError(fmt::format("\"tokens\" must hold non-negative integers, got {}", v.dump()));
          l.tokens.push_back(static_cast<int32_t>(v.get<int64_t>()));
        }
      }
      if (l.tokens.size() < 2) throw DataError("a sample needs at least 2 tokens to predict one");
      if (options.vocab > 0)
        for (int32_t t : l.tokens)
          if (t >= options.vocab)
            throw DataError(fmt::format("token id {} is outside the vocabulary of section '{}' ({})", t,
                                        options.vocab_section, options.vocab));
      std::vector<std::string> files;
      if (j.contains("images")) files = string_list(j, "images");
      if (j.contains("video")) {
        const std::vector<std::string> frames = string_list(j, "video");
        l.video_frames = int32_t(frames.size());
        files.insert(files.end(), frames.begin(), frames.end());
      }
      for (const std::string& f : files) {
        l.images.push_back(regular_file(resolve(dir, f)));
        int w = 0, h = 0;
        probe_image(l.images.back(), &w, &h);
      }
      if (j.contains("audio")) {
        if (!j["audio"].is_string()) throw DataError("\"audio\" must be a file name");
        l.audio = regular_file(resolve(dir, j["audio"].get<std::string>()));
        l.audio_samples = probe_wav(l.audio).frames;
        if (l.audio_samples < 2 * kHop) throw DataError(fmt::format("{}: shorter than two 10 ms frames", l.audio));
      }
      m.samples_.push_back(std::move(l));
    } catch (const DataError& e) {
      std::string what = fmt::format("{}: {}", where, e.what());
      if (!options.skip_bad) throw DataError(what);
      m.skipped_.push_back(std::move(what));
    }
  }
  if (m.samples_.empty())
    throw DataError(fmt::format("{}: the manifest holds no samples{}", path,
                                m.skipped_.empty() ? "" : fmt::format(" ({} skipped)", m.skipped_.size())));
  return m;
}

Sample Manifest::sample(int64_t id) const {
  const Line& l = line_of(id);
  Sample s;
  s.id = id;
  s.modalities.add(Modality::Text);
  s.text_tokens = int32_t(l.tokens.size());
  if (!l.images.empty()) {  // video frames are images to the vision section
    s.modalities.add(Modality::Image);
    if (l.video_frames > 0) s.modalities.add(Modality::Video);
    s.images = int32_t(l.images.size());
  }
  if (!l.audio.empty()) {
    s.modalities.add(Modality::Audio);
    s.audio_frames = int32_t(options_.audio_frames > 0 ? options_.audio_frames : l.audio_samples / kHop);
  }
  return s;
}

Batch Manifest::batch(int64_t step, int64_t global_batch) const {
  Batch b;
  b.step = step;
  b.samples.reserve(global_batch);
  for (int64_t i = 0; i < global_batch; ++i) b.samples.push_back(sample(step * global_batch + i));
  return b;
}

const std::vector<int32_t>& Manifest::tokens(int64_t sample_id) const { return line_of(sample_id).tokens; }

std::vector<float> Manifest::pixels(int64_t sample_id, int size) const {
  const Line& l = line_of(sample_id);
  std::vector<float> out;
  out.reserve(l.images.size() * 3 * size_t(size) * size);
  try {
    for (const std::string& f : l.images) {
      const std::vector<float> px = clip_preprocess(decode_image(f), size);
      out.insert(out.end(), px.begin(), px.end());
    }
  } catch (const DataError& e) {
    throw DataError(fmt::format("{}:{}: {}", path_, l.line, e.what()));
  }
  return out;
}

std::vector<float> Manifest::mel(int64_t sample_id, int mel_bins) const {
  const Line& l = line_of(sample_id);
  if (l.audio.empty()) return {};
  try {
    return log_mel_spectrogram(read_wav(l.audio), mel_bins, sample(sample_id).audio_frames);
  } catch (const DataError& e) {
    throw DataError(fmt::format("{}:{}: {}", path_, l.line, e.what()));
  }
}

}  // namespace maestro
