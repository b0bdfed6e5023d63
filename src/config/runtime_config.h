// RuntimeConfig: where and how a program runs — the TOML file given with
// --config (runtime-config.md). Every key has a default, so an absent file
// means "this machine". Parsed with toml++; unknown keys and wrong types are
// errors naming file:line:col.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace maestro {

// Upper bounds (docs/runtime-config, "Limits"): each an error at the key.
inline constexpr int64_t kMaxThreads = 256;    // [runtime] threads
inline constexpr int64_t kMaxDevices = 65536;  // [cluster] devices, devices_per_node, nodes

struct RuntimeConfig {
  struct Runtime {
    std::string backend = "auto";   // auto | cpu | cuda
    int64_t threads = 0;            // CPU worker threads; 0 = all cores
    std::optional<uint64_t> seed;   // overrides train.seed when set
    std::optional<bool> shard_optimizer;  // overrides train's adamw(shard: ...) when set (ZeRO-1)
  } runtime;

  struct Cluster {
    int64_t devices = 0;            // 0 = nodes × devices_per_node (plan, simulate; docs/planner.md)
    std::string device = "auto";    // auto (= h100) | cpu | h100 | h200 | a100 | path to a profile .toml
    int64_t devices_per_node = 8;
    int64_t nodes = 1;
    double intra_node_gbps = 900;   // per device
    double inter_node_gbps = 400;   // per device
    // The nodes' names, in node order (node i = devices [i·devices_per_node,
    // (i+1)·devices_per_node)); given, they set `nodes` to their count.
    // --print plan and --simulate name the hosts each section runs on.
    std::vector<std::string> hosts;
  } cluster;

  struct Transport {
    std::string kind = "auto";      // auto | local | ucx (UCX_TLS picks shm/cma/tcp/rdma: docs/runtime.md)
    std::string rdma_device;        // "" = first found
  } transport;

  struct Trace {
    std::string path;               // "" = none
  } trace;

  struct Repl {
    std::string listen;             // "" = off
    std::string token_file;
  } repl;

  struct Checkpoint {
    std::string dir;                // overrides train.checkpoint.dir
    int64_t keep = 3;               // step folders kept after each checkpoint (0 = all); never the one `latest` names
  } checkpoint;

  std::string file;                 // the TOML file read ("" = defaults only)
};

// Thrown by load_runtime_config on bad input; what() is
// "file:line:col: error: message" (exit status 2 at the CLI).
struct ConfigError : std::exception {
  std::string text;
  explicit ConfigError(std::string t) : text(std::move(t)) {}
  const char* what() const noexcept override { return text.c_str(); }
};

// Reads and checks a TOML file; throws ConfigError.
RuntimeConfig load_runtime_config(const std::string& path);

}  // namespace maestro
