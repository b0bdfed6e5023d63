// load_runtime_config: defaults, every key read, and every kind of bad input
// reported as file:line:col.
#define BOOST_TEST_MODULE config
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include "config/runtime_config.h"

using namespace maestro;

namespace {

// Writes `text` to a fresh file under the temp folder and returns its path.
std::string write_toml(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "maestro_config_test";
  std::filesystem::create_directories(dir);
  const auto path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

// The ConfigError message of loading `text`.
std::string error_of(const std::string& name, const std::string& text) {
  const std::string path = write_toml(name, text);
  try {
    load_runtime_config(path);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

BOOST_AUTO_TEST_CASE(no_file_means_defaults) {
  const RuntimeConfig c = load_runtime_config("");
  BOOST_TEST(c.runtime.backend == "auto");
  BOOST_TEST(c.runtime.threads == 0);
  BOOST_TEST(!c.runtime.seed.has_value());
  BOOST_TEST(!c.runtime.shard_optimizer.has_value());
  BOOST_TEST(c.cluster.devices == 0);
  BOOST_TEST(c.cluster.device == "auto");
  BOOST_TEST(c.cluster.devices_per_node == 8);
  BOOST_TEST(c.cluster.nodes == 1);
  BOOST_TEST(c.cluster.intra_node_gbps == 900.0);
  BOOST_TEST(c.cluster.inter_node_gbps == 400.0);
  BOOST_TEST(c.transport.kind == "auto");
  BOOST_TEST(c.transport.rdma_device == "");
  BOOST_TEST(c.trace.path == "");
  BOOST_TEST(c.repl.listen == "");
  BOOST_TEST(c.checkpoint.dir == "");
  BOOST_TEST(c.file == "");
}

BOOST_AUTO_TEST_CASE(the_example_config_is_the_defaults) {
  const RuntimeConfig c = load_runtime_config(MAESTRO_DEFAULT_CONFIG);
  const RuntimeConfig d;
  BOOST_TEST(c.runtime.backend == d.runtime.backend);
  BOOST_TEST(c.cluster.devices_per_node == d.cluster.devices_per_node);
  BOOST_TEST(c.cluster.hosts == d.cluster.hosts);
  BOOST_TEST(c.cluster.intra_node_gbps == d.cluster.intra_node_gbps);
  BOOST_TEST(c.transport.kind == d.transport.kind);
}

BOOST_AUTO_TEST_CASE(every_key_is_read) {
  const RuntimeConfig c = load_runtime_config(write_toml("all.toml", R"(
[runtime]
backend = "cpu"
threads = 3
seed = 42
shard_optimizer = true
[cluster]
devices = 16
device = "h100"
devices_per_node = 4
nodes = 4
intra_node_gbps = 450.5
inter_node_gbps = 200
hosts = ["n1", "n2", "n3", "n4"]
[transport]
kind = "ucx"
rdma_device = "mlx5_0"
[trace]
path = "run.json"
[repl]
listen = "127.0.0.1:4242"
token_file = "tok"
[checkpoint]
dir = "ck"
)"));
  BOOST_TEST(c.runtime.backend == "cpu");
  BOOST_TEST(c.runtime.threads == 3);
  BOOST_TEST(c.runtime.seed.value() == 42u);
  BOOST_TEST(c.runtime.shard_optimizer.value());
  BOOST_TEST(c.cluster.devices == 16);
  BOOST_TEST(c.cluster.device == "h100");
  BOOST_TEST(c.cluster.devices_per_node == 4);
  BOOST_TEST(c.cluster.nodes == 4);
  BOOST_TEST(c.cluster.intra_node_gbps == 450.5);
  BOOST_TEST(c.cluster.inter_node_gbps == 200.0);
  BOOST_TEST(c.cluster.hosts == (std::vector<std::string>{"n1", "n2", "n3", "n4"}));
  BOOST_TEST(c.transport.kind == "ucx");
  BOOST_TEST(c.transport.rdma_device == "mlx5_0");
  BOOST_TEST(c.trace.path == "run.json");
  BOOST_TEST(c.repl.listen == "127.0.0.1:4242");
  BOOST_TEST(c.repl.token_file == "tok");
  BOOST_TEST(c.checkpoint.dir == "ck");
}

// hosts name the nodes: they set `nodes`, and `nodes` or `devices` that
// disagree with them, duplicates, blanks and non-strings are errors at the key.
BOOST_AUTO_TEST_CASE(hosts_name_the_nodes) {
  RuntimeConfig c = load_runtime_config(
      write_toml("hosts.toml", "[cluster]\ndevices_per_node = 4\nhosts = [\"node1\", \"node2\", \"gpu-3\"]\n"));
  BOOST_TEST(c.cluster.hosts == (std::vector<std::string>{"node1", "node2", "gpu-3"}));
  BOOST_TEST(c.cluster.nodes == 3);
  c = load_runtime_config(write_toml("hosts_ok.toml", "[cluster]\nnodes = 2\ndevices = 12\nhosts = [\"a\", \"b\"]\n"));
  BOOST_TEST(c.cluster.nodes == 2);
  BOOST_TEST(load_runtime_config(write_toml("hosts_none.toml", "[cluster]\nhosts = []\n")).cluster.hosts.empty());
  std::string e = error_of("hosts_nodes.toml", "[cluster]\nnodes = 3\nhosts = [\"a\", \"b\"]\n");
  BOOST_TEST(e.find("hosts_nodes.toml:2:9: error: 'nodes' = 3 but 'hosts' names 2 (one per node)") != std::string::npos, e);
  e = error_of("hosts_devices.toml", "[cluster]\ndevices = 24\nhosts = [\"a\", \"b\"]\n");
  BOOST_TEST(e.find("hosts_devices.toml:3:9: error: 'hosts' names 2 node(s) but 24 devices at 8 per node fill 3") !=
                 std::string::npos,
             e);
  e = error_of("hosts_twice.toml", "[cluster]\nhosts = [\"a\", \"a\"]\n");
  BOOST_TEST(e.find("hosts_twice.toml:2:15: error: host \"a\" is listed twice") != std::string::npos, e);
  e = error_of("hosts_blank.toml", "[cluster]\nhosts = [\"a b\"]\n");
  BOOST_TEST(e.find("hosts_blank.toml:2:10: error: host name \"a b\" must be non-empty") != std::string::npos, e);
  e = error_of("hosts_type.toml", "[cluster]\nhosts = \"a\"\n");
  BOOST_TEST(e.find("hosts_type.toml:2:9: error: 'hosts' must be an array") != std::string::npos, e);
  e = error_of("hosts_int.toml", "[cluster]\nhosts = [1]\n");
  BOOST_TEST(e.find("hosts_int.toml:2:10: error: 'hosts' must be a string, not an integer") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(device_profile_path_is_relative_to_the_file) {
  const std::string path = write_toml("profile.toml", "[cluster]\ndevice = \"prof/my_gpu.toml\"\n");
  std::filesystem::create_directories(std::filesystem::path(path).parent_path() / "prof");
  write_toml("prof/my_gpu.toml", "");
  const RuntimeConfig c = load_runtime_config(path);
  BOOST_TEST(c.cluster.device == (std::filesystem::path(path).parent_path() / "prof/my_gpu.toml").string());
}

BOOST_AUTO_TEST_CASE(bad_enum_value) {
  const std::string e = error_of("enum.toml", "[runtime]\nbackend = \"gpu\"\n");
  BOOST_TEST(e.find("enum.toml:2:11: error: 'backend' must be one of auto, cpu, cuda, got \"gpu\"") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(old_transport_names_say_their_ucx_tls) {
  const std::string e = error_of("old.toml", "[transport]\nkind = \"shm\"\n");
  BOOST_TEST(e.find("old.toml:2:8: error: 'kind' = \"shm\" is now kind = \"ucx\" with UCX_TLS=sm,cma,self") !=
                 std::string::npos,
             e);
  BOOST_TEST(error_of("bad.toml", "[transport]\nkind = \"nccl\"\n").find("one of auto, local, ucx") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(unknown_key_and_table) {
  std::string e = error_of("key.toml", "[cluster]\nnodes = 2\ndevics = 4\n");
  BOOST_TEST(e.find("key.toml:3:1: error: unknown key 'devics' in [cluster]") != std::string::npos, e);
  e = error_of("table.toml", "\n[gpu]\nx = 1\n");
  BOOST_TEST(e.find("table.toml:2:2: error: unknown key 'gpu' in [the top level]") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(wrong_types_and_ranges) {
  std::string e = error_of("type.toml", "[cluster]\ndevices = \"8\"\n");
  BOOST_TEST(e.find("type.toml:2:11: error: 'devices' must be an integer, not a string") != std::string::npos, e);
  e = error_of("range.toml", "[cluster]\nnodes = 0\n");
  BOOST_TEST(e.find("range.toml:2:9: error: 'nodes' must be at least 1, got 0") != std::string::npos, e);
  e = error_of("gbps.toml", "[cluster]\ninter_node_gbps = true\n");
  BOOST_TEST(e.find("gbps.toml:2:19: error: 'inter_node_gbps' must be a number") != std::string::npos, e);
  e = error_of("inf.toml", "[cluster]\ninter_node_gbps = inf\n");
  BOOST_TEST(e.find("inf.toml:2:19: error: 'inter_node_gbps' must be at most 1000000, got inf") != std::string::npos, e);
  e = error_of("slow.toml", "[cluster]\nintra_node_gbps = 1e-300\n");
  BOOST_TEST(e.find("slow.toml:2:19: error: 'intra_node_gbps' must be at least 0.001, got 1e-300") != std::string::npos, e);
  e = error_of("shard.toml", "[runtime]\nshard_optimizer = \"auto\"\n");
  BOOST_TEST(e.find("shard.toml:2:19: error: 'shard_optimizer' must be true or false, not a string") != std::string::npos, e);
  e = error_of("notable.toml", "runtime = 3\n");
  BOOST_TEST(e.find("notable.toml:1:11: error: 'runtime' must be a table") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(syntax_error_and_missing_file) {
  const std::string e = error_of("syntax.toml", "[runtime]\nthreads = = 3\n");
  BOOST_TEST(e.find("syntax.toml:2:") != std::string::npos, e);
  BOOST_TEST(e.find(": error: ") != std::string::npos, e);
  BOOST_CHECK_THROW(load_runtime_config("/nonexistent/maestro.toml"), ConfigError);
}

BOOST_AUTO_TEST_CASE(a_missing_device_profile_is_an_error_at_the_key) {
  const std::string path = write_toml("no_profile.toml", "[cluster]\ndevice = \"absent/gpu.toml\"\n");
  BOOST_CHECK_THROW(load_runtime_config(path), ConfigError);
}

BOOST_AUTO_TEST_CASE(upper_bounds) {
  for (const char* text : {"[runtime]\nthreads = 257\n", "[cluster]\ndevices = 1000000000\n",
                           "[cluster]\nnodes = 65537\n", "[checkpoint]\nkeep = 1000001\n"})
    BOOST_CHECK_THROW(load_runtime_config(write_toml("bounds.toml", text)), ConfigError);
  BOOST_TEST(load_runtime_config(write_toml("bounds.toml", "[runtime]\nthreads = 256\n")).runtime.threads == 256);
}

BOOST_AUTO_TEST_CASE(a_folder_is_not_a_config_file) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  try {
    load_runtime_config(dir);
    BOOST_FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    BOOST_TEST(std::string(e.what()) == dir + ": error: is a folder, not a config file");
  }
}
