// The repl actor (repl.h).
#include "actors/repl.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "actors/messages.h"
#include "actors/repl_command.h"
#include "log/log.h"

namespace maestro {

namespace {

using json = nlohmann::json;
using Kind = ReplCommand::Kind;
using Answer = std::function<void(std::string)>;

struct ReplState {
  ReplConfig cfg;
  std::chrono::steady_clock::time_point begin = std::chrono::steady_clock::now();
};
using Self = caf::stateful_actor<ReplState>;

json to_json(const ActorInfo& i) {
  json detail = json::parse(i.detail, nullptr, false);
  return {{"name", i.name},       {"kind", i.kind},     {"section", i.section}, {"stage", i.stage},
          {"replica", i.replica}, {"process", i.process}, {"host", i.host},     {"device", i.device},
          {"mailbox", i.mailbox}, {"state", i.state},   {"detail", detail.is_discarded() ? json(i.detail) : detail}};
}

// Asks every actor to describe itself; `done` gets the answers in the order
// of cfg.actors (one that failed or timed out says so in its state).
void describe_all(Self* self, std::function<void(std::vector<ActorInfo>)> done) {
  const auto& actors = self->state.cfg.actors;
  auto infos = std::make_shared<std::vector<ActorInfo>>(actors.size());
  auto left = std::make_shared<size_t>(actors.size());
  if (actors.empty()) return done({});
  for (size_t i = 0; i < actors.size(); ++i)
    self->request(actors[i], std::chrono::seconds(1), Describe{})
        .then(
            [=](ActorInfo& a) {
              (*infos)[i] = std::move(a);
              if (--*left == 0) done(std::move(*infos));
            },
            [=](caf::error& err) {
              (*infos)[i].name = fmt::format("actor #{}", i);
              (*infos)[i].state = "no answer: " + caf::to_string(err);
              if (--*left == 0) done(std::move(*infos));
            });
}

// The tp ranks of every replica with tp > 1, each a row after its replica:
// the rank's compute worker as its replica sees it (what it was handed and
// has not answered; the replica's `detail.ranks`). A worker busy computing
// is not asked itself: it answers nothing until its task is done.
std::vector<ActorInfo> with_tp_ranks(const std::vector<ActorInfo>& infos) {
  std::vector<ActorInfo> out;
  for (const ActorInfo& i : infos) {
    out.push_back(i);
    if (i.kind != "section-replica") continue;
    const json d = json::parse(i.detail, nullptr, false);
    if (d.is_discarded() || !d.contains("ranks") || d["ranks"].size() < 2) continue;
    const std::string base = i.name.ends_with(" replica") ? i.name.substr(0, i.name.size() - 8) : i.name;
    for (const json& r : d["ranks"]) {
      ActorInfo t = i;
      t.name = fmt::format("{} tp{}", base, r.value("rank", 0));
      t.kind = "tp-rank";
      t.mailbox = r.value("queued", int64_t(0));
      t.state = r.value("state", std::string("?"));
      t.detail = json{{"replica", i.name}, {"rank", r.value("rank", 0)}, {"actor", r.value("actor", uint64_t(0))}}.dump();
      out.push_back(std::move(t));
    }
  }
  return out;
}

std::string topology_text(const std::vector<ActorInfo>& infos) {
  std::string out = fmt::format("{:<24} {:<16} {:>8} {:<12} {:<6} {:>7}  {}\n", "ACTOR", "KIND", "PROCESS", "HOST",
                                "DEVICE", "MAILBOX", "STATE");
  for (const ActorInfo& i : infos)
    out += fmt::format("{:<24} {:<16} {:>8} {:<12} {:<6} {:>7}  {}\n", i.name, i.kind, i.process, i.host, i.device,
                       i.mailbox, i.state);
  out += fmt::format("{} actors\n", infos.size());
  return out;
}

const char* mode_name(Mode m) { return m == Mode::Train ? "train" : "frozen"; }
const char* flow_name(FlowKind k) { return k == FlowKind::Activations ? "activations" : "logits"; }

std::string sections_answer(const ReplState& st, bool as_json) {
  const SectionGraph& g = *st.cfg.graph;
  json j = json::array();
  std::string out = fmt::format("{:<16} {:<7} {:>3} {:>3} {:>3} {:>11} {:>7} {:>12}\n", "SECTION", "MODE", "TP", "PP",
                                "DP", "MICRO_BATCH", "DEVICES", "PARAMS");
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const SectionPlan& p = st.cfg.plan->sections[s];
    j.push_back({{"name", g.nodes[s].name}, {"mode", mode_name(g.section(int(s)).mode)}, {"tp", p.tp}, {"pp", p.pp},
                 {"dp", p.dp}, {"micro_batch", p.micro_batch}, {"devices", p.devices}, {"params", g.nodes[s].params}});
    out += fmt::format("{:<16} {:<7} {:>3} {:>3} {:>3} {:>11} {:>7} {:>12}\n", g.nodes[s].name,
                       mode_name(g.section(int(s)).mode), p.tp, p.pp, p.dp, p.micro_batch, p.devices, g.nodes[s].params);
  }
  return as_json ? json{{"sections", j}}.dump() : out;
}

std::string plan_answer(const ReplState& st, bool as_json) {
  const SectionGraph& g = *st.cfg.graph;
  const Plan& plan = *st.cfg.plan;
  json j = json::object();
  std::string out;
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const SectionPlan& p = plan.sections[s];
    j[g.nodes[s].name] = {{"first_device", p.first_device}, {"devices", p.devices}, {"tp", p.tp}, {"pp", p.pp},
                          {"dp", p.dp}, {"micro_batch", p.micro_batch}};
    out += fmt::format("{}: devices {}-{}, tp {}, pp {}, dp {}, micro_batch {}\n", g.nodes[s].name, p.first_device,
                       p.first_device + p.devices - 1, p.tp, p.pp, p.dp, p.micro_batch);
  }
  out += fmt::format("in-flight cap: {} micro-batches per replica\n", plan.in_flight_cap);
  return as_json ? json{{"plan", j}, {"in_flight_cap", plan.in_flight_cap}}.dump() : out;
}

std::string graph_answer(const ReplState& st, bool as_json) {
  const SectionGraph& g = *st.cfg.graph;
  json flows = json::array();
  std::string out;
  for (int s : g.topo_order) {
    out += g.nodes[size_t(s)].name;
    if (g.nodes[size_t(s)].has_loss) out += " (loss)";
    out += "\n";
    for (int e : g.nodes[size_t(s)].consumers)
      out += fmt::format("  -> {} ({})\n", g.nodes[size_t(g.edges[size_t(e)].to)].name, flow_name(g.edges[size_t(e)].kind));
  }
  for (const GraphEdge& e : g.edges)
    flows.push_back({{"from", g.nodes[size_t(e.from)].name}, {"to", g.nodes[size_t(e.to)].name}, {"kind", flow_name(e.kind)}});
  json order = json::array();
  for (int s : g.topo_order) order.push_back(g.nodes[size_t(s)].name);
  return as_json ? json{{"sections", order}, {"flows", flows}}.dump() : out;
}

std::string wave_answer(const ActorInfo& scheduler, bool as_json) {
  const json d = json::parse(scheduler.detail, nullptr, false);
  if (d.is_discarded() || !d.contains("wave")) return "error: the scheduler gave no frontier";
  if (as_json) return json{{"step", d["step"]}, {"state", scheduler.state}, {"wave", d["wave"]}}.dump();
  std::string out = fmt::format("step {}: {}\n", d["step"].get<int64_t>(), scheduler.state);
  if (d["wave"].empty()) return out + "no step in flight\n";
  out += fmt::format("{:<16} {:>6} {:>10} {:>6} {:>8}\n", "SECTION", "DONE", "IN_FLIGHT", "READY", "WAITING");
  for (const auto& [name, w] : d["wave"].items())
    out += fmt::format("{:<16} {:>6} {:>10} {:>6} {:>8}\n", name, w["done"].get<int64_t>(), w["in_flight"].get<int64_t>(),
                       w.value("ready", int64_t(0)), w["waiting"].get<int64_t>());
  return out;
}

std::string stats_answer(const ReplState& st, const std::vector<ActorInfo>& infos, const std::string& section,
                         bool as_json) {
  const json sched = json::parse(infos.at(0).detail, nullptr, false);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.begin).count();
  if (!section.empty() && st.cfg.graph->find(section) < 0) return fmt::format("error: stats: no section '{}'", section);
  json replicas = json::array();
  for (const ActorInfo& i : infos) {
    if (i.kind != "section-replica" || (!section.empty() && i.section != section)) continue;
    const json d = json::parse(i.detail, nullptr, false);
    if (d.is_discarded()) continue;
    const double busy = d.value("busy_s", 0.0);
    replicas.push_back({{"name", i.name},
                        {"section", i.section},
                        {"process", i.process},
                        {"tasks_done", d.value("tasks_done", int64_t(0))},
                        {"busy_s", busy},
                        {"busy_share", elapsed > 0 ? busy / elapsed : 0.0},
                        {"memory_bytes", d.value("memory_bytes", int64_t(0))},
                        {"bytes_in", d.value("bytes_in", int64_t(0))},
                        {"bytes_out", d.value("bytes_out", int64_t(0))}});
  }
  json out = {{"step", sched.value("step", int64_t(0))},
              {"samples", sched.value("samples", int64_t(0))},
              {"samples_per_s", sched.value("samples_per_s", 0.0)},
              {"tokens_per_s", sched.value("tokens_per_s", 0.0)},
              {"last_loss", sched.contains("last_loss") ? sched["last_loss"] : json(nullptr)},
              {"replicas", replicas}};
  if (as_json) return out.dump();
  std::string text = fmt::format("steps done {}, samples {}, {:.2f} samples/s, {:.0f} tokens/s, last loss {}\n",
                                 out["step"].get<int64_t>(), out["samples"].get<int64_t>(),
                                 out["samples_per_s"].get<double>(), out["tokens_per_s"].get<double>(),
                                 out["last_loss"].is_null() ? std::string("-") : fmt::format("{:.6f}", out["last_loss"].get<double>()));
  text += fmt::format("{:<24} {:>6} {:>9} {:>5} {:>9} {:>9} {:>9}\n", "REPLICA", "TASKS", "BUSY_S", "BUSY", "MEM_MB",
                      "IN_MB", "OUT_MB");
  auto mb = [](const json& v) { return v.get<int64_t>() / 1048576.0; };
  for (const json& r : replicas)
    text += fmt::format("{:<24} {:>6} {:>9.3f} {:>4.0f}% {:>9.2f} {:>9.2f} {:>9.2f}\n", r["name"].get<std::string>(),
                        r["tasks_done"].get<int64_t>(), r["busy_s"].get<double>(), 100 * r["busy_share"].get<double>(),
                        mb(r["memory_bytes"]), mb(r["bytes_in"]), mb(r["bytes_out"]));
  return text;
}

std::string actor_answer(const std::vector<ActorInfo>& infos, const std::string& name, bool as_json) {
  for (const ActorInfo& i : infos) {
    if (i.name != name) continue;
    if (as_json) return to_json(i).dump();
    std::string out;
    const json j = to_json(i);
    for (auto it = j.begin(); it != j.end(); ++it)
      out += fmt::format("{:<9} {}\n", it.key() + ":", it->is_string() ? it->get<std::string>() : it->dump());
    return out;
  }
  return fmt::format("error: actor: no actor named '{}' (see topology)", name);
}

void steer(Self* self, const std::string& line, int32_t kind, int64_t count, bool as_json, Answer answer) {
  self->request(self->state.cfg.scheduler, std::chrono::seconds(600), SteerRun{kind, count})
      .then(
          [=](const std::string& s) {
            const bool ok = !s.starts_with("error: ");
            log(ok ? LogLevel::Info : LogLevel::Warn, "repl: {}: {}", line, ok ? s : s.substr(7));
            answer(as_json ? json{{"ok", ok}, {"message", ok ? s : s.substr(7)}}.dump() : s);
          },
          [=](caf::error& err) { answer("error: the scheduler did not answer: " + caf::to_string(err)); });
}

void execute(Self* self, const std::string& line, Answer answer) {
  const ReplParse p = parse_repl_command(line);
  if (!p.ok) return answer("error: " + p.error);
  const ReplCommand& c = p.command;
  const ReplState& st = self->state;
  const bool j = c.json;
  switch (c.kind) {
    case Kind::Empty: return answer("");
    case Kind::Help: return answer(repl_help(c.arg));
    case Kind::Sections: return answer(sections_answer(st, j));
    case Kind::Plan: return answer(plan_answer(st, j));
    case Kind::Graph: return answer(graph_answer(st, j));
    case Kind::Topology:
      return describe_all(self, [=](std::vector<ActorInfo> described) {
        const std::vector<ActorInfo> infos = with_tp_ranks(described);
        if (!j) return answer(topology_text(infos));
        json a = json::array();
        for (const ActorInfo& i : infos) a.push_back(to_json(i));
        answer(json{{"actors", a}, {"count", infos.size()}}.dump());
      });
    case Kind::Actor:
      return describe_all(self, [=](std::vector<ActorInfo> infos) { answer(actor_answer(with_tp_ranks(infos), c.arg, j)); });
    case Kind::Wave:
      return describe_all(self, [=](std::vector<ActorInfo> infos) { answer(wave_answer(infos.at(0), j)); });
    case Kind::Stats:
      return describe_all(self, [=](std::vector<ActorInfo> infos) { answer(stats_answer(self->state, infos, c.arg, j)); });
    case Kind::Pause: return steer(self, line, SteerRun::Pause, 0, j, answer);
    case Kind::Resume: return steer(self, line, SteerRun::Resume, 0, j, answer);
    case Kind::Step: return steer(self, line, SteerRun::Step, c.count, j, answer);
    case Kind::Checkpoint: return steer(self, line, SteerRun::Checkpoint, 0, j, answer);
    case Kind::Quit: return steer(self, line, SteerRun::Quit, 0, j, answer);
    case Kind::TraceStart:
    case Kind::TraceStop:
      self->request(self->state.cfg.tracer, std::chrono::seconds(60), RecordTrace{c.kind == Kind::TraceStart, c.arg})
          .then(
              [=](const std::string& s) {
                log(s.starts_with("error: ") ? LogLevel::Warn : LogLevel::Info, "repl: {}: {}", line, s);
                answer(s);
              },
                [=](caf::error& err) { answer("error: the tracer did not answer: " + caf::to_string(err)); });
      return;
    case Kind::LogLevel: {
      const LogLevel was = log_level();
      if (c.arg.empty())
        return answer(j ? json{{"ok", true}, {"level", log_level_name(was)}}.dump()
                        : fmt::format("log level {} (of {})", log_level_name(was), log_level_names()));
      const LogLevel now = *parse_log_level(c.arg);  // the parser checked it
      set_log_level(now);
      log(LogLevel::Info, "repl: log level {} (was {})", log_level_name(now), log_level_name(was));
      return answer(j ? json{{"ok", true}, {"level", log_level_name(now)}, {"was", log_level_name(was)}}.dump()
                      : fmt::format("log level {} (was {}); lines go to the run's stderr", log_level_name(now),
                                    log_level_name(was)));
    }
    case Kind::Detach: return answer(j ? json{{"ok", true}, {"message", "detached"}}.dump() : "detached; the run goes on");
  }
  answer("error: unhandled command");
}

caf::behavior repl(Self* self, ReplConfig cfg) {
  self->state.cfg = std::move(cfg);
  return {
      [=](const std::string& line) {
        auto rp = self->make_response_promise<std::string>();
        execute(self, line, [rp](std::string s) mutable { rp.deliver(std::move(s)); });
        return rp;
      },
  };
}

}  // namespace

caf::actor spawn_repl(caf::actor_system& sys, ReplConfig config) { return sys.spawn(repl, std::move(config)); }

std::string ask_repl(caf::actor_system& sys, const caf::actor& repl, const std::string& line, caf::duration timeout) {
  caf::scoped_actor self{sys};
  std::string out;
  self->request(repl, timeout, line)
      .receive([&](std::string& s) { out = std::move(s); },
               [&](caf::error& err) { out = "error: the REPL did not answer: " + caf::to_string(err); });
  return out;
}

}  // namespace maestro
