// Several parts of a model that take turns on the same devices — the
// sequential baseline's sections, MIMO's colocated modules — each with a
// few ways to run: choose one way per part for the least sum of their
// times such that a device holds what every part keeps there all step
// (`resident`: parameter state, held tensors) plus the largest one part
// needs only while it runs (`activations`). Used by baselines.cpp and
// megatron_baseline.cpp; an Option is any type with those three fields.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace maestro {

// The Pareto-best of one part's ways: none other at most as slow keeps no
// more resident and needs no more activations. Fastest first.
template <class Option>
std::vector<Option> pareto_best(std::vector<Option> all) {
  std::stable_sort(all.begin(), all.end(), [](const Option& a, const Option& b) { return a.step_s < b.step_s; });
  std::vector<Option> kept;
  for (const Option& o : all) {
    const bool dominated = std::any_of(kept.begin(), kept.end(), [&](const Option& k) {
      return k.resident <= o.resident && k.activations <= o.activations;
    });
    if (!dominated) kept.push_back(o);
  }
  return kept;
}

template <class Option>
int64_t least_resident(const std::vector<Option>& options) {
  int64_t m = std::numeric_limits<int64_t>::max();
  for (const Option& o : options) m = std::min(m, o.resident);
  return m;
}

// The least Σ step_s over one option per part such that Σ resident + the
// largest activations fit `memory`; empty when nothing fits (or a part has
// no option). Branch and bound over the parts in order.
template <class Option>
std::vector<Option> choose_least_sum(const std::vector<std::vector<Option>>& options, int64_t memory) {
  const size_t n = options.size();
  for (const auto& o : options)
    if (o.empty()) return {};
  std::vector<double> fastest_after(n + 1, 0.0);
  std::vector<int64_t> smallest_after(n + 1, 0);
  for (size_t i = n; i-- > 0;) {
    double f = std::numeric_limits<double>::infinity();
    for (const Option& o : options[i]) f = std::min(f, o.step_s);
    fastest_after[i] = fastest_after[i + 1] + f;
    smallest_after[i] = smallest_after[i + 1] + least_resident(options[i]);
  }
  std::vector<size_t> pick(n), best;
  double best_s = std::numeric_limits<double>::infinity();
  auto search = [&](auto& self, size_t i, double time, int64_t resident, int64_t in_flight) -> void {
    if (time + fastest_after[i] >= best_s || resident + smallest_after[i] + in_flight > memory) return;
    if (i == n) {
      best_s = time, best = pick;
      return;
    }
    for (size_t k = 0; k < options[i].size(); ++k) {
      const Option& o = options[i][k];
      pick[i] = k;
      self(self, i + 1, time + o.step_s, resident + o.resident, std::max(in_flight, o.activations));
    }
  };
  search(search, 0, 0.0, 0, 0);
  std::vector<Option> out;
  for (size_t i = 0; i < best.size(); ++i) out.push_back(options[i][best[i]]);
  return out;
}

}  // namespace maestro
