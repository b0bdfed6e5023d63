// maestro-run over several processes (docs/runtime.md, "Processes and
// hosts"): tiny_mllm and tiny_kd over 3 processes give the 1-process
// losses, over UCX's TCP and over shared memory, with ZeRO-1 on and off,
// and with the LLM in 2 pipeline stages;
// workers started by hand join a --listen coordinator; a garbage client and
// a worker of another build are refused while the run goes on; a worker
// killed with -9 mid-run ends it with exit 1 naming the worker, and
// --resume on fresh processes continues with the uninterrupted losses. All
// traffic on loopback; every wait bounded.
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "run_process.h"

extern char** environ;

using namespace maestro::e2e;
namespace fs = std::filesystem;

namespace {

// A config whose 4 CPU slots give the tiny models' auto sections dp > 1, so
// a section's replicas spread over the processes and reduce across them.
std::string config(bool shard = false) {
  const auto path = (fs::temp_directory_path() / (shard ? "procs_shard.toml" : "procs.toml")).string();
  std::ofstream(path) << "[runtime]\nthreads = 4\n" << (shard ? "shard_optimizer = true\n" : "");
  return path;
}

// The --json summary: stdout's last line (null when it is not JSON).
nlohmann::json summary_of(const ProcessResult& r) {
  std::string t = r.out;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return nlohmann::json::parse(t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1), nullptr, false);
}

std::vector<double> losses_of(const ProcessResult& r) {
  try {
    return summary_of(r).at("losses").get<std::vector<double>>();
  } catch (const std::exception&) {
    return {};
  }
}

struct Env {  // UCX_TLS for the runs of one scope
  explicit Env(const char* tls) { ::setenv("UCX_TLS", tls, 1); }
  ~Env() { ::unsetenv("UCX_TLS"); }
};

void same_losses(const std::vector<double>& a, const std::vector<double>& b) {
  BOOST_TEST_REQUIRE(a.size() == b.size());
  BOOST_TEST_REQUIRE(!a.empty());
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(std::abs(a[i] - b[i]) <= 1e-5 * std::abs(b[i]), "step " << i << ": " << a[i] << " vs " << b[i]);
}

ProcessResult train(const std::string& model, int processes, const std::vector<std::string>& extra = {},
                    bool shard = false) {
  std::vector<std::string> args = {model, "--config", config(shard), "--steps", "3", "--json", "--quiet"};
  if (processes > 1) args.insert(args.end(), {"--processes", std::to_string(processes)});
  args.insert(args.end(), extra.begin(), extra.end());
  return maestro_run(args);
}

// A child maestro-run in the background, output to files.
struct Background {
  pid_t pid = -1;
  std::string out_path, err_path;
  explicit Background(const std::vector<std::string>& args, const std::string& tag) {
    out_path = (fs::temp_directory_path() / ("procs_" + tag + ".out")).string();
    err_path = (fs::temp_directory_path() / ("procs_" + tag + ".err")).string();
    std::vector<std::string> all = {maestro_run_path()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
  }
  // The exit status, or -1 when it is still running after `seconds`.
  int wait(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (pid > 0) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() > end) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  // What a failed check prints: the status, stderr and the end of stdout
  // (UCX logs to stdout unless UCX_LOG_FILE says otherwise).
  std::string report(int status) const {
    const std::string o = out();
    return "status " + std::to_string(status) + "; stderr: " + err() +
           "; stdout ends: " + o.substr(o.size() > 2000 ? o.size() - 2000 : 0);
  }
  std::string out() const { return slurp(out_path); }
  std::string err() const { return slurp(err_path); }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  ~Background() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// The children of `parent` (from /proc).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(pid_t(std::stol(name)));
  }
  return out;
}

// Waits (bounded) for `text` in the file.
bool wait_for_text(const std::string& path, const std::string& text, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (Background::slurp(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A loopback port nobody listens on now (bound, then released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Connects to the port (retrying for up to 20 s while it is not open yet),
// writes `bytes` and closes: a peer that speaks no protocol.
bool send_garbage(int port, const std::string& bytes) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < end) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      const bool ok = ::write(fd, bytes.data(), bytes.size()) == ssize_t(bytes.size());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ::close(fd);
      return ok;
    }
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(processes)

BOOST_AUTO_TEST_CASE(three_processes_match_one_over_tcp_and_shared_memory) {
  for (const char* model : {"models/tiny_mllm.sect", "models/tiny_kd.sect"}) {
    const ProcessResult one = train(model, 1);
    BOOST_TEST_REQUIRE(one.status == 0, one.err);
    for (const char* tls : {"tcp", "cma,sysv,self"}) {
      Env env(tls);
      const ProcessResult three = train(model, 3);
      BOOST_TEST_REQUIRE(three.status == 0, model << " over " << tls << ": " << three.err);
      same_losses(losses_of(three), losses_of(one));
      BOOST_TEST(three.out.find(std::string("\"transport\":\"ucx (UCX_TLS=") + tls) != std::string::npos, three.out);
      // The flow tensors the coordinator's replicas produced reached the workers by UCX puts.
      const nlohmann::json summary = summary_of(three);
      BOOST_TEST(summary.value("tensor_puts", 0) > 0, three.out);
      BOOST_TEST(summary.value("tensor_bytes_put", 0) > 0, three.out);
    }
  }
}

BOOST_AUTO_TEST_CASE(zero1_over_processes_matches_unsharded) {
  Env env("tcp");
  for (const char* model : {"models/tiny_mllm.sect", "models/tiny_kd.sect"}) {
    const ProcessResult off = train(model, 3);
    const ProcessResult on = train(model, 3, {}, true);
    BOOST_TEST_REQUIRE(off.status == 0, off.err);
    BOOST_TEST_REQUIRE(on.status == 0, on.err);
    same_losses(losses_of(on), losses_of(off));
  }
}

BOOST_AUTO_TEST_CASE(print_plan_shows_the_placement) {
  const ProcessResult r = maestro_run({"models/tiny_mllm.sect", "--config", config(), "--processes", "3", "--print", "plan"});
  BOOST_TEST(r.status == 0, r.err);
  BOOST_TEST(r.out.find("process 1:") != std::string::npos, r.out);
}

// [cluster] device = "cpu" describes the run's own machines: the run is
// planned on 3 one-slot nodes, a node per process, and each replica runs
// in its node's process (every section here starts at device 0, so
// replica r is on node r — round-robin would put llm/0 in process 1), with
// the planner's ZeRO-1 choice; the losses equal one process running the
// same plan. A node count that is not the processes' is refused, naming
// the config.
BOOST_AUTO_TEST_CASE(a_cpu_cluster_places_replicas_by_node) {
  const auto path = (fs::temp_directory_path() / "procs_nodes.toml").string();
  std::ofstream(path) << "[runtime]\nthreads = 1\n[cluster]\ndevice = \"cpu\"\nnodes = 3\ndevices_per_node = 1\n";
  Env env("tcp");
  const std::vector<std::string> args = {"models/tiny_mllm.sect", "--config", path, "--steps", "3", "--json"};
  const ProcessResult one = maestro_run(args);
  std::vector<std::string> three_args = args;
  three_args.insert(three_args.end(), {"--processes", "3"});
  const ProcessResult three = maestro_run(three_args);
  BOOST_TEST_REQUIRE(one.status == 0, one.err);
  BOOST_TEST_REQUIRE(three.status == 0, three.err);
  same_losses(losses_of(three), losses_of(one));
  BOOST_TEST(three.out.find("placement over 3 processes by the plan's nodes") != std::string::npos, three.out);
  int placed = 0;
  std::istringstream lines(three.out);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("    process ");
    if (at == std::string::npos) continue;
    const int process = std::stoi(line.substr(at + 12));
    std::istringstream items(line.substr(line.find(": ") + 2));
    for (std::string item; std::getline(items, item, ',');) {
      BOOST_TEST(std::stoi(item.substr(item.find('/') + 1)) == process, line);
      ++placed;
    }
  }
  BOOST_TEST(placed > 5, three.out);  // more replicas than sections: some dp > 1
  // The run is the planner's plan, its ZeRO-1 choice included (it shards the llm's dp 3 here).
  BOOST_TEST(summary_of(three).at("optimizer_state").at("llm").value("sharded", false), three.out);
  BOOST_TEST(summary_of(one).at("optimizer_state").at("llm").value("sharded", false), one.out);
  std::vector<std::string> two_args = args;
  two_args.insert(two_args.end(), {"--processes", "2"});
  const ProcessResult two = maestro_run(two_args);
  BOOST_TEST(two.status == 2, two.err);
  BOOST_TEST(two.err.find(path + ": [cluster] device = \"cpu\" has 3 nodes and the run 2 processes") != std::string::npos,
             two.err);
}

// [cluster] hosts of a device = "cpu" cluster name the host of each node:
// the coordinator must run on node 0's, and a worker is admitted only to a
// node named for its host — one on another host is refused (status 2,
// both sides say why) and the run waits on. --processes alone would spawn
// every worker here: refused up front. (Workers on their named hosts:
// tests/netns/training_test.sh, hosts with their own names.)
BOOST_AUTO_TEST_CASE(cluster_hosts_admit_workers_by_host) {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  const std::string here = name, elsewhere = "maestro-nowhere-" + std::to_string(::getpid());
  auto write_config = [](const std::string& file, const std::string& hosts) {
    const auto path = (fs::temp_directory_path() / file).string();
    std::ofstream(path) << "[runtime]\nthreads = 1\n[cluster]\ndevice = \"cpu\"\ndevices_per_node = 1\nhosts = [" << hosts
                        << "]\n";
    return path;
  };
  const std::string ok = write_config("procs_hosts.toml", "\"" + here + "\", \"" + elsewhere + "\"");
  const std::string wrong = write_config("procs_hosts0.toml", "\"" + elsewhere + "\", \"" + here + "\"");
  Env env("tcp");
  const std::vector<std::string> run = {"models/tiny_mllm.sect", "--steps", "2", "--json", "--processes", "2"};
  auto with = [&](const std::string& config, std::vector<std::string> extra) {
    std::vector<std::string> args = run;
    args.insert(args.end(), {"--config", config});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const ProcessResult spawned = maestro_run(with(ok, {}));
  BOOST_TEST(spawned.status == 2, spawned.err);
  BOOST_TEST(spawned.err.find("[cluster] hosts names the nodes' hosts") != std::string::npos, spawned.err);
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  const ProcessResult misplaced = maestro_run(with(wrong, {"--listen", address}));
  BOOST_TEST(misplaced.status == 2, misplaced.err);
  BOOST_TEST(misplaced.err.find("this coordinator runs on " + here + ", and [cluster] hosts names " + elsewhere +
                                " for node 0") != std::string::npos, misplaced.err);

  Background coordinator(with(ok, {"--listen", address}), "hosts");
  BOOST_TEST_REQUIRE(wait_for_text(coordinator.out_path, "process 1 (node 1 on " + elsewhere + ")", 30), coordinator.report(-1));
  Background stray({"--worker", address}, "stray");
  const int s = stray.wait(30);
  BOOST_TEST(s == 2, stray.report(s));
  const std::string why = "it runs on " + here + ", and [cluster] hosts leaves no node to that host (waiting for " +
                          elsewhere + " (node 1))";
  BOOST_TEST(stray.err().find(why) != std::string::npos, stray.report(s));
  BOOST_TEST(wait_for_text(coordinator.err_path, why, 10), coordinator.report(-1));
  BOOST_TEST(coordinator.wait(0.5) == -1, coordinator.report(-1));  // still waiting for its worker
}

// Workers started by hand join a coordinator that waits for them at
// --listen; before they do, a garbage client and a worker of another build
// knock and are refused; the run goes on and matches one process.
BOOST_AUTO_TEST_CASE(workers_join_by_hand_garbage_and_other_builds_refused) {
  Env env("tcp");
  const ProcessResult one = train("models/tiny_mllm.sect", 1);
  BOOST_TEST_REQUIRE(one.status == 0, one.err);
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  Background coordinator({"models/tiny_mllm.sect", "--config", config(), "--steps", "3", "--json", "--quiet",
                          "--processes", "3", "--listen", address}, "listen");
  std::string garbage(4096, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = char((i * 2654435761u) >> 13);
  BOOST_TEST(send_garbage(std::stoi(address.substr(address.find(':') + 1)), garbage));
  {
    ::setenv("MAESTRO_BUILD_ID", "another-build", 1);
    Background stranger({"--worker", address}, "stranger");
    ::unsetenv("MAESTRO_BUILD_ID");
    const int s = stranger.wait(30);
    BOOST_TEST(s == 2, stranger.report(s));
    BOOST_TEST(stranger.err().find("build another-build") != std::string::npos, stranger.err());
  }
  Background w1({"--worker", address}, "w1"), w2({"--worker", address}, "w2");
  const int c = coordinator.wait(90);
  BOOST_TEST_REQUIRE(c == 0, coordinator.report(c));
  const int s1 = w1.wait(15), s2 = w2.wait(15);
  BOOST_TEST(s1 == 0, w1.report(s1));
  BOOST_TEST(s2 == 0, w2.report(s2));
  const std::string err = coordinator.err();
  BOOST_TEST(std::regex_search(err, std::regex("refused a connection from 127.0.0.1:[0-9]+: not a maestro-run worker "
                                               "\\(garbage")), err);
  BOOST_TEST(std::regex_search(err, std::regex("refused a connection from 127.0.0.1:[0-9]+: build another-build")), err);
  ProcessResult r;
  r.out = coordinator.out();
  same_losses(losses_of(r), losses_of(one));
}

// Under mpirun/srun: rank 0 coordinates at --coordinator, the others join
// it, each as the process of its rank whatever the order they arrive in:
// rank 2 joins first (arrival order would make it process 1), a second
// rank 2 is refused (status 2, both sides say why) and the run goes on.
BOOST_AUTO_TEST_CASE(launcher_ranks_pick_their_roles) {
  Env env("tcp");
  const ProcessResult one = train("models/tiny_kd.sect", 1);
  BOOST_TEST_REQUIRE(one.status == 0, one.err);
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  const std::vector<std::string> args = {"models/tiny_kd.sect", "--config", config(), "--steps", "3", "--json",
                                         "--coordinator", address};
  auto rank = [&](const char* r, const std::string& tag) {
    ::setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    ::setenv("OMPI_COMM_WORLD_RANK", r, 1);
    auto b = std::make_unique<Background>(args, tag);
    ::unsetenv("OMPI_COMM_WORLD_SIZE");
    ::unsetenv("OMPI_COMM_WORLD_RANK");
    return b;
  };
  auto rank0 = rank("0", "rank0"), rank2 = rank("2", "rank2");
  BOOST_TEST_REQUIRE(wait_for_text(rank0->err_path, "maestro-run: worker 2 (pid ", 30), rank0->report(-1));
  BOOST_TEST(rank0->err().find(", rank 2) joined: 1 of 2") != std::string::npos, rank0->err());
  {
    auto again = rank("2", "rank2b");
    const int s = again->wait(30);
    BOOST_TEST(s == 2, again->report(s));
    const std::string why = "it is rank 2, and process 2 has joined already (pid ";
    BOOST_TEST(again->err().find(why) != std::string::npos, again->report(s));
    BOOST_TEST(wait_for_text(rank0->err_path, why, 10), rank0->report(-1));
  }
  auto rank1 = rank("1", "rank1");
  const int s0 = rank0->wait(90);
  BOOST_TEST_REQUIRE(s0 == 0, rank0->report(s0));
  const int s1 = rank1->wait(15), s2 = rank2->wait(15);
  BOOST_TEST(s1 == 0, rank1->report(s1));
  BOOST_TEST(s2 == 0, rank2->report(s2));
  // Each worker's stdout: its assignment, and no summary (the coordinator's).
  BOOST_TEST(rank1->out().starts_with("maestro-run: worker 1 (pid "), rank1->report(s1));
  BOOST_TEST(rank2->out().starts_with("maestro-run: worker 2 (pid "), rank2->report(s2));
  BOOST_TEST(rank1->out().find('{') == std::string::npos, rank1->report(s1));
  ProcessResult r;
  r.out = rank0->out();
  same_losses(losses_of(r), losses_of(one));
}

// tiny_mllm with a checkpoint after every step, in a folder of its own.
std::string checkpointed_model(const std::string& dir) {
  std::ifstream in("models/tiny_mllm.sect");
  std::stringstream text;
  text << in.rdbuf();
  std::string src = text.str();
  const std::string anchor = "precision = fp32;";
  src.replace(src.find(anchor), anchor.size(), anchor + "\n  checkpoint { every = 1; dir = \"" + dir + "\"; }");
  const auto path = (fs::temp_directory_path() / "procs_tiny_ckpt.sect").string();
  std::ofstream(path) << src;
  return path;
}

// tiny_mllm with the LLM split into 2 pipeline stages (and checkpoints
// every step into `dir`).
std::string pipelined_model(const std::string& dir) {
  std::string src = Background::slurp(checkpointed_model(dir));
  const std::string anchor = "consumes = [text];\n  parallel { dp = auto; }";
  BOOST_REQUIRE(src.find(anchor) != std::string::npos);
  src.replace(src.find(anchor), anchor.size(), "consumes = [text];\n  parallel { pp = 2; dp = auto; }");
  const auto path = (fs::temp_directory_path() / "procs_tiny_pp2.sect").string();
  std::ofstream(path) << src;
  return path;
}

// pp > 1 across processes: a replica's stages share a process and their
// hand-off (hidden states and the engine's layout) goes through the
// scheduler as handles. The losses equal one process's over tcp and shared
// memory, with ZeRO-1 too, and the per-stage checkpoint written over 3
// processes resumes on 3 fresh ones to the uninterrupted run's losses.
BOOST_AUTO_TEST_CASE(pipeline_stages_over_processes_match_one) {
  const std::string dir = (fs::temp_directory_path() / "procs_pp2_ckpt").string();
  const std::string model = pipelined_model(dir);
  fs::remove_all(dir);
  const ProcessResult one = maestro_run({model, "--config", config(), "--steps", "4", "--json", "--quiet"});
  BOOST_TEST_REQUIRE(one.status == 0, one.err);
  BOOST_TEST_REQUIRE(summary_of(one)["optimizer_state"].contains("llm.stage1"), one.out);  // 2 stages, dp > 1
  BOOST_TEST_REQUIRE(summary_of(one)["optimizer_state"]["llm.stage1"].value("dp", 0) > 1, one.out);
  const std::vector<double> reference = losses_of(one);
  for (const bool shm : {false, true}) {
    Env env(shm ? "cma,sysv,self" : "tcp");
    fs::remove_all(dir);
    const ProcessResult three = maestro_run({model, "--config", config(shm), "--steps", "4", "--json", "--quiet",
                                             "--processes", "3"});
    BOOST_TEST_REQUIRE(three.status == 0, three.err);
    same_losses(losses_of(three), reference);
  }
  Env env("tcp");
  fs::remove_all(dir);
  const ProcessResult first = maestro_run({model, "--config", config(), "--steps", "4", "--json", "--quiet",
                                           "--processes", "3", "--stop-after", "2"});
  BOOST_TEST_REQUIRE(first.status == 0, first.err);
  const ProcessResult rest = maestro_run({model, "--config", config(), "--steps", "4", "--json", "--quiet",
                                          "--processes", "3", "--resume", dir});
  BOOST_TEST_REQUIRE(rest.status == 0, rest.err);
  same_losses(losses_of(rest), std::vector<double>(reference.begin() + 2, reference.end()));
  fs::remove_all(dir);
}

// A worker killed with -9 (or stopped: it no longer answers heartbeats)
// mid-run ends the run within 10 s with exit 1, naming the worker, its host
// and its sections; the last checkpoint stays valid and --resume on fresh
// processes continues with the uninterrupted run's losses.
BOOST_AUTO_TEST_CASE(lost_worker_ends_the_run_and_resume_continues) {
  Env env("tcp");
  const std::string dir = (fs::temp_directory_path() / "procs_ckpt").string();
  const std::string model = checkpointed_model(dir);
  fs::remove_all(dir);
  const ProcessResult whole = maestro_run({model, "--config", config(), "--steps", "8", "--json", "--quiet"});
  BOOST_TEST_REQUIRE(whole.status == 0, whole.err);
  const std::vector<double> reference = losses_of(whole);
  BOOST_TEST_REQUIRE(reference.size() == 8u);
  for (const int sig : {SIGKILL, SIGSTOP}) {
    fs::remove_all(dir);
    Background run({model, "--config", config(), "--steps", "8", "--processes", "3"}, "fault");
    BOOST_TEST_REQUIRE(wait_for_text(run.out_path, "step 3/8", 60), run.err());
    const std::vector<pid_t> workers = children_of(run.pid);
    BOOST_TEST_REQUIRE(workers.size() == 2u);
    ::kill(workers[0], sig);
    const auto killed = std::chrono::steady_clock::now();
    const int status = run.wait(30);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
    if (sig == SIGSTOP) {  // reap it
      ::kill(workers[0], SIGKILL);
      ::waitpid(workers[0], nullptr, WNOHANG);
    }
    BOOST_TEST(status == 1, run.err());
    BOOST_TEST_MESSAGE((sig == SIGKILL ? "kill -9" : "SIGSTOP") << ": the run ended " << took << " s later");
    BOOST_TEST(took <= 10.0, "the run took " << took << " s to end");
    const std::string err = run.err();
    BOOST_TEST(std::regex_search(err, std::regex("worker [12] \\(pid " + std::to_string(workers[0]) +
                                                 " on [^;]+; hosts [a-z_]+/[0-9]")), err);
    BOOST_TEST(err.find("lost mid-run") != std::string::npos, err);
    const ProcessResult resumed = maestro_run({model, "--config", config(), "--steps", "8", "--json", "--quiet",
                                               "--processes", "3", "--resume", dir});
    BOOST_TEST_REQUIRE(resumed.status == 0, resumed.err);
    const std::vector<double> tail = losses_of(resumed);
    BOOST_TEST_REQUIRE(tail.size() >= 1u);
    BOOST_TEST_REQUIRE(tail.size() <= 6u);  // the checkpoint holds at least steps 1-3 (step 3 was reported)
    for (size_t i = 0; i < tail.size(); ++i)
      BOOST_TEST(tail[i] == reference[reference.size() - tail.size() + i], "resumed step " << i);
  }
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
