// files(manifest: "train.jsonl"): a text data set read from a JSON-lines
// manifest. Each line is {"text": "..."} (its UTF-8 bytes are the token ids)
// or {"tokens": [ids...]}. Samples are taken in file order, global_batch per
// step, wrapping around at the end. Image and audio lines are refused for
// now ("not yet supported"); every error names manifest:line.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/batch.h"

namespace maestro {

// Bad data input (exit status 2); what() is "path:line: message".
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Manifest {
 public:
  // Reads and checks every line; throws DataError.
  static Manifest load(const std::string& path);

  int64_t size() const { return int64_t(samples_.size()); }
  const std::string& path() const { return path_; }

  // The samples of `step`: ids step*global_batch + i, taken from file
  // position id % size(); every sample is text-only.
  Batch batch(int64_t step, int64_t global_batch) const;

  // Token ids of the sample with this id.           [text_tokens]
  const std::vector<int32_t>& tokens(int64_t sample_id) const;

  // Throws DataError naming the first line with an id >= vocab.
  void check_vocab(int64_t vocab, const std::string& section) const;

 private:
  struct Line {
    int line = 0;
    std::vector<int32_t> tokens;
  };
  std::string path_;
  std::vector<Line> samples_;
};

}  // namespace maestro
