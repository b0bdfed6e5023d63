// The checkpoint format and its atomic commit. A checkpoint of step N is a
// folder ROOT/step-NNNNNNNN holding one safetensors file per section
// (SECTION.safetensors: parameters under the section's prefix plus AdamW
// state) and state.json (the step, the data position, the seed, the
// schedule, the losses so far). It is written under a temporary name, every
// file fsync'ed, then renamed into place and ROOT/latest updated the same
// way: a run killed at any moment leaves either the previous checkpoint or
// the new one, never half of one.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace maestro {

struct CheckpointState {
  int64_t step = 0;             // steps completed; training resumes at this step index
  int64_t samples = 0;          // data position: samples consumed so far
  uint64_t seed = 0;            // train seed (runtime.seed applied)
  uint64_t data_seed = 0;       // synthetic(seed) of the data block
  int64_t global_batch = 0;
  std::string schedule;         // "wavefront" | "monolithic"
  std::vector<std::string> sections;  // sections with a file in the folder
  std::vector<double> losses;   // per completed step, from step 0
};

// A checkpoint that failed to write or read (exit status 1).
struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Stages one checkpoint in a temporary folder under root.
class CheckpointWriter {
 public:
  CheckpointWriter(std::string root, int64_t step);  // creates root and the temporary folder
  ~CheckpointWriter();                                // removes the temporary folder unless committed
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Where a section's file goes before the commit.
  std::string section_path(const std::string& section) const;
  // Writes state.json, fsyncs everything, renames into place, updates
  // `latest`. Returns the final folder. Throws CheckpointError.
  std::string commit(const CheckpointState& state);

 private:
  std::string root_, tmp_, final_;
  bool committed_ = false;
};

// Resolves DIR (a step folder, or a root holding `latest`) to a step folder
// and reads its state.json. Throws CheckpointError naming what is wrong.
std::string resolve_checkpoint_dir(const std::string& dir);
CheckpointState read_checkpoint_state(const std::string& step_dir);

}  // namespace maestro
