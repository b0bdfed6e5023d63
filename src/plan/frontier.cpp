// Frontier: which tasks may start as tasks complete (see frontier.h).
#include "plan/frontier.h"

#include <algorithm>
#include <functional>
#include <map>
#include <vector>

namespace maestro {

namespace {
void heap_push(std::vector<int64_t>& heap, int64_t v) {
  heap.push_back(v);
  std::push_heap(heap.begin(), heap.end(), std::greater<>());
}
int64_t heap_pop(std::vector<int64_t>& heap) {
  std::pop_heap(heap.begin(), heap.end(), std::greater<>());
  const int64_t v = heap.back();
  heap.pop_back();
  return v;
}
}  // namespace

Frontier::Frontier(const Schedule& schedule) : cap_(schedule.in_flight_cap) {
  const auto& tasks = schedule.tasks;
  const size_t n = tasks.size();
  remaining_deps_.resize(n);
  dependents_offsets_.assign(n + 1, 0);
  for (const Task& t : tasks) {
    remaining_deps_[size_t(t.id)] = int32_t(t.deps.size());
    for (int64_t d : t.deps) dependents_offsets_[size_t(d) + 1]++;
  }
  for (size_t k = 0; k < n; ++k) dependents_offsets_[k + 1] += dependents_offsets_[k];
  dependents_.resize(size_t(dependents_offsets_.back()));
  {
    std::vector<int64_t> fill(dependents_offsets_.begin(), dependents_offsets_.end() - 1);
    for (const Task& t : tasks)
      for (int64_t d : t.deps) dependents_[size_t(fill[size_t(d)]++)] = t.id;
  }
  // Micro-batches and who feeds whom (forward on forward, across sections).
  mb_base_.assign(schedule.sections.size() + 1, 0);
  for (size_t s = 0; s < schedule.sections.size(); ++s)
    mb_base_[s + 1] = mb_base_[s] + int64_t(schedule.sections[s].micro_batches.size());
  const size_t n_mbs = size_t(mb_base_.back());
  mb_of_task_.resize(n);
  for (const Task& t : tasks) mb_of_task_[size_t(t.id)] = mb_base_[size_t(t.section)] + t.micro_batch;
  std::vector<std::pair<int64_t, int64_t>> feeds;  // (consumer mb, producer mb)
  for (const Task& t : tasks)
    if (t.kind == Task::Kind::Forward)
      for (int64_t d : t.deps)
        if (tasks[size_t(d)].kind == Task::Kind::Forward && tasks[size_t(d)].section != t.section)
          feeds.emplace_back(mb_of_task_[size_t(t.id)], mb_of_task_[size_t(d)]);
  std::sort(feeds.begin(), feeds.end());
  feeds.erase(std::unique(feeds.begin(), feeds.end()), feeds.end());
  feeders_offsets_.assign(n_mbs + 1, 0);
  std::vector<char> feeds_someone(n_mbs, 0);
  for (const auto& [c, p] : feeds) feeders_offsets_[size_t(c) + 1]++, feeds_someone[size_t(p)] = 1;
  for (size_t k = 0; k < n_mbs; ++k) feeders_offsets_[k + 1] += feeders_offsets_[k];
  for (const auto& f : feeds) feeders_.push_back(f.second);  // sorted by consumer: already in CSR order
  admitted_.assign(n_mbs, cap_ == 0 ? 1 : 0);
  parked_.resize(n_mbs);
  // Window slots: (section, replica) of the micro-batches nothing feeds on;
  // each finishes with its last task in issue order.
  window_of_task_.assign(n, -1);
  if (cap_ > 0) {
    std::vector<int64_t> last_task(n_mbs, -1);
    for (const Task& t : tasks) last_task[size_t(mb_of_task_[size_t(t.id)])] = t.id;
    std::map<std::pair<int, int64_t>, int64_t> slot_of;
    for (size_t s = 0; s < schedule.sections.size(); ++s)
      for (const MicroBatch& mb : schedule.sections[s].micro_batches) {
        const int64_t m = mb_base_[s] + mb.id;
        if (feeds_someone[size_t(m)] || last_task[size_t(m)] < 0) continue;
        auto [it, fresh] = slot_of.try_emplace({int(s), mb.replica}, int64_t(window_mbs_.size()));
        if (fresh) window_mbs_.emplace_back();
        window_mbs_[size_t(it->second)].push_back(m);
        window_of_task_[size_t(last_task[size_t(m)])] = it->second;
      }
    window_next_.assign(window_mbs_.size(), 0);
    window_open_.assign(window_mbs_.size(), 0);
  }
  for (const Task& t : tasks)
    if (t.deps.empty()) make_ready(t.id);
  for (size_t slot = 0; slot < window_mbs_.size(); ++slot)
    while (window_open_[slot] < cap_ && admit_next(int64_t(slot))) {
    }
}

void Frontier::make_ready(int64_t task) {
  const int64_t mb = mb_of_task_[size_t(task)];
  if (admitted_[size_t(mb)]) heap_push(ready_, task);
  else parked_[size_t(mb)].push_back(task);
}

void Frontier::admit(int64_t first) {
  std::vector<int64_t> todo{first};
  while (!todo.empty()) {
    const int64_t mb = todo.back();
    todo.pop_back();
    if (admitted_[size_t(mb)]) continue;
    admitted_[size_t(mb)] = 1;
    for (int64_t t : parked_[size_t(mb)]) heap_push(ready_, t);
    parked_[size_t(mb)].clear();
    for (int64_t k = feeders_offsets_[size_t(mb)]; k < feeders_offsets_[size_t(mb) + 1]; ++k)
      todo.push_back(feeders_[size_t(k)]);
  }
}

bool Frontier::admit_next(int64_t slot) {
  auto& next = window_next_[size_t(slot)];
  const auto& mbs = window_mbs_[size_t(slot)];
  if (next >= mbs.size()) return false;
  window_open_[size_t(slot)]++;
  const size_t k = next++;
  admit(mbs[k]);
  // Lookahead: the producers of the window micro-batch one window further on
  // start now, so that its inputs are there when it is admitted.
  if (k + size_t(cap_) < mbs.size())
    for (int64_t f = feeders_offsets_[size_t(mbs[k + size_t(cap_)])]; f < feeders_offsets_[size_t(mbs[k + size_t(cap_)]) + 1]; ++f)
      admit(feeders_[size_t(f)]);
  return true;
}

std::vector<int64_t> Frontier::take_ready() {
  if (ready_.empty() && running_ == 0 && !finished()) {
    // Nothing can move: admit the window micro-batch issued first, beyond the cap.
    int64_t best = -1;
    for (size_t slot = 0; slot < window_mbs_.size(); ++slot)
      if (window_next_[slot] < window_mbs_[slot].size() &&
          (best < 0 || window_mbs_[slot][window_next_[slot]] < window_mbs_[size_t(best)][window_next_[size_t(best)]]))
        best = int64_t(slot);
    if (best >= 0) {
      admit_next(best);
      forced_++;
    }
  }
  std::vector<int64_t> out;
  while (!ready_.empty()) out.push_back(heap_pop(ready_));
  running_ += int64_t(out.size());
  return out;
}

void Frontier::complete(int64_t task) {
  running_--;
  completed_++;
  if (const int64_t slot = window_of_task_[size_t(task)]; slot >= 0) {
    window_open_[size_t(slot)]--;
    while (window_open_[size_t(slot)] < cap_ && admit_next(slot)) {
    }
  }
  for (int64_t k = dependents_offsets_[size_t(task)]; k < dependents_offsets_[size_t(task) + 1]; ++k)
    if (--remaining_deps_[size_t(dependents_[size_t(k)])] == 0) make_ready(dependents_[size_t(k)]);
}

}  // namespace maestro
