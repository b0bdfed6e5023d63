// Atomic checkpoint folders (see checkpoint.h).
#include "actors/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace maestro {

namespace {

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw CheckpointError(fmt::format("cannot open '{}' to sync it", path));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw CheckpointError(fmt::format("cannot sync '{}' to disk", path));
}

// Writes text to path via a FILE* so that a full disk shows up as an error.
void write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw CheckpointError(fmt::format("cannot create '{}'", path));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (::fsync(::fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw CheckpointError(fmt::format("cannot write '{}' (disk full?)", path));
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string root, int64_t step) : root_(std::move(root)) {
  final_ = fmt::format("{}/step-{:08d}", root_, step);
  tmp_ = fmt::format("{}/.tmp-step-{:08d}-{}", root_, step, ::getpid());
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) throw CheckpointError(fmt::format("cannot create the checkpoint folder '{}': {}", root_, ec.message()));
  fs::remove_all(tmp_, ec);
  if (!fs::create_directory(tmp_, ec) || ec)
    throw CheckpointError(fmt::format("cannot create '{}': {}", tmp_, ec.message()));
}

CheckpointWriter::~CheckpointWriter() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

std::string CheckpointWriter::section_path(const std::string& section) const {
  return fmt::format("{}/{}.safetensors", tmp_, section);
}

std::string CheckpointWriter::commit(const CheckpointState& s) {
  nlohmann::json j{{"format", "maestro-checkpoint-1"},
                   {"step", s.step},
                   {"samples", s.samples},
                   {"seed", s.seed},
                   {"data_seed", s.data_seed},
                   {"global_batch", s.global_batch},
                   {"schedule", s.schedule},
                   {"sections", s.sections},
                   {"losses", s.losses}};
  write_file(tmp_ + "/state.json", j.dump(1) + "\n");
  for (const std::string& sec : s.sections) fsync_path(section_path(sec));
  fsync_path(tmp_);
  std::error_code ec;
  fs::remove_all(final_, ec);  // a stale folder of the same step (an earlier, longer run)
  fs::rename(tmp_, final_, ec);
  if (ec) throw CheckpointError(fmt::format("cannot rename '{}' to '{}': {}", tmp_, final_, ec.message()));
  committed_ = true;
  const std::string latest_tmp = fmt::format("{}/.latest-{}", root_, ::getpid());
  write_file(latest_tmp, fs::path(final_).filename().string() + "\n");
  fs::rename(latest_tmp, root_ + "/latest", ec);
  if (ec) throw CheckpointError(fmt::format("cannot update '{}/latest': {}", root_, ec.message()));
  fsync_path(root_);
  return final_;
}

std::string resolve_checkpoint_dir(const std::string& dir) {
  if (fs::exists(dir + "/state.json")) return dir;
  std::ifstream latest(dir + "/latest");
  std::string name;
  if (latest && std::getline(latest, name) && !name.empty() && fs::exists(dir + "/" + name + "/state.json"))
    return dir + "/" + name;
  throw CheckpointError(fmt::format("'{}' is not a checkpoint (no state.json, no latest)", dir));
}

CheckpointState read_checkpoint_state(const std::string& step_dir) {
  const std::string path = step_dir + "/state.json";
  std::ifstream in(path);
  if (!in) throw CheckpointError(fmt::format("cannot read '{}'", path));
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.value("format", "") != "maestro-checkpoint-1")
      throw CheckpointError(fmt::format("'{}' is not a maestro checkpoint", path));
    CheckpointState s;
    s.step = j.at("step").get<int64_t>();
    s.samples = j.at("samples").get<int64_t>();
    s.seed = j.at("seed").get<uint64_t>();
    s.data_seed = j.at("data_seed").get<uint64_t>();
    s.global_batch = j.at("global_batch").get<int64_t>();
    s.schedule = j.at("schedule").get<std::string>();
    s.sections = j.at("sections").get<std::vector<std::string>>();
    s.losses = j.at("losses").get<std::vector<double>>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(fmt::format("'{}' is damaged: {}", path, e.what()));
  }
}

}  // namespace maestro
