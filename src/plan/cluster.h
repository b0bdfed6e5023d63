// Cluster: the machines a plan targets — one device kind, nodes × devices per
// node, and the per-device link bandwidths inside a node and between nodes —
// built from RuntimeConfig's [cluster] table. Also reads and writes device
// profiles (`device = "path.toml"`, written by --calibrate).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/runtime_config.h"
#include "plan/devices.h"

namespace maestro {

// A plan that cannot be made: bad cluster settings or a section that does
// not fit. what() is the whole message; the CLI prints it and exits 2.
struct PlanError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Cluster {
  DeviceSpec device;
  int64_t devices = 8;
  int64_t devices_per_node = 8;
  double intra_node_bytes_per_s = 900e9;  // per device
  double inter_node_bytes_per_s = 400e9;  // per device
  std::vector<std::string> hosts;  // [nodes()] the nodes' names ([cluster] hosts), or none

  int64_t nodes() const { return (devices + devices_per_node - 1) / devices_per_node; }
  // The names of the hosts devices [first, first + count) are on, in node
  // order; empty when the cluster names none.
  std::vector<std::string> hosts_of(int64_t first, int64_t count) const;
  // Bandwidth of the slowest link inside devices [first, first + count).
  double link_bytes_per_s(int64_t first, int64_t count) const {
    const bool one_node = first / devices_per_node == (first + count - 1) / devices_per_node;
    return one_node ? intra_node_bytes_per_s : inter_node_bytes_per_s;
  }
};

// From [cluster]: device "auto" means h100 (the simulator targets a GPU
// cluster; say "cpu" for this machine's CPU); devices = 0 means nodes ×
// devices_per_node. A device path is relative to the config file's folder.
// Throws PlanError naming the config file on a bad value.
Cluster make_cluster(const RuntimeConfig& config);

// A device profile TOML: name, bf16_tflops, fp32_tflops, memory_gb,
// memory_bandwidth_gbps (GB = 1e9 bytes), fused_attention (default false),
// gemm_max_efficiency and gemm_half_size (default: the GPU curve).
// Throws PlanError naming the file.
DeviceSpec load_device_profile(const std::string& path);
void write_device_profile(const DeviceSpec& device, const std::string& path);

}  // namespace maestro
