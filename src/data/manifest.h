// files(manifest: "train.jsonl"): a data set read from a JSON-lines
// manifest, one sample per line:
//   {"text": "..."} or {"tokens": [ids...]}     exactly one; text's UTF-8 bytes are the ids
//   "images": ["a.png", ...]                   PNG/JPEG, each through the vision section
//   "video": ["f0.jpg", "f1.jpg", ...]          frames, decoded like images, after them
//   "audio": "clip.wav"                         16 kHz mono WAV -> log-mel frames
// Paths are relative to the manifest's folder and may not leave it (an
// absolute path may point anywhere). load() reads every line's metadata —
// token ids, image and frame counts, each file's header — before training,
// because the wavefront scheduler needs each sample's cost; pixels and mel
// frames are decoded later (pixels(), mel()), by the data loader's threads.
// A bad line (not JSON, a missing/corrupt/unsupported file, a token out of
// the vocabulary) is a DataError naming manifest:line and the file, or with
// skip_bad it is left out and counted. Samples are taken in file order,
// global_batch per step, wrapping around at the end.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/data_error.h"

namespace maestro {

struct ManifestOptions {
  int64_t vocab = 0;          // token ids must be < vocab (0: not checked)
  std::string vocab_section;  // the section whose vocabulary that is, for the message
  int64_t audio_frames = 0;   // mel frames per clip (the audio encoder's max_frames; 0: the clip's own length)
  bool skip_bad = false;      // data { on_bad_sample = "skip"; }
};

class Manifest {
 public:
  // Reads and checks every line; throws DataError.
  static Manifest load(const std::string& path, const ManifestOptions& options = {});
  // The same from a stream that holds the manifest's text (paths still
  // resolve against `path`'s folder).
  static Manifest parse(std::istream& in, const std::string& path, const ManifestOptions& options = {});

  int64_t size() const { return int64_t(samples_.size()); }
  const std::string& path() const { return path_; }
  // Lines left out with skip_bad, each "manifest:line: reason".
  const std::vector<std::string>& skipped() const { return skipped_; }

  // The samples of `step`: ids step*global_batch + i, taken from file
  // position id % size().
  Batch batch(int64_t step, int64_t global_batch) const;

  // Token ids of the sample with this id.                     [text_tokens]
  const std::vector<int32_t>& tokens(int64_t sample_id) const;

  // Its images then video frames, CLIP-preprocessed.   [images, 3, size, size]
  std::vector<float> pixels(int64_t sample_id, int size) const;

  // Its clip's log-mel spectrogram (empty without audio).   [audio_frames, mel_bins]
  std::vector<float> mel(int64_t sample_id, int mel_bins) const;

 private:
  struct Line {
    int line = 0;
    std::vector<int32_t> tokens;
    std::vector<std::string> images;  // resolved paths: images, then video frames
    int32_t video_frames = 0;
    std::string audio;                // resolved path, empty without audio
    int64_t audio_samples = 0;
  };
  const Line& line_of(int64_t sample_id) const { return samples_[size_t(sample_id % size())]; }
  Sample sample(int64_t id) const;
  std::string path_;
  ManifestOptions options_;
  std::vector<Line> samples_;
  std::vector<std::string> skipped_;
};

}  // namespace maestro
