// safetensors read/write (see safetensors.h).
#include "nn/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace maestro {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(fmt::format("{}: {}", path, what));
}

// Headers bigger than this are not a safetensors file (the format caps them at 100 MB).
constexpr uint64_t kMaxHeader = 100u << 20;

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path), file_(path, std::ios::binary) {
  if (!file_) fail(path, "cannot open file");
  file_.seekg(0, std::ios::end);
  const uint64_t file_size = uint64_t(file_.tellg());
  file_.seekg(0);
  if (file_size < 8) fail(path, fmt::format("truncated: {} bytes, too short for the 8-byte header length", file_size));
  uint8_t len_bytes[8];
  file_.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeader || 8 + header_len > file_size)
    fail(path, fmt::format("truncated header: it claims {} bytes, the file has {} after the length", header_len,
                           file_size - 8));
  std::string text(header_len, '\0');
  file_.read(text.data(), std::streamsize(header_len));
  data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - data_start_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, fmt::format("header is not valid JSON ({})", e.what()));
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  for (auto& [name, v] : header.items()) {
    try {
      if (name == "__metadata__") {
        for (auto& [k, s] : v.items()) metadata_[k] = s.get<std::string>();
        continue;
      }
      const std::string dtype = v.at("dtype").get<std::string>();
      Entry e;
      if (dtype == "F32") e.dtype = DType::F32;
      else if (dtype == "BF16") e.dtype = DType::BF16;
      else fail(path, fmt::format("tensor '{}' has unsupported dtype {} (F32 and BF16 are accepted)", name, dtype));
      e.shape = v.at("shape").get<std::vector<int64_t>>();
      const auto offsets = v.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2) fail(path, fmt::format("tensor '{}': data_offsets must be [begin, end]", name));
      e.begin = offsets[0];
      e.end = offsets[1];
      for (int64_t d : e.shape)
        if (d < 0) fail(path, fmt::format("tensor '{}': negative dimension in shape {}", name, shape_str(e.shape)));
      if (e.end < e.begin || e.end > data_size)
        fail(path, fmt::format("tensor '{}': data range [{}, {}) outside the file's {} data bytes", name, e.begin,
                               e.end, data_size));
      if (e.end - e.begin != uint64_t(numel_of(e.shape)) * dtype_size(e.dtype))
        fail(path, fmt::format("tensor '{}': {} bytes do not hold a {} tensor of shape {}", name, e.end - e.begin,
                               dtype, shape_str(e.shape)));
      entries_.emplace(name, std::move(e));
    } catch (const nlohmann::json::exception& ex) {
      fail(path, fmt::format("tensor '{}': malformed header entry ({})", name, ex.what()));
    }
  }
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (auto& [n, e] : entries_) out.push_back(n);
  return out;
}

const SafetensorsReader::Entry& SafetensorsReader::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(path_, fmt::format("missing tensor '{}'", name));
  return it->second;
}

DType SafetensorsReader::dtype(const std::string& name) const { return entry(name).dtype; }
const std::vector<int64_t>& SafetensorsReader::shape(const std::string& name) const { return entry(name).shape; }

Tensor SafetensorsReader::read(const std::string& name) {
  const Entry& e = entry(name);
  Tensor t = Tensor::host(e.dtype, e.shape);
  file_.clear();
  file_.seekg(std::streamoff(data_start_ + e.begin));
  file_.read(static_cast<char*>(t.data), std::streamsize(e.end - e.begin));
  if (!file_) fail(path_, fmt::format("tensor '{}': read failed", name));
  return t;
}

void SafetensorsReader::read_f32(const std::string& name, const std::vector<int64_t>& shape, float* dst) {
  const Entry& e = entry(name);
  if (e.shape != shape)
    fail(path_, fmt::format("tensor '{}' has shape {}, expected {}", name, shape_str(e.shape), shape_str(shape)));
  Tensor t = read(name);
  const int64_t n = t.numel();
  if (t.dtype == DType::F32) std::copy(t.f32(), t.f32() + n, dst);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(t.bf16()[i]);
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& nt : tensors) {
    const uint64_t bytes = nt.tensor.bytes();
    header[nt.name] = {{"dtype", dtype_name(nt.tensor.dtype)},
                       {"shape", nt.tensor.shape},
                       {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  const std::string tmp = path + ".tmp";
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(tmp, fmt::format("cannot open for writing: {}", std::strerror(errno)));
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (const auto& nt : tensors) out.write(static_cast<const char*>(nt.tensor.data), std::streamsize(nt.tensor.bytes()));
    out.flush();
    if (!out) fail(tmp, fmt::format("write failed: {}", std::strerror(errno)));  // e.g. No space left on device
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail(path, fmt::format("cannot rename {} into place: {}", tmp, ec.message()));
}

}  // namespace maestro
