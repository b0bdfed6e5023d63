// The coordinator's side of a multi-process run (processes.h): the door
// actor workers say Hello to, spawning local workers, and joining them.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <utility>

#include "actors/gate.h"
#include "actors/processes.h"
#include "actors/train_phases.h"
#include "rdma/ucx_transport.h"

extern char** environ;

namespace maestro {

// Workers admitted by the door, by process; the coordinator's thread waits on it.
struct Coordinator::Door {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<Hello>> joined;  // [process - 1]
  int count = 0;                            // how many have joined
  int wanted = 0;
  std::vector<std::string> hosts;  // [process]: the host that must run it ([cluster] hosts); empty = any, arrival order
  bool quiet = false;              // else each join is said on stderr
};

namespace {

// The process a worker on `host` takes: the first free one (whose host, when
// the cluster names them, is `host`); 0 when none is. Under the door's lock.
int free_process(const Coordinator::Door& d, const std::string& host) {
  for (int p = 1; p <= d.wanted; ++p)
    if (!d.joined[size_t(p - 1)] && (d.hosts.empty() || d.hosts[size_t(p)] == host)) return p;
  return 0;
}

// Why `h` cannot join ("" when it can) and the process it takes. A worker
// with a launcher's rank takes the process of that rank (mpirun/srun lay
// ranks out on hosts: node r is rank r's); one started by hand the first
// free process for its host. Under the door's lock.
std::pair<std::string, int> admission(const Coordinator::Door& d, const Hello& h) {
  const std::string host = h.host.empty() ? "an unnamed host" : h.host;
  if (d.count >= d.wanted) return {fmt::format("the run has all its {} processes", d.wanted + 1), 0};
  if (h.rank > 0) {
    if (h.rank > d.wanted)
      return {fmt::format("it is rank {}, and the run has {} processes (ranks 0-{})", h.rank, d.wanted + 1, d.wanted), 0};
    if (const auto& taken = d.joined[size_t(h.rank - 1)])
      return {fmt::format("it is rank {}, and process {} has joined already (pid {} on {})", h.rank, h.rank, taken->pid,
                          taken->host),
              0};
    if (!d.hosts.empty() && d.hosts[size_t(h.rank)] != h.host)
      return {fmt::format("it is rank {} on {}, and [cluster] hosts names {} for node {}", h.rank, host,
                          d.hosts[size_t(h.rank)], h.rank),
              0};
    return {"", h.rank};
  }
  if (const int p = free_process(d, h.host); p != 0) return {"", p};
  std::string free;
  for (int p = 1; p <= d.wanted; ++p)
    if (!d.joined[size_t(p - 1)]) free += fmt::format("{}{} (node {})", free.empty() ? "" : ", ", d.hosts[size_t(p)], p);
  return {fmt::format("it runs on {}, and [cluster] hosts leaves no node to that host (waiting for {})", host, free), 0};
}

caf::behavior door(caf::event_based_actor* self, std::shared_ptr<Coordinator::Door> st) {
  return {
      [=](Hello& h) -> Welcome {
        const std::string who = fmt::format("a worker (pid {} on {})", h.pid, h.host.empty() ? "?" : h.host);
        std::string refusal;
        if (h.version != kProcessProtocolVersion)
          refusal = fmt::format("protocol version {}, this coordinator speaks {}", h.version, kProcessProtocolVersion);
        else if (h.build != build_id())
          refusal = fmt::format("build {}, this coordinator is build {}: run the same maestro-run binary everywhere",
                                h.build, build_id());
        else if (!h.session)
          refusal = "no session actor";
        int process = 0;
        if (refusal.empty()) {
          std::lock_guard<std::mutex> lock(st->mu);
          std::tie(refusal, process) = admission(*st, h);
          if (refusal.empty()) {
            st->joined[size_t(process - 1)] = h;
            ++st->count;
            st->cv.notify_all();
            if (!st->quiet)
              std::fprintf(stderr, "maestro-run: worker %d (pid %lld on %s%s) joined: %d of %d\n", process,
                           static_cast<long long>(h.pid), h.host.c_str(),
                           h.rank > 0 ? fmt::format(", rank {}", h.rank).c_str() : "", st->count, st->wanted);
          }
        }
        if (!refusal.empty()) {
          std::fprintf(stderr, "maestro-run: refused %s: %s\n", who.c_str(), refusal.c_str());
          return Welcome{refusal, 0};
        }
        return Welcome{"", process};
      },
  };
}

}  // namespace

Coordinator::Coordinator(caf::actor_system& sys, const ProcessOptions& options, std::vector<std::vector<int>> placement,
                         std::vector<std::string> sections)
    : sys_(sys), options_(options), placement_(std::move(placement)), sections_(std::move(sections)) {
  std::pair<std::string, uint16_t> at;
  try {
    at = parse_address(options.listen);
  } catch (const std::invalid_argument& e) {
    throw TrainFailure(2, fmt::format("listen address: {}", e.what()));
  }
  state_ = std::make_shared<Door>();
  state_->wanted = options.processes - 1;
  state_->quiet = options.spec.quiet;
  state_->joined.resize(size_t(state_->wanted));
  if (!options.hosts.empty()) {  // node i on hosts[i] (docs/runtime.md, "Placement")
    if (int(options.hosts.size()) != options.processes)
      throw TrainFailure(2, fmt::format("[cluster] hosts names {} hosts for {} processes", options.hosts.size(),
                                        options.processes));
    if (options.spawn)
      throw TrainFailure(2, fmt::format("[cluster] hosts names the nodes' hosts ({}): start a `maestro-run --worker` on "
                                        "each and the coordinator with --listen (--processes alone spawns every worker "
                                        "on this host)", fmt::join(options.hosts, ", ")));
    if (host_name() != options.hosts[0])
      throw TrainFailure(2, fmt::format("this coordinator runs on {}, and [cluster] hosts names {} for node 0: start "
                                        "it there", host_name(), options.hosts[0]));
    state_->hosts = options.hosts;
  }
  door_ = sys.spawn(door, state_);
  // CAF's door on a free port of the same host; the advertised address is the gate's (gate.h).
  auto port = sys.middleman().publish(door_, 0, at.first.empty() ? nullptr : at.first.c_str(), true);
  if (!port) {
    caf::anon_send_exit(door_, caf::exit_reason::user_shutdown);
    throw TrainFailure(1, fmt::format("cannot listen on {}: {}", options.listen, sys.render(port.error())));
  }
  try {
    gate_ = std::make_unique<Gate>(at.first, at.second, *port);
  } catch (const std::exception& e) {
    caf::anon_send_exit(door_, caf::exit_reason::user_shutdown);
    throw TrainFailure(1, fmt::format("cannot listen on {}: {}", options.listen, e.what()));
  }
  port_ = gate_->port();
  if (!options.spawn) return;
  // N-1 local workers: this binary, its stdout onto our stderr (the
  // coordinator's stdout carries the run's output and --json line).
  const std::string address = fmt::format("{}:{}", at.first.empty() || at.first == "0.0.0.0" ? "127.0.0.1" : at.first, port_);
  for (int p = 1; p < options.processes; ++p) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, 2, 1);
    std::error_code ec;  // argv[0]: the binary's real path, so `ps` names it
    std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string(), flag = "--worker";
    if (ec) exe = "/proc/self/exe";
    char* argv[] = {exe.data(), flag.data(), const_cast<char*>(address.c_str()), nullptr};
    // Its own process group: a terminal's Ctrl-C reaches the coordinator
    // only, which checkpoints and then shuts the workers down.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) throw TrainFailure(1, fmt::format("cannot start worker {}: {}", p, std::strerror(rc)));
    children_.push_back(int(pid));
  }
}

Coordinator::~Coordinator() {
  install_peer_tensors(nullptr);
  if (tensor_server_) caf::anon_send_exit(tensor_server_, caf::exit_reason::user_shutdown);
  for (int pid : children_)
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  caf::anon_send_exit(door_, caf::exit_reason::user_shutdown);
}

void Coordinator::join(RunSetup& setup, caf::actor tracer) {
  transport_ = setup.peer_transport;
  const int wanted = options_.processes - 1;
  {  // the workers' Hellos, bounded; a spawned worker that already exited fails the run at once
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.join_timeout_s);
    std::unique_lock<std::mutex> lock(state_->mu);
    while (state_->count < wanted) {
      for (int& pid : children_) {
        int status = 0;
        if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == pid) {
          pid = -1;
          throw TrainFailure(1, fmt::format("a worker process exited before joining (status {})",
                                            WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)));
        }
      }
      if (std::chrono::steady_clock::now() > deadline)
        throw TrainFailure(1, fmt::format("only {} of {} worker processes joined within {:.0f} s (listening on port {})",
                                          state_->count, wanted, options_.join_timeout_s, port_));
      state_->cv.wait_for(lock, std::chrono::milliseconds(100));
    }
    for (size_t i = 0; i < state_->joined.size(); ++i) {
      const Hello& h = *state_->joined[i];
      const int p = int(i) + 1;
      workers_.push_back({p, h.session, h.host, h.pid,
                          fmt::format("worker {} (pid {} on {}; hosts {})", p, h.pid, h.host, hosted_by(placement_, sections_, p))});
    }
  }
  caf::scoped_actor self{sys_};
  const auto timeout = std::chrono::seconds(120);  // a worker builds its share of the model meanwhile
  std::vector<decltype(self->request(caf::actor{}, timeout, Assignment{}))> pending;
  for (const Worker& w : workers_)
    pending.push_back(self->request(w.session, timeout, Assignment{w.process, options_.processes, options_.spec, placement_, tracer}));
  ConnectPeers peers;
  peers.endpoints.resize(size_t(options_.processes));
  peers.names.resize(size_t(options_.processes));
  peers.endpoints[0] = endpoint_bytes(setup);
  peers.names[0] = fmt::format("the coordinator (pid {} on {})", ::getpid(), host_name());
  peers.rings = ring_entries(setup);
  peers.nccl_ranks = nccl_rank_entries(setup);
  peers.transport_ids.resize(size_t(options_.processes));
  peers.tensor_servers.resize(size_t(options_.processes));
  peers.transport_ids[0] = setup.peer_transport->id();
  peers.tensor_servers[0] = spawn_tensor_server(sys_, setup.peer_tensors.get());
  tensor_server_ = peers.tensor_servers[0];
  setup.remote.resize(placement_.size());
  std::string error;
  bool bad_input = false;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Worker& w = workers_[i];
    pending[i].receive(
        [&](Joined& j) {
          if (!j.error.empty()) {
            if (error.empty()) error = j.error, bad_input = j.bad_input;
            return;
          }
          peers.endpoints[size_t(w.process)] = std::move(j.endpoint);
          peers.names[size_t(w.process)] = w.name;
          peers.rings.insert(peers.rings.end(), j.rings.begin(), j.rings.end());
          peers.nccl_ranks.insert(peers.nccl_ranks.end(), j.nccl_ranks.begin(), j.nccl_ranks.end());
          peers.transport_ids[size_t(w.process)] = j.transport_id;
          peers.tensor_servers[size_t(w.process)] = j.tensor_server;
          for (const HostedReplica& h : j.replicas) {
            auto& stages = setup.remote.at(size_t(h.section));
            if (stages.size() <= size_t(h.stage)) stages.resize(size_t(h.stage) + 1);
            auto& replicas = stages[size_t(h.stage)];
            if (replicas.size() <= size_t(h.replica)) replicas.resize(size_t(h.replica) + 1);
            replicas[size_t(h.replica)] = h.handle;
          }
        },
        [&](caf::error& e) {
          if (error.empty()) error = fmt::format("{} did not join: {}", w.name, sys_.render(e));
        });
  }
  if (!error.empty()) throw TrainFailure(bad_input ? 2 : 1, error);
  std::vector<decltype(self->request(caf::actor{}, timeout, ConnectPeers{}))> connecting;
  for (const Worker& w : workers_) connecting.push_back(self->request(w.session, std::chrono::seconds(30), peers));
  try {
    connect_peers(setup, peers, 0);
  } catch (const std::exception& e) {
    error = fmt::format("the coordinator cannot connect to its workers: {}", e.what());
  }
  for (size_t i = 0; i < workers_.size(); ++i)
    connecting[i].receive(
        [&](std::string& e) {
          if (error.empty()) error = e;
        },
        [&](caf::error& e) {
          if (error.empty()) error = fmt::format("{} did not connect: {}", workers_[i].name, sys_.render(e));
        });
  if (!error.empty()) throw TrainFailure(1, error);
}

void Coordinator::shutdown(const std::string& reason, bool failed) {
  install_peer_tensors(nullptr);  // no tensor crosses any more
  if (!failed) {  // everybody flushes while everybody is alive (Quiesce), then goes
    caf::scoped_actor self{sys_};
    std::vector<decltype(self->request(caf::actor{}, std::chrono::seconds(5), Quiesce{}))> quiescing;
    for (const Worker& w : workers_) quiescing.push_back(self->request(w.session, std::chrono::seconds(5), Quiesce{}));
    for (auto& q : quiescing) q.receive([](std::string&) {}, [](caf::error&) {});  // a late one only logs on exit
    if (auto* ucx = dynamic_cast<UcxTransport*>(transport_.get())) ucx->quiesce();
  }
  for (const Worker& w : workers_) caf::anon_send(w.session, Shutdown{reason});
  // After a fault a worker may be the one that stopped answering: 2 s, then killed.
  const auto grace = std::chrono::seconds(failed ? 2 : 10);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (int& pid : children_) {
    while (pid > 0) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
          std::fprintf(stderr, "maestro-run: a worker process (pid %d) ended with status %d\n", pid,
                       WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        pid = -1;
      } else if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "maestro-run: a worker process (pid %d) did not exit within %d s: killed\n", pid,
                     int(grace.count()));
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        pid = -1;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
}

}  // namespace maestro
