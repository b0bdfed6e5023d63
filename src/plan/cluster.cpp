// Cluster from [cluster], and device profiles as TOML (toml++).
#include "plan/cluster.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

// toml++ as Debian ships it: the compiled library (linked through maestro_config).
#define TOML_HEADER_ONLY 0
#define TOML_SHARED_LIB 1
#include <toml++/toml.h>

namespace maestro {

DeviceSpec load_device_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw PlanError(fmt::format("{}: error: cannot read the device profile", path));
  std::stringstream text;
  text << in.rdbuf();
  const std::string content = text.str();
  toml::table t;
  try {
    t = toml::parse(std::string_view(content), path);
  } catch (const toml::parse_error& e) {
    throw PlanError(fmt::format("{}:{}:{}: error: {}", path, e.source().begin.line, e.source().begin.column,
                                e.description()));
  }
  // Rates and sizes: from 1e-3 to 1e6 (TFLOP/s, GB, GB/s), so inf, nan,
  // values past int64 bytes and ones that make a step last 1e297 s are
  // refused rather than simulated.
  auto number = [&](const char* key) {
    const std::optional<double> v = t[key].value<double>();
    if (!v || !(*v >= 1e-3) || !(*v <= 1e6))
      throw PlanError(fmt::format("{}: error: '{}' must be a number from 1e-3 to 1e6", path, key));
    return *v;
  };
  DeviceSpec d;
  d.name = t["name"].value_or(std::string("profile"));
  d.bf16_flops = number("bf16_tflops") * 1e12;
  d.fp32_flops = number("fp32_tflops") * 1e12;
  d.memory_bytes = int64_t(number("memory_gb") * 1e9);
  d.memory_bytes_per_s = number("memory_bandwidth_gbps") * 1e9;
  d.fused_attention = t["fused_attention"].value_or(false);
  d.gemm.max = t["gemm_max_efficiency"].value_or(d.gemm.max);
  d.gemm.half_size = t["gemm_half_size"].value_or(d.gemm.half_size);
  if (!(d.gemm.max >= 1e-3 && d.gemm.max <= 1) || !(d.gemm.half_size >= 0 && d.gemm.half_size <= 1e9))
    throw PlanError(
        fmt::format("{}: error: gemm_max_efficiency must be in [1e-3, 1] and gemm_half_size in [0, 1e9]", path));
  // Optional: attention's efficiency at measured sequence lengths,
  // [[tokens, efficiency], ...] with tokens ascending.
  if (t.contains("attention_efficiency")) {
    const std::string bad = fmt::format(
        "{}: error: attention_efficiency must be 1 to 64 [tokens, efficiency] pairs, tokens ascending from 1 to "
        "1e9, efficiencies in [1e-3, 1]",
        path);
    const toml::array* points = t["attention_efficiency"].as_array();
    if (!points || points->empty() || points->size() > 64) throw PlanError(bad);
    for (const toml::node& p : *points) {
      const toml::array* pair = p.as_array();
      if (!pair || pair->size() != 2) throw PlanError(bad);
      const std::optional<double> tokens = (*pair)[0].value<double>(), e = (*pair)[1].value<double>();
      if (!tokens || !e || !(*tokens >= 1 && *tokens <= 1e9) || !(*e >= 1e-3 && *e <= 1) ||
          (!d.attention.empty() && !(*tokens > d.attention.points.back().first)))
        throw PlanError(bad);
      d.attention.points.emplace_back(*tokens, *e);
    }
  }
  return d;
}

void write_device_profile(const DeviceSpec& d, const std::string& path) {
  toml::table t{{"name", d.name},
                      {"bf16_tflops", d.bf16_flops / 1e12},
                      {"fp32_tflops", d.fp32_flops / 1e12},
                      {"memory_gb", double(d.memory_bytes) / 1e9},
                      {"memory_bandwidth_gbps", d.memory_bytes_per_s / 1e9},
                      {"fused_attention", d.fused_attention},
                      {"gemm_max_efficiency", d.gemm.max},
                      {"gemm_half_size", d.gemm.half_size}};
  if (!d.attention.empty()) {
    toml::array points;
    for (const auto& [tokens, e] : d.attention.points) points.push_back(toml::array{tokens, e});
    t.insert("attention_efficiency", std::move(points));
  }
  std::ofstream out(path);
  out << "# Device profile measured by maestro-run --calibrate; use as [cluster] device = \"" << path << "\"\n"
      << t << "\n";
  if (!out) throw PlanError(fmt::format("{}: error: cannot write the device profile", path));
}

Cluster make_cluster(const RuntimeConfig& config) {
  const RuntimeConfig::Cluster& c = config.cluster;
  const std::string where = config.file.empty() ? "[cluster]" : config.file + ": [cluster]";
  Cluster cl;
  const std::string kind = c.device == "auto" ? "h100" : c.device;
  if (const DeviceSpec* d = find_builtin_device(kind)) {
    cl.device = *d;
  } else if (kind.size() > 5 && kind.ends_with(".toml")) {
    std::filesystem::path p(kind);
    if (p.is_relative() && !config.file.empty()) p = std::filesystem::path(config.file).parent_path() / p;
    cl.device = load_device_profile(p.string());
  } else {
    throw PlanError(fmt::format("{}: error: unknown device '{}' (h100, h200, a100, cpu or a profile .toml)", where,
                                c.device));
  }
  if (c.devices_per_node < 1 || c.nodes < 1 || c.devices < 0)
    throw PlanError(fmt::format("{}: error: devices, nodes and devices_per_node must be positive", where));
  if (!(c.intra_node_gbps > 0) || !(c.inter_node_gbps > 0))
    throw PlanError(fmt::format("{}: error: link bandwidths must be positive", where));
  cl.devices_per_node = c.devices_per_node;
  cl.devices = c.devices > 0 ? c.devices : c.nodes * c.devices_per_node;
  cl.intra_node_bytes_per_s = c.intra_node_gbps * 1e9;
  cl.inter_node_bytes_per_s = c.inter_node_gbps * 1e9;
  if (!c.hosts.empty() && int64_t(c.hosts.size()) != cl.nodes())
    throw PlanError(fmt::format("{}: error: hosts names {} node(s) but the cluster has {}", where, c.hosts.size(),
                                cl.nodes()));
  cl.hosts = c.hosts;
  return cl;
}

std::vector<std::string> Cluster::hosts_of(int64_t first, int64_t count) const {
  std::vector<std::string> out;
  if (hosts.empty() || count <= 0) return out;
  for (int64_t n = first / devices_per_node; n <= (first + count - 1) / devices_per_node && n < int64_t(hosts.size()); ++n)
    out.push_back(hosts[size_t(n)]);
  return out;
}

}  // namespace maestro
