// Processes and hosts (processes.h): placement, the build id, the actor
// system's set-up for a multi-process run, connecting the transfer engine
// and the dp rings, and the worker's side of the protocol.
#include "actors/processes.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <stdexcept>
#include <thread>

#include "actors/gate.h"
#include "actors/train_phases.h"
#include "log/log.h"
#include "rdma/ucx_transport.h"

namespace maestro {

std::string build_id() {
  if (const char* forced = std::getenv("MAESTRO_BUILD_ID"); forced && *forced) return forced;
  static const std::string id = [] {
    uint64_t h = 1469598103934665603ull;  // FNV-1a 64 of the executable
    std::ifstream in("/proc/self/exe", std::ios::binary);
    char buf[1 << 16];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
      for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ uint8_t(buf[i])) * 1099511628211ull;
      if (!in) break;
    }
    return fmt::format("{:016x}", h);
  }();
  return id;
}

std::vector<std::vector<int>> place_replicas(const Plan& plan, int processes, int64_t devices_per_node) {
  std::vector<std::vector<int>> out(plan.sections.size());
  int unit = 0;
  for (size_t s = 0; s < plan.sections.size(); ++s)
    for (int64_t r = 0; r < plan.sections[s].dp; ++r) {
      if (devices_per_node <= 0) {
        out[s].push_back(unit++ % std::max(1, processes));
        continue;
      }
      const int64_t node = processes <= 1 ? 0 : stage_first_device(plan.sections[s], r, 0) / devices_per_node;
      if (node >= processes)
        throw std::invalid_argument(fmt::format("section {} replica {} is on node {} of the plan, and the run has {} "
                                                "process{}", s, r, node, processes, processes == 1 ? "" : "es"));
      out[s].push_back(int(node));
    }
  return out;
}

std::string hosted_by(const std::vector<std::vector<int>>& placement, const std::vector<std::string>& sections,
                      int process) {
  std::string out;
  for (size_t s = 0; s < placement.size(); ++s)
    for (size_t r = 0; r < placement[s].size(); ++r)
      if (placement[s][r] == process) out += fmt::format("{}{}/{}", out.empty() ? "" : ", ", sections[s], r);
  return out.empty() ? "no replica" : out;
}

std::vector<std::string> placement_lines(const std::vector<std::vector<int>>& placement,
                                         const std::vector<std::string>& sections, const Cluster* cluster) {
  int processes = 1;
  for (const auto& replicas : placement)
    for (int p : replicas) processes = std::max(processes, p + 1);
  if (cluster) processes = std::max<int>(processes, int(cluster->nodes()));
  std::vector<std::string> out;
  out.push_back(cluster ? fmt::format("placement over {} processes by the plan's nodes ([cluster]: {} CPU slot{} per node):",
                                      processes, cluster->devices_per_node, cluster->devices_per_node == 1 ? "" : "s")
                        : fmt::format("placement over {} processes, round-robin over (section, replica):", processes));
  for (int p = 0; p < processes; ++p) {
    const std::string host = cluster && size_t(p) < cluster->hosts.size() ? " on " + cluster->hosts[size_t(p)] : "";
    out.push_back(fmt::format("  process {}{}: {}", p,
                              p == 0 ? " (coordinator" + host + ")" : cluster ? fmt::format(" (node {}{})", p, host) : "",
                              hosted_by(placement, sections, p)));
  }
  return out;
}

void configure_process_system(caf::actor_system_config& cfg, size_t heartbeat_ms) {
  add_message_types(cfg);
  cfg.add_message_type<RunSpec>("maestro.RunSpec")
      .add_message_type<Hello>("maestro.Hello")
      .add_message_type<Welcome>("maestro.Welcome")
      .add_message_type<Assignment>("maestro.Assignment")
      .add_message_type<HostedReplica>("maestro.HostedReplica")
      .add_message_type<RingEntry>("maestro.RingEntry")
      .add_message_type<NcclRankEntry>("maestro.NcclRankEntry")
      .add_message_type<Joined>("maestro.Joined")
      .add_message_type<ConnectPeers>("maestro.ConnectPeers")
      .add_message_type<Quiesce>("maestro.Quiesce")
      .add_message_type<Shutdown>("maestro.Shutdown")
      .add_message_type<FetchTensor>("maestro.FetchTensor")
      .add_message_type<PutEnded>("maestro.PutEnded")
      .add_message_type<std::vector<uint8_t>>("maestro.bytes")
      .add_message_type<std::vector<std::vector<int>>>("maestro.placement");
  cfg.load<caf::io::middleman>();
  // A CAF peer of another application or protocol version is refused in
  // CAF's own handshake too (behind the gate, gate.h).
  cfg.set("middleman.app-identifiers", std::vector<std::string>{fmt::format("maestro-run/{}", kProcessProtocolVersion)});
  // CAF 0.17 sends no heartbeats by default: a peer that stops answering
  // (not only one whose socket closes) is then noticed after
  // connection-timeout without traffic.
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(heartbeat_ms)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::milliseconds(heartbeat_ms * 10)});
}

std::pair<std::string, uint16_t> parse_address(const std::string& text) {
  const size_t colon = text.rfind(':');
  const std::string port = colon == std::string::npos ? "" : text.substr(colon + 1);
  const bool digits = !port.empty() && port.size() <= 5 &&
                      port.find_first_not_of("0123456789") == std::string::npos;
  if (colon == 0 || !digits || std::stol(port) > 65535)
    throw std::invalid_argument(fmt::format("'{}' is not HOST:PORT (a port from 0 to 65535)", text));
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, uint16_t(std::stol(port))};
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

void connect_peers(RunSetup& setup, const ConnectPeers& peers, int process, std::chrono::milliseconds nccl_timeout) {
  auto* ucx = dynamic_cast<UcxTransport*>(setup.peer_transport.get());
  if (!ucx) throw std::logic_error("connect_peers: no UCX transport");
  for (size_t p = 0; p < peers.endpoints.size(); ++p)
    if (int(p) != process && !peers.endpoints[p].empty())
      ucx->connect(std::as_bytes(std::span<const uint8_t>(peers.endpoints[p])), peers.names.at(p));
  std::map<uint64_t, std::pair<caf::actor, std::string>> servers;
  for (size_t p = 0; p < peers.tensor_servers.size(); ++p)
    servers[peers.transport_ids.at(p)] = {peers.tensor_servers[p], peers.names.at(p)};
  if (setup.peer_tensors) {
    setup.peer_tensors->set_servers(std::move(servers));
    install_peer_tensors(setup.peer_tensors.get());
  }
  for (const RunSetup::RingRank& rank : setup.rings) {
    const int size = rank.ring->size();
    auto find = [&](int replica) -> const RingMailbox& {
      for (const RingEntry& e : peers.rings)
        if (e.section == rank.section && e.stage == rank.stage && e.tp_rank == rank.tp_rank && e.replica == replica)
          return e.mailbox;
      throw std::runtime_error(fmt::format("no mailbox for ring rank {} of section {}", replica, rank.section));
    };
    rank.ring->connect(find((rank.replica + size - 1) % size), find((rank.replica + 1) % size));
  }
  // Every process sees the same entries, so every rank of a group chooses alike.
  std::vector<NcclConnection> nccl;
  std::vector<const RunSetup::NcclGroup*> over_nccl;
  for (const RunSetup::NcclGroup& g : setup.nccl_groups) {
    const int size = g.ranks.at(0)->size();
    std::vector<std::string> gpu(static_cast<size_t>(size));
    std::vector<uint8_t> id;
    for (const NcclRankEntry& e : peers.nccl_ranks)
      if (e.section == g.section && e.stage == g.stage && e.tp_rank == g.tp_rank && e.replica >= 0 && e.replica < size) {
        gpu[size_t(e.replica)] = e.gpu;
        if (e.replica == 0) id = e.id;
      }
    for (int r = 0; r < size; ++r)
      if (gpu[size_t(r)].empty()) throw std::runtime_error(fmt::format("{}: no entry for its rank {}", g.name, r));
    if (const std::string shared = shared_gpu(gpu); !shared.empty()) {
      log(LogLevel::Info, "{}: {}: over the staged ring instead of NCCL (one NCCL rank per GPU)", g.name, shared);
      for (const auto& c : g.choices) c->choose(1);
      continue;
    }
    for (const auto& rank : g.ranks) nccl.push_back({rank, id, g.name});
    over_nccl.push_back(&g);
  }
  connect_peer_dp_ranks(nccl, nccl_timeout);  // every process's at once: each blocks until the others come
  for (const RunSetup::NcclGroup* g : over_nccl)
    for (const auto& c : g->choices) c->choose(0);
}

std::vector<NcclRankEntry> nccl_rank_entries(const RunSetup& setup) {
  std::vector<NcclRankEntry> out;
  for (const RunSetup::NcclGroup& g : setup.nccl_groups)
    for (size_t i = 0; i < g.replicas.size(); ++i)
      out.push_back({g.section, g.stage, g.tp_rank, g.replicas[i], g.gpus[i], g.replicas[i] == 0 ? g.id : std::vector<uint8_t>{}});
  return out;
}

std::vector<uint8_t> endpoint_bytes(const RunSetup& setup) {
  const auto* ucx = dynamic_cast<const UcxTransport*>(setup.peer_transport.get());
  if (!ucx) return {};
  const std::vector<std::byte> info = ucx->endpoint_info();
  const auto* p = reinterpret_cast<const uint8_t*>(info.data());
  return {p, p + info.size()};
}

std::vector<RingEntry> ring_entries(const RunSetup& setup) {
  std::vector<RingEntry> out;
  for (const RunSetup::RingRank& r : setup.rings)
    out.push_back({r.section, r.stage, r.tp_rank, r.replica, r.ring->mailbox()});
  return out;
}

// ------------------------------------------------------------ the worker

namespace {

struct WorkerState {
  std::optional<WorkerRun> run;
  RunSetup setup;
  std::vector<caf::actor> actors;
};

void stop_local(WorkerState& st) {
  install_peer_tensors(nullptr);
  for (const auto& group : st.setup.dp_groups) group->abort("the run ended");
  for (const caf::actor& a : st.actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  st.actors.clear();
}

}  // namespace

int serve_worker(const std::string& address, const PrepareWorkerRun& prepare, int32_t rank, double connect_timeout_s) {
  std::pair<std::string, uint16_t> where;
  try {
    where = parse_address(address);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "maestro-run: error: --worker %s\n", e.what());
    return 2;
  }
  WorkerState st;  // outlives the actor system: its compute workers hold the runners and rings
  caf::actor_system_config cfg;
  configure_process_system(cfg);
  cfg.set("scheduler.policy", caf::atom("sharing"));
  caf::actor_system sys{cfg};
  const std::string me = fmt::format("worker (pid {} on {})", ::getpid(), host_name());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(connect_timeout_s);
  caf::actor door;
  std::string last_error;
  while (!door) {
    try {  // the gate first (gate.h), then CAF's door at the port it gives
      const uint16_t caf_port = pass_gate(where.first, where.second, 5);
      auto got = sys.middleman().remote_actor(where.first, caf_port);
      if (got) {
        door = *got;
        break;
      }
      last_error = sys.render(got.error());
    } catch (const std::runtime_error& e) {
      last_error = e.what();
      if (last_error.starts_with("refused: ")) {
        std::fprintf(stderr, "maestro-run: error: %s: %s by the coordinator at %s\n", me.c_str(), last_error.c_str(),
                     address.c_str());
        return 2;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "maestro-run: error: %s: cannot reach the coordinator at %s within %.0f s: %s\n", me.c_str(),
                   address.c_str(), connect_timeout_s, last_error.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  int status = 0;
  {
    caf::scoped_actor self{sys};
    self->monitor(door);
    Welcome welcome{"no answer", 0};
    self->request(door, std::chrono::seconds(30),
                  Hello{kProcessProtocolVersion, build_id(), host_name(), int64_t(::getpid()),
                        caf::actor_cast<caf::actor>(self), rank})
        .receive([&](Welcome& w) { welcome = std::move(w); },
                 [&](caf::error& e) { welcome.error = "the coordinator did not answer: " + sys.render(e); });
    if (!welcome.error.empty()) {
      std::fprintf(stderr, "maestro-run: error: %s: refused by the coordinator at %s: %s\n", me.c_str(), address.c_str(),
                   welcome.error.c_str());
      return 2;
    }
    const std::string name = fmt::format("worker {} (pid {} on {})", welcome.process, ::getpid(), host_name());
    bool done = false;
    auto lost = [&](const caf::down_msg& d) {
      if (d.source != door.address()) return;
      std::fprintf(stderr, "maestro-run: error: %s: lost the coordinator at %s: %s\n", name.c_str(), address.c_str(),
                   sys.render(d.reason).c_str());
      status = 1;
      done = true;
    };
    // Until the run starts every wait is bounded; then the coordinator's
    // liveness (heartbeats, down_msg) bounds it.
    while (!done)
      self->receive(
          [&](Assignment& a) -> Joined {
            Joined j;
            try {
              st.run.emplace(prepare(a.spec));
              st.run->options.placement = a.placement;
              st.run->options.process = a.process;
              if (!a.spec.quiet) {
                std::vector<std::string> sections;
                for (const SectionNode& n : st.run->graph->nodes) sections.push_back(n.name);
                std::printf("maestro-run: %s of %d processes: hosts %s\n", name.c_str(), a.processes,
                            hosted_by(a.placement, sections, a.process).c_str());
                std::fflush(stdout);
              }
              st.setup = set_up_run(*st.run->graph, *st.run->plan, *st.run->train, st.run->options);
              const auto handles = spawn_replicas(sys, st.setup, *st.run->graph, st.run->options, a.tracer, st.actors);
              for (size_t s = 0; s < handles.size(); ++s)
                for (size_t k = 0; k < handles[s].size(); ++k)
                  for (size_t r = 0; r < handles[s][k].size(); ++r)
                    if (handles[s][k][r]) j.replicas.push_back({int32_t(s), int32_t(k), int32_t(r), handles[s][k][r]});
              j.endpoint = endpoint_bytes(st.setup);
              j.rings = ring_entries(st.setup);
              j.nccl_ranks = nccl_rank_entries(st.setup);
              j.transport_id = st.setup.peer_transport->id();
              j.tensor_server = spawn_tensor_server(sys, st.setup.peer_tensors.get());
              st.actors.push_back(j.tensor_server);
            } catch (const TrainFailure& f) {
              j.error = f.what();
              j.bad_input = f.exit_code == 2;
            } catch (const std::invalid_argument& e) {
              j.error = e.what();
              j.bad_input = true;
            } catch (const std::exception& e) {
              j.error = e.what();
            }
            if (!j.error.empty()) j.error = fmt::format("{}: {}", name, j.error);
            return j;
          },
          [&](ConnectPeers& p) -> std::string {
            try {
              connect_peers(st.setup, p, welcome.process);
            } catch (const std::exception& e) {
              return fmt::format("{}: connecting to its peers: {}", name, e.what());
            }
            return "";
          },
          [&](Quiesce&) -> std::string {
            if (auto* ucx = dynamic_cast<UcxTransport*>(st.setup.peer_transport.get())) ucx->quiesce();
            return "";
          },
          [&](Shutdown&) { done = true; }, lost,
          caf::after(std::chrono::seconds(120)) >> [&] {
            if (st.actors.empty()) {  // never assigned: the coordinator is not driving us
              std::fprintf(stderr, "maestro-run: error: %s: no assignment from the coordinator within 120 s\n",
                           name.c_str());
              status = 1;
              done = true;
            }
          });
    stop_local(st);
  }
  return status;
}

}  // namespace maestro
