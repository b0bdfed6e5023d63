// Crash-safe checkpoint folders, their lock and housekeeping (see checkpoint.h).
#include "actors/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

namespace fs = std::filesystem;

namespace maestro {

namespace {

const std::regex kStepName{R"(step-(\d{8,19}))"};
const std::regex kLeftover{R"(\.(tmp-step-\d+|latest|old-step-\d+)-(\d+))"};

// MAESTRO_FAULT_AT=<point>: die here, as a kill -9 would (tests only).
void fault_point(const char* point) {
  static const char* at = std::getenv("MAESTRO_FAULT_AT");
  if (at && std::strcmp(at, point) == 0) ::_exit(kFaultExitStatus);
}

std::string errno_text() { return std::strerror(errno); }

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw CheckpointError(fmt::format("cannot open '{}' to sync it: {}", path, errno_text()));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw CheckpointError(fmt::format("cannot sync '{}' to disk: {}", path, std::strerror(err)));
}

// Writes text to path and fsyncs it; a full disk is an error naming the reason.
void write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw CheckpointError(fmt::format("cannot create '{}': {}", path, errno_text()));
  errno = 0;
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = ok && std::fflush(f) == 0;
  ok = ok && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw CheckpointError(fmt::format("cannot write '{}': {}", path, std::strerror(err ? err : errno)));
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw CheckpointError(fmt::format("cannot rename '{}' to '{}': {}", from, to, errno_text()));
}

// FNV-1a, 64 bits, over a file's bytes: "fnv1a64:HEX".
std::string file_checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(fmt::format("cannot read '{}': {}", path, errno_text()));
  uint64_t h = 0xcbf29ce484222325ULL;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ uint8_t(buf[size_t(i)])) * 0x100000001b3ULL;
  }
  if (in.bad()) throw CheckpointError(fmt::format("cannot read '{}': {}", path, errno_text()));
  return fmt::format("fnv1a64:{:016x}", h);
}

std::string read_latest(const std::string& root) {
  std::ifstream latest(root + "/latest");
  std::string name;
  if (latest) std::getline(latest, name);
  return name;
}

// Points ROOT/latest at `name` by write-then-rename.
void set_latest(const std::string& root, const std::string& name) {
  const std::string staged = fmt::format("{}/.latest-{}", root, ::getpid());
  write_file(staged, name + "\n");
  fault_point("latest-staged");
  rename_or_throw(staged, root + "/latest");
  fsync_path(root);
}

// Removes a folder by first renaming it out of the step-* namespace, so that a
// crash half-way never leaves a partial step folder behind.
void remove_step_folder(const std::string& root, const std::string& path) {
  const std::string doomed = fmt::format("{}/.old-{}-{}", root, fs::path(path).filename().string(), ::getpid());
  std::error_code ec;
  if (std::rename(path.c_str(), doomed.c_str()) == 0) fs::remove_all(doomed, ec);
}

// The step folders under root, newest (highest step) first.
std::vector<std::pair<int64_t, std::string>> step_folders(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (std::regex_match(name, m, kStepName) && e.is_directory(ec) && m[1].length() <= 18)
      out.emplace_back(std::stoll(m[1].str()), name);
  }
  std::sort(out.begin(), out.end(), std::greater<>());
  return out;
}

// Keeps the `keep` newest step folders and the one `latest` names.
void prune(const std::string& root, int64_t keep) {
  if (keep <= 0) return;
  const std::string latest = read_latest(root);
  int64_t kept = 0;
  const auto folders = step_folders(root);
  for (const auto& [step, name] : folders)
    if (name == latest) ++kept;
  for (const auto& [step, name] : folders) {
    if (name == latest) continue;
    if (kept < keep) ++kept;
    else remove_step_folder(root, root + "/" + name);
  }
}

bool pid_alive(long pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM); }

// state.json's fields, each checked; throws CheckpointError naming the file.
CheckpointState parse_state(const std::string& path, const nlohmann::json& j) {
  auto bad = [&](const std::string& why) { return CheckpointError(fmt::format("'{}': {}", path, why)); };
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key)) throw bad(fmt::format("no '{}'", key));
    return j.at(key);
  };
  auto count = [&](const char* key, int64_t min) {
    const nlohmann::json& v = field(key);
    if (!v.is_number_integer()) throw bad(fmt::format("'{}' must be an integer", key));
    if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT64_MAX) : v.get<int64_t>() < min)
      throw bad(fmt::format("'{}' = {} is out of range", key, v.dump()));
    const int64_t n = v.get<int64_t>();
    if (n < min) throw bad(fmt::format("'{}' = {} must be at least {}", key, n, min));
    return n;
  };
  auto seed = [&](const char* key) {
    const nlohmann::json& v = field(key);
    if (!v.is_number_unsigned()) throw bad(fmt::format("'{}' must be a non-negative integer, not {}", key, v.dump()));
    return v.get<uint64_t>();
  };
  if (!j.is_object() || j.value("format", "") != "maestro-checkpoint-1") throw bad("not a maestro checkpoint");
  CheckpointState s;
  s.step = count("step", 0);
  s.global_batch = count("global_batch", 1);
  s.samples = count("samples", 0);
  s.seed = seed("seed");
  s.data_seed = seed("data_seed");
  if (s.step > INT64_MAX / s.global_batch || s.samples != s.step * s.global_batch)
    throw bad(fmt::format("'samples' = {} does not match step {} × global_batch {}", s.samples, s.step, s.global_batch));
  try {
    s.schedule = field("schedule").get<std::string>();
    s.sections = field("sections").get<std::vector<std::string>>();
    s.losses = field("losses").get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    throw bad(e.what());
  }
  if (s.schedule != "wavefront" && s.schedule != "monolithic")
    throw bad(fmt::format("unknown schedule '{}'", s.schedule));
  if (int64_t(s.losses.size()) != s.step)
    throw bad(fmt::format("{} losses for step {}", s.losses.size(), s.step));
  for (const double l : s.losses)
    if (!std::isfinite(l)) throw bad("a loss is not finite");
  for (const std::string& sec : s.sections)
    if (sec.empty() || sec.find('/') != std::string::npos || sec[0] == '.')
      throw bad(fmt::format("bad section name '{}'", sec));
  return s;
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string root, int64_t step, int64_t keep)
    : root_(std::move(root)), keep_(keep) {
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
  fault_point("sections-written");
  nlohmann::json files = nlohmann::json::object();
  for (const std::string& sec : s.sections) {
    fsync_path(section_path(sec));
    files[sec + ".safetensors"] = file_checksum(section_path(sec));
  }
  nlohmann::json j{{"format", "maestro-checkpoint-1"},
                   {"step", s.step},
                   {"samples", s.samples},
                   {"seed", s.seed},
                   {"data_seed", s.data_seed},
                   {"global_batch", s.global_batch},
                   {"schedule", s.schedule},
                   {"sections", s.sections},
                   {"files", files},
                   {"losses", s.losses}};
  write_file(tmp_ + "/state.json", j.dump(1) + "\n");
  fsync_path(tmp_);
  fault_point("staged");

  const std::string step_name = fs::path(final_).filename().string();
  std::error_code ec;
  if (!fs::exists(final_, ec)) {
    rename_or_throw(tmp_, final_);
    committed_ = true;
    fsync_path(root_);
    fault_point("swapped");
    set_latest(root_, step_name);
  } else if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, final_.c_str(), RENAME_EXCHANGE) == 0) {
    // step-N (maybe the one `latest` names) now holds the new checkpoint and
    // tmp_ the replaced one, in one atomic step.
    committed_ = true;
    fsync_path(root_);
    fault_point("swapped");
    set_latest(root_, step_name);
    fault_point("latest");
    fs::remove_all(tmp_, ec);  // a dead run's .tmp-step-N-PID is cleaned at the next start
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    // No atomic exchange on this file system: `latest` names the staged
    // folder while the old step-N is moved away (resolve_checkpoint_dir maps
    // a `latest` naming a vanished .tmp-step-N-PID back to step-N).
    set_latest(root_, fs::path(tmp_).filename().string());
    remove_step_folder(root_, final_);
    rename_or_throw(tmp_, final_);
    committed_ = true;
    fsync_path(root_);
    fault_point("swapped");
    set_latest(root_, step_name);
  } else {
    throw CheckpointError(fmt::format("cannot exchange '{}' with '{}': {}", tmp_, final_, errno_text()));
  }
  fault_point("latest");
  prune(root_, keep_);
  fault_point("committed");
  return final_;
}

CheckpointDirLock::CheckpointDirLock(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw CheckpointError(fmt::format("cannot create the checkpoint folder '{}': {}", root, ec.message()));
  const std::string path = root + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw CheckpointError(fmt::format("cannot open '{}': {}", path, errno_text()));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {0};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) throw CheckpointError(fmt::format("cannot lock '{}': {}", path, std::strerror(err)));
    std::string pid(holder, size_t(std::max<ssize_t>(n, 0)));
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    throw CheckpointBusy(fmt::format("the checkpoint folder '{}' is in use by another run (PID {}, lock {})", root,
                                     pid.empty() ? "unknown" : pid, path));
  }
  const std::string me = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size()))
    throw CheckpointError(fmt::format("cannot write '{}': {}", path, errno_text()));

  // Leftovers of dead runs.
  const std::string latest = read_latest(root);
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (name != latest && std::regex_match(name, m, kLeftover) && !pid_alive(std::stol(m[2].str())))
      fs::remove_all(e.path(), ec);
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::string resolve_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir + "/state.json", ec)) return dir;
  if (!fs::is_directory(dir, ec)) throw CheckpointError(fmt::format("'{}' is not a checkpoint folder", dir));
  auto complete = [](const std::string& step_dir) {
    try {
      read_checkpoint_state(step_dir);
      return true;
    } catch (const CheckpointError&) {
      return false;
    }
  };
  std::string name = read_latest(dir);
  std::smatch m;
  static const std::regex staged{R"(\.tmp-(step-\d+)-\d+)"};
  if (std::regex_match(name, m, staged) && !fs::exists(dir + "/" + name, ec)) name = m[1].str();
  if (!name.empty() && name.find('/') == std::string::npos && complete(dir + "/" + name)) return dir + "/" + name;
  for (const auto& [step, folder] : step_folders(dir))  // `latest` dangling or absent: the newest complete one
    if (complete(dir + "/" + folder)) return dir + "/" + folder;
  throw CheckpointError(fmt::format("'{}' holds no complete checkpoint (no state.json, no usable latest, no "
                                    "complete step-* folder)", dir));
}

CheckpointState read_checkpoint_state(const std::string& step_dir) {
  const std::string path = step_dir + "/state.json";
  std::ifstream in(path);
  if (!in) throw CheckpointError(fmt::format("cannot read '{}': {}", path, errno_text()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(fmt::format("'{}' is damaged: {}", path, e.what()));
  }
  const CheckpointState s = parse_state(path, j);
  std::smatch m;
  const std::string folder = fs::path(step_dir).lexically_normal().filename().string();
  if (std::regex_match(folder, m, kStepName) && (m[1].length() > 18 || std::stoll(m[1].str()) != s.step))
    throw CheckpointError(fmt::format("'{}': 'step' = {} in folder '{}'", path, s.step, folder));
  const nlohmann::json files = j.value("files", nlohmann::json());
  if (!files.is_object()) throw CheckpointError(fmt::format("'{}': no checksums ('files')", path));
  for (const std::string& sec : s.sections) {
    const std::string file = sec + ".safetensors", file_path = step_dir + "/" + file;
    if (!files.contains(file) || !files[file].is_string())
      throw CheckpointError(fmt::format("'{}': no checksum for '{}'", path, file));
    if (std::error_code ec; !fs::exists(file_path, ec)) throw CheckpointError(fmt::format("'{}' is missing", file_path));
    if (file_checksum(file_path) != files[file].get<std::string>())
      throw CheckpointError(fmt::format("'{}' is damaged: its checksum differs from the one in state.json", file_path));
  }
  return s;
}

void check_resumable(const CheckpointState& s, int64_t train_steps, uint64_t data_seed, int64_t global_batch) {
  if (s.step > train_steps)
    throw CheckpointError(fmt::format("the checkpoint is at step {}, beyond the schedule's {} steps (train.steps or "
                                      "--steps)", s.step, train_steps));
  if (s.data_seed != data_seed)
    throw CheckpointError(fmt::format("the checkpoint was trained on data seed {}, the model's data block has seed "
                                      "{}: the resumed run would not see the same data", s.data_seed, data_seed));
  if (s.global_batch != global_batch)
    throw CheckpointError(fmt::format("the checkpoint has global_batch {}, the model {}", s.global_batch, global_batch));
}

}  // namespace maestro
