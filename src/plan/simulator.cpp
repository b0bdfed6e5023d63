// The discrete-event simulator and the lower bound (see simulator.h and
// docs/scheduler.md, "The simulator").
#include "plan/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <set>
#include <span>
#include <stdexcept>
#include <tuple>

#include "plan/frontier.h"

namespace maestro {

namespace {

// `out` = the samples at `samples` (a scratch vector, reused).
void pointers(const Batch& batch, const std::vector<int32_t>& samples, std::vector<const Sample*>& out) {
  out.clear();
  for (int32_t i : samples) out.push_back(&batch.samples[size_t(i)]);
}

// edge_between[from][to]: the flow edge from section `from` to `to`, -1 when none.
std::vector<std::vector<int>> edge_table(const SectionGraph& g) {
  std::vector<std::vector<int>> t(g.nodes.size(), std::vector<int>(g.nodes.size(), -1));
  for (size_t e = 0; e < g.edges.size(); ++e)
    if (t[size_t(g.edges[e].from)][size_t(g.edges[e].to)] < 0) t[size_t(g.edges[e].from)][size_t(g.edges[e].to)] = int(e);
  return t;
}

// `out` = the samples of micro-batch `a` that `in_b` (another micro-batch's
// samples, sorted) holds too and the edge carries, in `a`'s order.
void carried(const SectionGraph& g, int edge, const Batch& batch, const MicroBatch& a, const std::vector<int32_t>& in_b,
             std::vector<const Sample*>& out) {
  out.clear();
  for (int32_t i : a.samples)
    if (std::binary_search(in_b.begin(), in_b.end(), i) && g.carries(edge, batch.samples[size_t(i)].modalities))
      out.push_back(&batch.samples[size_t(i)]);
}

const char* kind_name(Task::Kind k) { return k == Task::Kind::Forward ? "forward" : "backward"; }

// One replica of a section as a plan of its own (dp 1, its tp·pp devices
// from `first`): a transfer between two replicas crosses only the links
// their devices span, and costs nothing between identical device groups.
SectionPlan replica_plan(const SectionPlan& p, int64_t first) {
  SectionPlan r = p;
  r.first_device = first;
  r.dp = 1;
  r.devices = p.tp * p.pp;
  return r;
}

}  // namespace

SimResult simulate(const SectionGraph& g, const Plan& plan, const Schedule& sch, const CostModel& cost,
                   const SimOptions& options) {
  if (const auto bad = options.validate ? validate(g, plan, sch) : std::vector<std::string>{}; !bad.empty())
    throw std::invalid_argument("simulate: invalid schedule: " + bad.front());
  const int64_t devices = plan.device_count();
  const auto edges = edge_table(g);
  const size_t n_tasks = sch.tasks.size();

  SimResult r;
  r.device_busy_s.assign(size_t(devices), 0.0);
  std::vector<double> device_free(size_t(devices), 0.0), section_busy(g.nodes.size(), 0.0),
      section_end(g.nodes.size(), 0.0), section_last_backward_s(g.nodes.size(), 0.0);
  std::vector<double> data_ready(n_tasks, 0.0);
  r.task_start_s.assign(n_tasks, 0.0);
  r.task_end_s.assign(n_tasks, 0.0);
  // Each micro-batch's costs, the same on every pipeline stage (computed
  // once, at its first task): its forward and backward seconds, and per
  // device of a stage all of its activations (while its forward or backward
  // runs) and what it keeps in between (less for a stage recomputed whole:
  // CostModel::kept_activation_bytes).
  struct MicroBatchCost {
    bool known = false;
    double forward_s = 0, backward_s = 0;
    int64_t act_bytes = 0, kept_bytes = 0;
  };
  std::vector<std::vector<MicroBatchCost>> mb_cost(g.nodes.size());
  for (size_t s = 0; s < g.nodes.size(); ++s) mb_cost[s].resize(sch.sections[s].micro_batches.size());
  std::vector<const Sample*> ptrs, moved;  // scratch
  // Each micro-batch's samples sorted, made when a transfer first needs them.
  std::vector<std::vector<std::vector<int32_t>>> sorted_samples(g.nodes.size());
  for (size_t s = 0; s < g.nodes.size(); ++s) sorted_samples[s].resize(sch.sections[s].micro_batches.size());
  auto cost_of = [&](const Task& t) -> const MicroBatchCost& {
    MicroBatchCost& c = mb_cost[size_t(t.section)][size_t(t.micro_batch)];
    if (!c.known) {
      pointers(sch.batch, sch.micro_batch_of(t).samples, ptrs);
      const SectionPlan& sp = plan.sections[size_t(t.section)];
      const CostModel::MicroBatchCosts m = cost.micro_batch_costs(t.section, ptrs, sp);
      c = {true, m.forward_s, m.backward_s, m.activation_bytes, m.kept_activation_bytes};
    }
    return c;
  };
  // A change of in-flight activations on each device of [first, last): the
  // devices of one task's stage.
  struct MemoryDelta {
    double time;
    int64_t bytes;  // negative first at equal times
    int64_t first, last;
    int section;
    bool operator<(const MemoryDelta& o) const { return std::tie(time, bytes, first) < std::tie(o.time, o.bytes, o.first); }
  };
  // Pending deltas, a min-heap (earliest first). Every delta is made at or
  // after the time of the event that makes it, so once the clock passes a
  // time the deltas before it are final: they are swept into each device's
  // in-flight bytes as the events go, in time order, and the step stops
  // where a device is over SimOptions::memory_limit_bytes.
  std::vector<MemoryDelta> memory;
  auto later_delta = [](const MemoryDelta& a, const MemoryDelta& b) { return b < a; };
  std::vector<int64_t> weights(size_t(devices), 0), current(size_t(devices), 0), peak(size_t(devices), 0);
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const SectionPlan& sp = plan.sections[s];
    const int64_t w = cost.weights_bytes_per_device(int(s), sp);
    for (int64_t d = sp.first_device; d < sp.first_device + sp.devices; ++d) weights[size_t(d)] += w;
  }
  // With memory_breakdown, each section's share of a device's activations, kept at its peak.
  std::vector<std::vector<int64_t>> by_section(options.memory_breakdown ? size_t(devices) : 0,
                                               std::vector<int64_t>(g.nodes.size(), 0));
  if (options.memory_breakdown) r.peak_activations_by_section = by_section;
  bool over_memory = false;
  auto sweep = [&](double before) {
    while (!memory.empty() && memory.front().time < before) {
      std::pop_heap(memory.begin(), memory.end(), later_delta);
      const MemoryDelta m = memory.back();
      memory.pop_back();
      for (int64_t device = m.first; device < m.last; ++device) {
        const size_t d = size_t(device);
        current[d] += m.bytes;
        if (options.memory_breakdown) {
          by_section[d][size_t(m.section)] += m.bytes;
          if (current[d] > peak[d]) r.peak_activations_by_section[d] = by_section[d];
        }
        peak[d] = std::max(peak[d], current[d]);
        over_memory = over_memory || weights[d] + peak[d] > options.memory_limit_bytes;
      }
    }
  };
  auto peaks = [&] {
    r.peak_memory_bytes.resize(size_t(devices));
    for (size_t d = 0; d < size_t(devices); ++d) r.peak_memory_bytes[d] = weights[d] + peak[d];
  };
  std::map<std::tuple<int, int64_t, int, int64_t>, double> link_free;  // (from section, replica, to section, replica)
  // SimOptions::resident_handoff_budget: the bytes each task that handed
  // something on keeps on its device until the task that takes it starts
  // (per waiting task: bytes, device, holder), and each holder's — a
  // replica's stage, (section, replica, stage) — bytes kept now.
  struct Held {
    int64_t bytes, device;
    std::tuple<int, int64_t, int64_t> holder;
    int section;
  };
  std::map<int64_t, std::vector<Held>> held_until_start;
  std::map<std::tuple<int, int64_t, int64_t>, int64_t> holder_bytes;
  // Task t, ended at `now`, hands `bytes` to task u: kept on the first
  // device of t's stage (a forward: the producer's last stage; a backward:
  // the consumer's first, or the next stage's) until u starts, within t's
  // replica stage's budget; past it, through host memory (not counted).
  auto hold = [&](double now, const Task& t, const Task& u, int64_t bytes) {
    const std::tuple<int, int64_t, int64_t> holder{t.section, t.replica, t.stage};
    int64_t& kept = holder_bytes[holder];
    if (bytes <= 0 || kept + bytes > options.resident_handoff_budget) return;
    kept += bytes;
    const int64_t device = stage_first_device(plan.sections[size_t(t.section)], t.replica, t.stage);
    memory.push_back({now, bytes, device, device + 1, t.section});
    std::push_heap(memory.begin(), memory.end(), later_delta);
    held_until_start[u.id].push_back({bytes, device, holder, t.section});
  };
  // The tasks that wait on each task, in id order: task d's are
  // waiters[waiters_begin[d] .. waiters_begin[d + 1]).
  std::vector<int64_t> waiters_begin(n_tasks + 1, 0), waiters;
  for (const Task& t : sch.tasks)
    for (int64_t d : t.deps) ++waiters_begin[size_t(d) + 1];
  std::partial_sum(waiters_begin.begin(), waiters_begin.end(), waiters_begin.begin());
  waiters.resize(size_t(waiters_begin.back()));
  {
    std::vector<int64_t> next(waiters_begin.begin(), waiters_begin.end() - 1);
    for (const Task& t : sch.tasks)
      for (int64_t d : t.deps) waiters[size_t(next[size_t(d)]++)] = t.id;
  }
  auto dependents = [&](size_t d) {
    return std::span<const int64_t>(waiters.data() + waiters_begin[d], waiters.data() + waiters_begin[d + 1]);
  };

  // Each task's duration, and with critical_path_first its priority: the
  // duration plus the longest chain of dependents after it (dependents
  // come later in issue order).
  std::vector<double> task_s(n_tasks), priority(n_tasks, 0.0);
  for (const Task& t : sch.tasks)
    task_s[size_t(t.id)] = t.kind == Task::Kind::Forward ? cost_of(t).forward_s : cost_of(t).backward_s;
  if (options.give_up_at < std::numeric_limits<double>::infinity()) {
    // Each device's busy time, summed in another order than the events
    // would: hence the margin, far above the rounding of these sums.
    std::vector<double> busy(size_t(devices), 0.0);
    for (const Task& t : sch.tasks) {
      const SectionPlan& sp = plan.sections[size_t(t.section)];
      const int64_t first = stage_first_device(sp, t.replica, t.stage);
      for (int64_t d = first; d < first + sp.tp; ++d) busy[size_t(d)] += task_s[size_t(t.id)];
    }
    for (size_t s = 0; s < g.nodes.size(); ++s) {
      if (!sch.sections[s].backward) continue;
      const SectionPlan& sp = plan.sections[s];
      const double end_work =
          cost.optimizer_s(int(s), sp) + (plan.levers.overlap_grad_sync ? 0.0 : cost.grad_sync_s(int(s), sp));
      for (int64_t d = sp.first_device; d < sp.first_device + sp.devices; ++d) busy[size_t(d)] += end_work;
    }
    const double most = busy.empty() ? 0.0 : *std::max_element(busy.begin(), busy.end());
    if (most * (1 - 1e-9) >= options.give_up_at) {
      r.gave_up = true;
      r.iteration_s = most;
      return r;
    }
  }
  const bool by_priority = plan.levers.critical_path_first;
  if (by_priority) {
    for (size_t i = n_tasks; i-- > 0;) {
      double after = 0;
      for (int64_t c : dependents(i)) after = std::max(after, priority[size_t(c)]);
      priority[i] = task_s[i] + after;
    }
  }

  // Events in time order; at equal times task ends come before tasks
  // becoming ready (a completion may free what a start needs), then the
  // devices choose among the ready (kDispatch), then by task id.
  enum EventKind { kEnd = 0, kReady = 1, kDispatch = 2 };
  struct Event {
    double time;
    int kind;
    int64_t id;
    bool operator>(const Event& o) const {
      if (time != o.time) return time > o.time;
      return kind != o.kind ? kind > o.kind : id > o.id;
    }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  Frontier frontier(sch);
  auto release = [&](double now) {
    for (int64_t id : frontier.take_ready()) events.push({std::max(now, data_ready[size_t(id)]), kReady, id});
  };
  // critical_path_first: the ready tasks waiting for each device, highest
  // priority first (a task waits on each of its tp devices).
  using Waiting = std::pair<double, int64_t>;  // (-priority, task id)
  std::vector<std::set<Waiting>> waiting(by_priority ? size_t(devices) : 0);
  auto devices_of = [&](const Task& t) {
    const SectionPlan& sp = plan.sections[size_t(t.section)];
    const int64_t first = stage_first_device(sp, t.replica, t.stage);
    return std::pair<int64_t, int64_t>{first, first + sp.tp};
  };
  std::vector<int64_t> starting;  // tasks that take their devices now
  std::vector<char> blocked(by_priority ? size_t(devices) : 0, 0);
  std::vector<int64_t> touched;
  // The waiting tasks on devices [lo, hi), best first: each starts when all
  // its devices are free and no better task waits on any of them.
  std::vector<std::set<Waiting>::iterator> at;  // dispatch's cursor per device
  auto dispatch = [&](double now, int64_t lo, int64_t hi) {
    // The devices' queues merged best first; done once every device of
    // [lo, hi) is taken or promised to a better task.
    at.clear();
    for (int64_t d = lo; d < hi; ++d) at.push_back(waiting[size_t(d)].begin());
    for (int64_t closed = 0; closed < hi - lo;) {
      std::optional<Waiting> best;
      for (int64_t k = 0; k < hi - lo; ++k)
        if (at[size_t(k)] != waiting[size_t(lo + k)].end() && (!best || *at[size_t(k)] < *best)) best = *at[size_t(k)];
      if (!best) break;
      for (int64_t k = 0; k < hi - lo; ++k)
        if (at[size_t(k)] != waiting[size_t(lo + k)].end() && *at[size_t(k)] == *best) ++at[size_t(k)];
      const auto [first, last] = devices_of(sch.tasks[size_t(best->second)]);
      bool free = true;
      for (int64_t d = first; d < last; ++d) {
        free = free && !blocked[size_t(d)] && device_free[size_t(d)] <= now;
        if (blocked[size_t(d)]) continue;
        blocked[size_t(d)] = 1, touched.push_back(d);
        closed += d >= lo && d < hi ? 1 : 0;
      }
      if (!free) continue;
      for (int64_t d = first; d < last; ++d) waiting[size_t(d)].erase(*best);
      starting.push_back(best->second);
    }
    for (int64_t d : touched) blocked[size_t(d)] = 0;
    touched.clear();
  };
  // A task takes its devices: at `now`, or when they are free (first
  // ready, first served).
  auto start_task = [&](double now, int64_t id) {
    const Task& t = sch.tasks[size_t(id)];
    const SectionPlan& sp = plan.sections[size_t(t.section)];
    const MicroBatch& mb = sch.micro_batch_of(t);
    const int64_t first = stage_first_device(sp, t.replica, t.stage);
    double start = now;
    for (int64_t d = first; d < first + sp.tp; ++d) start = std::max(start, device_free[size_t(d)]);
    const double duration = task_s[size_t(id)];
    const double end = start + duration;
    r.task_start_s[size_t(id)] = start;
    r.task_end_s[size_t(id)] = end;
    for (int64_t d = first; d < first + sp.tp; ++d) {
      device_free[size_t(d)] = end;
      r.device_busy_s[size_t(d)] += duration;
      if (options.trace)
        r.spans.push_back(TraceSpan{
            fmt::format("{} {} mb{} r{} s{}", g.nodes[size_t(t.section)].name, t.kind == Task::Kind::Forward ? "F" : "B",
                        t.micro_batch, t.replica, t.stage),
            kind_name(t.kind), d, start, duration,
            nlohmann::json{{"section", g.nodes[size_t(t.section)].name}, {"micro_batch", t.micro_batch},
                           {"replica", t.replica}, {"stage", t.stage}, {"samples", mb.samples.size()}, {"task", id}}});
    }
    section_busy[size_t(t.section)] += duration * double(sp.tp);
    if (end >= section_end[size_t(t.section)]) {
      section_end[size_t(t.section)] = end;
      section_last_backward_s[size_t(t.section)] = t.kind == Task::Kind::Backward ? duration : 0.0;
    }
    // Activations: held from a forward's start until its backward ends
    // (train) or its own end (frozen); a stage recomputed whole drops all
    // but its input from its forward's end to its backward's start.
    auto add = [&](double time, int64_t bytes) {
      if (bytes == 0) return;
      memory.push_back({time, bytes, first, first + sp.tp, t.section});
      std::push_heap(memory.begin(), memory.end(), later_delta);
    };
    if (auto held = held_until_start.find(id); held != held_until_start.end()) {  // taken in: no longer held
      for (const Held& h : held->second) {
        memory.push_back({start, -h.bytes, h.device, h.device + 1, h.section});
        std::push_heap(memory.begin(), memory.end(), later_delta);
        holder_bytes[h.holder] -= h.bytes;
      }
      held_until_start.erase(held);
    }
    const MicroBatchCost& c = cost_of(t);
    if (t.kind == Task::Kind::Forward) {
      add(start, c.act_bytes);
      add(end, sch.sections[size_t(t.section)].backward ? c.kept_bytes - c.act_bytes : -c.act_bytes);
    } else {
      add(start, c.act_bytes - c.kept_bytes);
      add(end, -c.act_bytes);
    }
    events.push({end, kEnd, id});
  };
  // Dispatch events always fall at the current time, after every end and
  // ready event there: they wait apart, a min-heap of task ids, and run
  // when no other event is left at that time (half the main queue's work).
  std::vector<int64_t> dispatches;
  auto push_dispatch = [&](int64_t id) {
    dispatches.push_back(id);
    std::push_heap(dispatches.begin(), dispatches.end(), std::greater<>());
  };
  release(0.0);
  for (double clock = 0; !events.empty() || !dispatches.empty();) {
    Event next{clock, kDispatch, 0};
    if (!dispatches.empty() && (events.empty() || events.top().time > clock)) {
      std::pop_heap(dispatches.begin(), dispatches.end(), std::greater<>());
      next.id = dispatches.back();
      dispatches.pop_back();
    } else {
      next = events.top();
      events.pop();
    }
    const auto [now, kind, id] = next;
    clock = now;
    sweep(now);
    if (over_memory) {  // the rest of the step cannot lower a peak
      r.over_memory = true;
      peaks();
      return r;
    }
    if (kind == kDispatch) {
      const auto [lo, hi] = devices_of(sch.tasks[size_t(id)]);
      dispatch(now, lo, hi);
    } else if (kind == kReady && by_priority) {
      const auto [lo, hi] = devices_of(sch.tasks[size_t(id)]);
      for (int64_t d = lo; d < hi; ++d) waiting[size_t(d)].insert({-priority[size_t(id)], id});
      push_dispatch(id);
    } else if (kind == kReady) {
      starting.push_back(id);
    }
    for (const int64_t started : starting) start_task(now, started);
    starting.clear();
    if (kind != kEnd) continue;
    const Task& t = sch.tasks[size_t(id)];
    const MicroBatch& mb = sch.micro_batch_of(t);
    // A task ended: its outputs travel to its dependents, then the frontier
    // moves and its devices choose their next task.
    if (by_priority) push_dispatch(id);
    for (int64_t c : dependents(size_t(id))) {
      const Task& u = sch.tasks[size_t(c)];
      double arrival = now;
      if (u.section != t.section && u.kind == t.kind) {
        // Forward: t's section feeds u's. Backward: u's section fed t's, the gradient goes back.
        const bool forward = t.kind == Task::Kind::Forward;
        const int from = forward ? t.section : u.section, to = forward ? u.section : t.section;
        const int e = edges[size_t(from)][size_t(to)];
        if (e >= 0) {
          std::vector<int32_t>& in_t = sorted_samples[size_t(t.section)][size_t(t.micro_batch)];
          if (in_t.empty()) {
            in_t = mb.samples;
            std::sort(in_t.begin(), in_t.end());
          }
          carried(g, e, sch.batch, sch.micro_batch_of(u), in_t, moved);
          if (!moved.empty()) {
            const Task& p = forward ? t : u;  // the producer's task and the consumer's
            const Task& c = forward ? u : t;
            const SectionPlan& fp = plan.sections[size_t(from)];
            const SectionPlan& tp = plan.sections[size_t(to)];
            const double transfer =
                cost.transfer_s(g.program->flows[size_t(e)], moved, replica_plan(fp, stage_first_device(fp, p.replica, 0)),
                                replica_plan(tp, stage_first_device(tp, c.replica, 0)));
            double& link = link_free[{t.section, t.replica, u.section, u.replica}];
            arrival = std::max(now, link) + transfer;
            link = arrival;
            if (options.resident_handoff_budget > 0) hold(now, t, u, cost.transfer_bytes(g.program->flows[size_t(e)], moved));
          }
        }
      } else if (options.resident_handoff_budget > 0 && u.section == t.section && u.kind == t.kind && u.stage != t.stage) {
        // A pipeline stage hands the next its rows, or their gradient back.
        pointers(sch.batch, mb.samples, ptrs);
        hold(now, t, u, cost.stage_handoff_bytes(t.section, ptrs, plan.sections[size_t(t.section)]));
      }
      data_ready[size_t(c)] = std::max(data_ready[size_t(c)], arrival);
    }
    frontier.complete(id);
    release(now);
  }
  if (!frontier.finished()) throw std::logic_error("simulate: the frontier stopped before the step's end");
  for (double end : r.task_end_s) r.compute_end_s = std::max(r.compute_end_s, end);

  // End of step: each train section's grad sync, then optimizer step, on all
  // its devices; sections sharing devices take turns in the order their work
  // ended. The sync runs on the compute devices after the section's last
  // task, or with overlap_grad_sync on their communication link from the
  // start of its last backward (ScheduleLevers::overlap_grad_sync).
  std::vector<int> order;
  for (size_t s = 0; s < g.nodes.size(); ++s)
    if (sch.sections[s].backward) order.push_back(int(s));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return section_end[size_t(a)] < section_end[size_t(b)]; });
  std::vector<double> comm_free(size_t(devices), 0.0);
  r.iteration_s = r.compute_end_s;
  for (int s : order) {
    const SectionPlan& sp = plan.sections[size_t(s)];
    const double sync = cost.grad_sync_s(s, sp), step = cost.optimizer_s(s, sp);
    const bool overlap = plan.levers.overlap_grad_sync;
    double sync_start = section_end[size_t(s)] - (overlap ? section_last_backward_s[size_t(s)] : 0.0);
    for (int64_t d = sp.first_device; d < sp.first_device + sp.devices; ++d)
      sync_start = std::max(sync_start, overlap ? comm_free[size_t(d)] : device_free[size_t(d)]);
    const double sync_end = std::max(section_end[size_t(s)], sync_start + sync);
    double start = sync_end;
    for (int64_t d = sp.first_device; d < sp.first_device + sp.devices; ++d) start = std::max(start, device_free[size_t(d)]);
    for (int64_t d = sp.first_device; d < sp.first_device + sp.devices; ++d) {
      if (overlap) comm_free[size_t(d)] = sync_start + sync;
      device_free[size_t(d)] = start + step;
      r.device_busy_s[size_t(d)] += step + (overlap ? 0.0 : sync);
      if (options.trace) {
        const nlohmann::json args{{"section", g.nodes[size_t(s)].name}};
        r.spans.push_back(TraceSpan{g.nodes[size_t(s)].name + " grad sync", "grad_sync", d, sync_start, sync, args});
        r.spans.push_back(TraceSpan{g.nodes[size_t(s)].name + " optimizer", "optimizer", d, start, step, args});
      }
    }
    section_busy[size_t(s)] += (step + (overlap ? 0.0 : sync)) * double(sp.devices);
    r.iteration_s = std::max(r.iteration_s, start + step);
  }

  // Memory: weights of every section on the device, plus the peak of its
  // in-flight activations over time (the deltas not yet swept).
  sweep(std::numeric_limits<double>::infinity());
  peaks();
  r.over_memory = over_memory;

  r.section_utilization.resize(g.nodes.size());
  for (size_t s = 0; s < g.nodes.size(); ++s)
    r.section_utilization[s] =
        r.iteration_s > 0 ? section_busy[s] / (double(plan.sections[s].devices) * r.iteration_s) : 0.0;
  if (options.lower_bound) {
    r.lower_bound_s = lower_bound_s(g, plan, sch.batch, cost);
    r.utilization = r.iteration_s > 0 ? r.lower_bound_s / r.iteration_s : 0.0;
  }
  return r;
}

double lower_bound_s(const SectionGraph& g, const Plan& plan, const Batch& batch, const CostModel& cost) {
  const size_t n_sections = g.nodes.size();
  double work = 0, critical = 0;
  std::vector<double> forward_end(n_sections), backward_end(n_sections);
  std::vector<const Sample*> one(1);
  for (const Sample& sample : batch.samples) {
    one[0] = &sample;
    std::fill(forward_end.begin(), forward_end.end(), 0.0);
    std::fill(backward_end.begin(), backward_end.end(), 0.0);
    for (int s : g.topo_order) {
      if (!g.active(s, sample.modalities)) continue;
      const SectionPlan& sp = plan.sections[size_t(s)];
      work += cost.peak_device_s(s, sample);
      double start = 0;
      for (int e : g.nodes[size_t(s)].producers)
        if (g.carries(e, sample.modalities)) {
          const int p = g.edges[size_t(e)].from;
          start = std::max(start, forward_end[size_t(p)] + cost.transfer_s(g.program->flows[size_t(e)], one,
                                                                           replica_plan(plan.sections[size_t(p)], 0),
                                                                           replica_plan(sp, 0)));
        }
      forward_end[size_t(s)] = start + double(sp.pp) * cost.forward_s(s, one, sp);
      critical = std::max(critical, forward_end[size_t(s)]);
    }
    for (auto it = g.topo_order.rbegin(); it != g.topo_order.rend(); ++it) {
      const int s = *it;
      if (!g.active(s, sample.modalities) || g.section(s).mode != Mode::Train) continue;
      const SectionPlan& sp = plan.sections[size_t(s)];
      double start = forward_end[size_t(s)];
      for (int e : g.nodes[size_t(s)].consumers) {
        const int c = g.edges[size_t(e)].to;
        if (g.edges[size_t(e)].kind == FlowKind::Activations && g.section(c).mode == Mode::Train &&
            g.carries(e, sample.modalities))
          start = std::max(start, backward_end[size_t(c)] + cost.transfer_s(g.program->flows[size_t(e)], one,
                                                                            replica_plan(sp, 0),
                                                                            replica_plan(plan.sections[size_t(c)], 0)));
      }
      backward_end[size_t(s)] = start + double(sp.pp) * cost.backward_s(s, one, sp);
      critical = std::max(critical, backward_end[size_t(s)]);
    }
  }
  return std::max(work / double(std::max<int64_t>(1, plan.device_count())), critical);
}

}  // namespace maestro
