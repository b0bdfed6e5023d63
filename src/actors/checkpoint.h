// The checkpoint format, its crash-safe commit and the checkpoint folder's
// housekeeping. A checkpoint of step N is a folder ROOT/step-NNNNNNNN holding
// one safetensors file per section (SECTION.safetensors: parameters under the
// section's prefix plus AdamW state) and state.json (the step, the data
// position, the seeds, the schedule, the losses so far, a checksum per
// file). The commit never removes the checkpoint `latest` names before its
// replacement is durable (docs/runtime.md, "Checkpoints and resume"):
//   1. write the files under ROOT/.tmp-step-N-PID, fsync each and the folder;
//   2. move it to step-N (an atomic exchange when step-N exists), fsync ROOT;
//   3. write ROOT/.latest-PID, fsync, rename it over ROOT/latest, fsync ROOT;
//   4. delete the replaced step-N, then prune beyond `keep`.
// MAESTRO_FAULT_AT=<point> makes the process _exit(kFaultExitStatus) at that
// point of the commit (kCommitFaultPoints), for the fault-injection tests.
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

// A checkpoint that failed to write or read (exit status 1 when writing,
// 2 for a checkpoint given to --resume).
struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The commit's fault points, in order, and the status a fault exits with.
inline constexpr const char* kCommitFaultPoints[] = {"sections-written", "staged",  "swapped",
                                                     "latest-staged",    "latest", "committed"};
inline constexpr int kFaultExitStatus = 86;

// Stages one checkpoint in a temporary folder under root.
class CheckpointWriter {
 public:
  // Creates root and the temporary folder. keep: how many step folders to
  // keep after a commit (0 = all); the one `latest` names is never pruned.
  CheckpointWriter(std::string root, int64_t step, int64_t keep = 0);
  ~CheckpointWriter();                                // removes the temporary folder unless committed
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Where a section's file goes before the commit.
  std::string section_path(const std::string& section) const;
  // Writes state.json (with the files' checksums), makes everything durable,
  // moves it into place, updates `latest`, prunes. Returns the final folder.
  // Throws CheckpointError.
  std::string commit(const CheckpointState& state);

 private:
  std::string root_, tmp_, final_;
  int64_t keep_ = 0;
  bool committed_ = false;
};

// Holds an exclusive flock on ROOT/.lock for its lifetime (creating ROOT),
// then removes what dead runs left behind: .tmp-step-*-PID, .latest-PID and
// .old-*-PID entries of PIDs no longer alive (never what `latest` names).
// Throws CheckpointBusy when another process holds the lock.
struct CheckpointBusy : CheckpointError {
  using CheckpointError::CheckpointError;
};
class CheckpointDirLock {
 public:
  explicit CheckpointDirLock(const std::string& root);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

 private:
  int fd_ = -1;
};

// Resolves DIR (a step folder, or a root holding `latest`) to a step folder.
// A root whose `latest` is missing or names no complete checkpoint falls back
// to its newest complete step folder. Throws CheckpointError naming what is
// wrong.
std::string resolve_checkpoint_dir(const std::string& dir);
// Reads and checks state.json field by field and verifies every section
// file's checksum. Throws CheckpointError naming the file.
CheckpointState read_checkpoint_state(const std::string& step_dir);
// Checks a checkpoint against the run resuming from it: the step within the
// schedule, the same data seed and global batch. Throws CheckpointError.
void check_resumable(const CheckpointState& state, int64_t train_steps, uint64_t data_seed, int64_t global_batch);

}  // namespace maestro
