// safetensors files (Hugging Face's format): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets: [begin, end)},
// "__metadata__": {string: string}}, then the tensors' bytes. We read and
// write F32 and BF16. Every error is a std::runtime_error naming the file
// and, where there is one, the tensor.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "nn/tensor.h"

namespace maestro {

class SafetensorsReader {
 public:
  // Reads and checks the header: JSON, dtypes, shapes against byte ranges,
  // ranges inside the file.
  explicit SafetensorsReader(const std::string& path);

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  DType dtype(const std::string& name) const;
  const std::vector<int64_t>& shape(const std::string& name) const;

  // The tensor as stored (F32 or BF16, host memory).
  Tensor read(const std::string& name);
  // The tensor converted to fp32 into dst[numel], after checking its shape
  // equals `shape` (a missing tensor or another shape throws).
  void read_f32(const std::string& name, const std::vector<int64_t>& shape, float* dst);

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;  // byte range in the data section
  };
  const Entry& entry(const std::string& name) const;
  std::string path_;
  std::ifstream file_;
  uint64_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct NamedTensor {
  std::string name;
  Tensor tensor;  // F32 or BF16, contiguous, host memory
};

// Writes the tensors in the given order to `path` atomically: to
// "<path>.tmp" first, then renamed over `path`.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace maestro
