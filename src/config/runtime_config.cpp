// load_runtime_config: the TOML file of runtime-config.md → RuntimeConfig.
// Every table and key is checked against the contract; any surprise (unknown
// table or key, wrong type, value out of range, unknown enum word) is a
// ConfigError pointing at the offending key or value.
#include "config/runtime_config.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

namespace maestro {

namespace {

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const toml::source_region& at, const std::string& message) const {
    throw ConfigError(fmt::format("{}:{}:{}: error: {}", file_, at.begin.line, at.begin.column, message));
  }

  // Calls `on_key(name, node)` for each key of `table`; an unknown one is an error.
  template <typename OnKey>
  void keys(const toml::table& table, const std::string& where, std::initializer_list<const char*> known,
            OnKey on_key) const {
    for (auto&& [key, node] : table) {
      const std::string name(key.str());
      bool found = false;
      for (const char* k : known) found = found || name == k;
      if (!found) fail(key.source(), fmt::format("unknown key '{}' in [{}]; expected one of {}", name, where, list(known)));
      on_key(name, node);
    }
  }

  int64_t integer(const toml::node& node, const std::string& key, int64_t min, int64_t max = INT64_MAX) const {
    const auto* v = node.as_integer();
    if (!v) fail(node.source(), fmt::format("'{}' must be an integer, not {}", key, type_name(node)));
    if (v->get() < min) fail(node.source(), fmt::format("'{}' must be at least {}, got {}", key, min, v->get()));
    if (v->get() > max) fail(node.source(), fmt::format("'{}' must be at most {}, got {}", key, max, v->get()));
    return v->get();
  }

  // A link bandwidth in GB/s, from 1e-3 (1 MB/s: below any real link; a
  // smaller one turns a step into 1e297 s) to 1e6 (inf would make every
  // transfer free).
  static constexpr double kMinGbps = 1e-3, kMaxGbps = 1e6;
  double positive_number(const toml::node& node, const std::string& key) const {
    double value = 0;
    if (const auto* i = node.as_integer()) value = double(i->get());
    else if (const auto* f = node.as_floating_point()) value = f->get();
    else fail(node.source(), fmt::format("'{}' must be a number, not {}", key, type_name(node)));
    if (!(value > 0)) fail(node.source(), fmt::format("'{}' must be positive, got {}", key, value));
    if (value < kMinGbps) fail(node.source(), fmt::format("'{}' must be at least {}, got {}", key, kMinGbps, value));
    if (!(value <= kMaxGbps)) fail(node.source(), fmt::format("'{}' must be at most {}, got {}", key, kMaxGbps, value));
    return value;
  }

  bool boolean(const toml::node& node, const std::string& key) const {
    const auto* v = node.as_boolean();
    if (!v) fail(node.source(), fmt::format("'{}' must be true or false, not {}", key, type_name(node)));
    return v->get();
  }

  std::string string(const toml::node& node, const std::string& key) const {
    const auto* v = node.as_string();
    if (!v) fail(node.source(), fmt::format("'{}' must be a string, not {}", key, type_name(node)));
    return v->get();
  }

  std::string one_of(const toml::node& node, const std::string& key, std::initializer_list<const char*> words) const {
    std::string value = string(node, key);
    for (const char* w : words)
      if (value == w) return value;
    fail(node.source(), fmt::format("'{}' must be one of {}, got \"{}\"", key, list(words), value));
  }

  const toml::table& table(const toml::node& node, const std::string& name) const {
    const auto* t = node.as_table();
    if (!t) fail(node.source(), fmt::format("'{}' must be a table [{}], not {}", name, name, type_name(node)));
    return *t;
  }

  const std::string& file() const { return file_; }

 private:
  static std::string list(std::initializer_list<const char*> words) {
    std::string out;
    for (const char* w : words) out += (out.empty() ? "" : ", ") + std::string(w);
    return out;
  }

  static std::string type_name(const toml::node& node) {
    switch (node.type()) {
      case toml::node_type::table: return "a table";
      case toml::node_type::array: return "an array";
      case toml::node_type::string: return "a string";
      case toml::node_type::integer: return "an integer";
      case toml::node_type::floating_point: return "a number with a fraction";
      case toml::node_type::boolean: return "a boolean";
      default: return "a date or time";
    }
  }

  std::string file_;
};

void read_runtime(const Reader& r, const toml::table& t, RuntimeConfig::Runtime& out) {
  r.keys(t, "runtime", {"backend", "threads", "seed", "shard_optimizer"}, [&](const std::string& k, const toml::node& v) {
    if (k == "backend") out.backend = r.one_of(v, k, {"auto", "cpu", "cuda"});
    else if (k == "threads") out.threads = r.integer(v, k, 0, kMaxThreads);
    else if (k == "shard_optimizer") out.shard_optimizer = r.boolean(v, k);
    else out.seed = uint64_t(r.integer(v, k, 0));
  });
}

// `hosts`: distinct names without blanks, one per node (an empty list: no
// names); `nodes` and `devices` given too must agree with their count.
void read_hosts(const Reader& r, const toml::node& v, RuntimeConfig::Cluster& out) {
  const auto* a = v.as_array();
  if (!a) r.fail(v.source(), "'hosts' must be an array of host names, e.g. [\"node1\", \"node2\"]");
  out.hosts.clear();
  for (const toml::node& h : *a) {
    const std::string name = r.string(h, "hosts");
    if (name.empty() || name.find_first_of(" \t\n,") != std::string::npos)
      r.fail(h.source(), fmt::format("host name \"{}\" must be non-empty, without blanks or commas", name));
    for (const std::string& seen : out.hosts)
      if (seen == name) r.fail(h.source(), fmt::format("host \"{}\" is listed twice (one entry per node)", name));
    out.hosts.push_back(name);
  }
}

void read_cluster(const Reader& r, const toml::table& t, RuntimeConfig::Cluster& out) {
  const toml::node* nodes_key = nullptr;
  const toml::node* hosts_key = nullptr;
  r.keys(t, "cluster", {"devices", "device", "devices_per_node", "nodes", "intra_node_gbps", "inter_node_gbps", "hosts"},
         [&](const std::string& k, const toml::node& v) {
           if (k == "devices") out.devices = r.integer(v, k, 0, kMaxDevices);
           else if (k == "device") {
             out.device = r.string(v, k);
             // a device profile .toml (written by --calibrate), relative to this file
             if (out.device.ends_with(".toml")) {
               const std::filesystem::path p(out.device);
               out.device = (p.is_absolute() ? p : std::filesystem::path(r.file()).parent_path() / p).string();
               std::error_code ec;
               if (!std::filesystem::is_regular_file(out.device, ec))
                 r.fail(v.source(), fmt::format("the device profile '{}' does not exist (a path is relative to this "
                                                "file; write one with --calibrate)", out.device));
             } else {
               out.device = r.one_of(v, k, {"auto", "cpu", "h100", "h200", "a100"});
             }
           } else if (k == "devices_per_node") out.devices_per_node = r.integer(v, k, 1, kMaxDevices);
           else if (k == "nodes") out.nodes = r.integer(v, k, 1, kMaxDevices), nodes_key = &v;
           else if (k == "hosts") read_hosts(r, v, out), hosts_key = &v;
           else if (k == "intra_node_gbps") out.intra_node_gbps = r.positive_number(v, k);
           else out.inter_node_gbps = r.positive_number(v, k);
         });
  if (!hosts_key || out.hosts.empty()) return;
  const auto hosts = int64_t(out.hosts.size());
  if (nodes_key && out.nodes != hosts)
    r.fail(nodes_key->source(), fmt::format("'nodes' = {} but 'hosts' names {} (one per node)", out.nodes, hosts));
  out.nodes = hosts;
  if (out.devices > 0 && (out.devices + out.devices_per_node - 1) / out.devices_per_node != hosts)
    r.fail(hosts_key->source(), fmt::format("'hosts' names {} node(s) but {} devices at {} per node fill {}", hosts,
                                            out.devices, out.devices_per_node,
                                            (out.devices + out.devices_per_node - 1) / out.devices_per_node));
}

}  // namespace

RuntimeConfig load_runtime_config(const std::string& path) {
  RuntimeConfig config;
  if (path.empty()) return config;
  config.file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(fmt::format("{}: error: is a folder, not a config file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: error: cannot open the config file", path));
  std::stringstream text;
  text << in.rdbuf();
  const std::string source = text.str();

  toml::table root;
  try {
    root = toml::parse(std::string_view(source), path);
  } catch (const toml::parse_error& e) {
    throw ConfigError(fmt::format("{}:{}:{}: error: {}", path, e.source().begin.line, e.source().begin.column,
                                  e.description()));
  }

  const Reader r(path);
  r.keys(root, "the top level", {"runtime", "cluster", "transport", "trace", "repl", "checkpoint"},
         [&](const std::string& k, const toml::node& v) {
           const toml::table& t = r.table(v, k);
           if (k == "runtime") read_runtime(r, t, config.runtime);
           else if (k == "cluster") read_cluster(r, t, config.cluster);
           else if (k == "transport")
             r.keys(t, k, {"kind", "rdma_device"}, [&](const std::string& key, const toml::node& n) {
               if (key == "kind") {
                 // The old names are UCX transports now (docs/runtime.md, "UCX transfer engine").
                 const std::string old = n.value_or(std::string());
                 if (old == "shm" || old == "tcp" || old == "rdma")
                   r.fail(n.source(), fmt::format("'kind' = \"{}\" is now kind = \"ucx\" with UCX_TLS={} in the "
                                                  "environment",
                                                  old, old == "shm" ? "sm,cma,self" : old == "tcp" ? "tcp,self" : "rc,sm,self"));
                 config.transport.kind = r.one_of(n, key, {"auto", "local", "ucx"});
               }
               else config.transport.rdma_device = r.string(n, key);
             });
           else if (k == "trace")
             r.keys(t, k, {"path"}, [&](const std::string& key, const toml::node& n) { config.trace.path = r.string(n, key); });
           else if (k == "repl")
             r.keys(t, k, {"listen", "token_file"}, [&](const std::string& key, const toml::node& n) {
               if (key == "listen") config.repl.listen = r.string(n, key);
               else config.repl.token_file = r.string(n, key);
             });
           else
             r.keys(t, k, {"dir", "keep"}, [&](const std::string& key, const toml::node& n) {
               if (key == "dir") config.checkpoint.dir = r.string(n, key);
               else config.checkpoint.keep = r.integer(n, key, 0, 1'000'000);
             });
         });
  return config;
}

}  // namespace maestro
