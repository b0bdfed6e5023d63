// maestro-run over several processes (docs/runtime.md, "Processes and
// hosts"): tiny_mllm and tiny_kd over 3 processes give the 1-process
// losses, over UCX's TCP and over shared memory, with ZeRO-1 on and off;
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

std::vector<double> losses_of(const ProcessResult& r) {
  std::string t = r.out;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const std::string last = t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1);
  try {
    return nlohmann::json::parse(last).at("losses").get<std::vector<double>>();
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

BOOST_AUTO_TEST_SUITE_END()
