// The faithful Megatron-LM baseline and Megatron's MIMO (see baselines.h and
// docs/planner.md, "Baselines"). Not the discrete-event simulator: Megatron's
// stage 0 holds whole encoders plus a tunable share of the decoder, a layout
// SectionPlan cannot express, so each dp rank's 1F1B pipeline is replayed
// here from the cost model's per-micro-batch stage times.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "plan/baselines.h"
#include "plan/planner.h"
#include "plan/shared_devices_fit.h"

namespace maestro {

namespace {

const TransformerSpec* transformer_of(const SectionGraph& g, int s) {
  return std::get_if<TransformerSpec>(&g.section(s).model.spec);
}

int64_t sample_tokens(const SectionGraph& g, int s, const Sample& x) {
  return g.tokens(s, {x.modalities, x.text_tokens, x.images, x.audio_frames});
}

// The decoder whose layers set the pipeline split: the trained transformer
// with the most layers (the student in KD, the LLM otherwise); -1 if none.
int main_decoder(const SectionGraph& g, const std::vector<int>& sections) {
  int best = -1;
  for (int s : sections)
    if (const auto* t = transformer_of(g, s); t && g.section(s).mode == Mode::Train)
      if (best < 0 || t->layers > transformer_of(g, best)->layers) best = s;
  if (best < 0)
    for (int s : sections)
      if (const auto* t = transformer_of(g, s); t && (best < 0 || t->layers > transformer_of(g, best)->layers)) best = s;
  return best;
}

// Megatron's decoder_seq_length / seq_length: the main decoder's max_seq.
int64_t decoder_seq_length(const SectionGraph& g, const std::vector<int>& sections) {
  const int d = main_decoder(g, sections);
  return d < 0 ? 0 : transformer_of(g, d)->max_seq;
}

// One micro-batch as a transformer section sees it: padding adds pad tokens
// (as text) to each sample up to `pad_to`; packing adds one pad-only text
// sample per bin filling it to seq_length. Others see the real samples.
struct MicroBatch {
  std::vector<const Sample*> real;
  std::vector<Sample> padded;  // the decoder's view
  std::vector<const Sample*> decoder_view() const {
    std::vector<const Sample*> v;
    for (const Sample& x : padded) v.push_back(&x);
    return v;
  }
};

ModalitySet text_only() {
  ModalitySet m;
  m.add(Modality::Text);
  return m;
}

}  // namespace

std::string FaithfulMegatronConfig::str() const {
  return fmt::format("tp={} pp={} dp={} micro_batch={} first_stage_layers={} {}{}{}", tp, pp, dp, micro_batch,
                     first_stage_layers, packing ? "packing" : "padding",
                     distributed_optimizer ? " distributed_optimizer" : "",
                     recompute_level_note(recompute_level));
}

double megatron_stage_share(const SectionGraph& g, const std::vector<int>& sections, int s, int64_t j,
                            const FaithfulMegatronConfig& c) {
  const int d = main_decoder(g, sections);
  if (!transformer_of(g, s) || c.pp == 1) return j == 0 ? 1.0 : 0.0;
  const double first = double(c.first_stage_layers) / double(transformer_of(g, d)->layers);
  return j == 0 ? first : (1.0 - first) / double(c.pp - 1);
}

std::vector<int64_t> padded_lengths(const SectionGraph& g, int s, const std::vector<const Sample*>& mb, int64_t pp,
                                    int64_t seq_length) {
  int64_t longest = 0;
  for (const Sample* x : mb) longest = std::max(longest, sample_tokens(g, s, *x));
  std::vector<int64_t> out;
  for (const Sample* x : mb)
    if (sample_tokens(g, s, *x) > 0) out.push_back(pp > 1 ? seq_length : longest);
  return out;
}

std::vector<std::vector<const Sample*>> pack_loader_order(const SectionGraph& g, int s, const Batch& batch,
                                                         int64_t seq_length) {
  std::vector<std::vector<const Sample*>> bins;
  int64_t fill = seq_length;
  for (const Sample& x : batch.samples) {
    const int64_t n = sample_tokens(g, s, x);
    if (n <= 0) continue;
    if (fill + n > seq_length) bins.emplace_back(), fill = 0;
    bins.back().push_back(&x);
    fill += n;
  }
  return bins;
}

double one_f_one_b_s(const std::vector<std::vector<double>>& fwd, const std::vector<std::vector<double>>& bwd) {
  const size_t m = fwd.size();
  if (m == 0) return 0;
  const size_t pp = fwd[0].size();
  // Each stage's op order: warm-up forwards, then one forward one backward,
  // then the remaining backwards (Megatron's schedules.py, non-interleaved).
  struct Op { bool forward; size_t mb; };
  std::vector<std::vector<Op>> order(pp);
  for (size_t j = 0; j < pp; ++j) {
    const size_t warm = std::min(m, pp - j - 1);
    size_t f = 0, b = 0;
    for (; f < warm; ++f) order[j].push_back({true, f});
    while (b < m) {
      if (f < m) order[j].push_back({true, f++});
      order[j].push_back({false, b++});
    }
  }
  const double unset = -1;
  std::vector<std::vector<double>> fend(m, std::vector<double>(pp, unset)), bend = fend;
  std::vector<size_t> next(pp, 0);
  std::vector<double> free_at(pp, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t j = 0; j < pp; ++j)
      while (next[j] < order[j].size()) {
        const Op op = order[j][next[j]];
        double ready;
        if (op.forward) {
          ready = j == 0 ? 0 : fend[op.mb][j - 1];
        } else {
          ready = j + 1 == pp ? fend[op.mb][j] : bend[op.mb][j + 1];
        }
        if (ready < 0) break;
        const double start = std::max(ready, free_at[j]);
        free_at[j] = start + (op.forward ? fwd[op.mb][j] : bwd[op.mb][j]);
        (op.forward ? fend : bend)[op.mb][j] = free_at[j];
        ++next[j];
        progress = true;
      }
  }
  return *std::max_element(free_at.begin(), free_at.end());
}

namespace {

// A sub-model (some sections) run Megatron-style on `devices` devices.
struct Evaluated {
  double iteration_s = 0;
  std::string problem;  // "" when it fits
  // Per device, the most over the stages: parameter state, and state plus
  // in-flight activations (what the memory check compares).
  double state_bytes = 0, need_bytes = 0;
};

// One configuration of a module among colocated ones (shared_devices_fit.h).
struct ModuleOption {
  FaithfulMegatronConfig config;
  double step_s = 0;        // on the tuning batch
  int64_t resident = 0;     // parameter state per device, there all step
  int64_t activations = 0;  // the rest of its need, while it runs
};

struct Evaluator {
  const SectionGraph& g;
  const Cluster& cl;
  const CostModel& cost;
  std::vector<int> sections;  // the sub-model, topological order
  int64_t devices = 0;

  // Micro-batches of dp rank r in loader order: Megatron's pretraining
  // sampler gives rank r samples [r·mb, (r+1)·mb) of each mb·dp chunk.
  std::vector<std::vector<MicroBatch>> micro_batches(const Batch& batch, const FaithfulMegatronConfig& c) const {
    const int d = main_decoder(g, sections);
    const int64_t seq = decoder_seq_length(g, sections);
    std::vector<std::vector<MicroBatch>> ranks(size_t(c.dp));
    // Units dealt to ranks: single samples (padding) or packed bins.
    std::vector<std::vector<const Sample*>> units;
    if (c.packing && d >= 0) {
      units = pack_loader_order(g, d, batch, seq);
      // Samples the decoder does not see (none in these programs) are dropped.
    } else {
      for (const Sample& x : batch.samples)
        for (int s : sections)
          if (sample_tokens(g, s, x) > 0) {
            units.push_back({&x});
            break;
          }
    }
    const size_t chunk = size_t(c.micro_batch * c.dp);
    for (size_t i = 0; i < units.size(); i += chunk)
      for (int64_t r = 0; r < c.dp; ++r) {
        MicroBatch mb;
        for (size_t u = i + size_t(r * c.micro_batch); u < std::min(units.size(), i + size_t((r + 1) * c.micro_batch)); ++u)
          mb.real.insert(mb.real.end(), units[u].begin(), units[u].end());
        if (mb.real.empty()) continue;
        if (d >= 0) {
          if (c.packing) {
            // Each bin padded to seq_length by one pad-only sequence.
            for (size_t u = i + size_t(r * c.micro_batch); u < std::min(units.size(), i + size_t((r + 1) * c.micro_batch)); ++u) {
              int64_t fill = 0;
              for (const Sample* x : units[u]) mb.padded.push_back(*x), fill += sample_tokens(g, d, *x);
              if (fill < seq) mb.padded.push_back({0, text_only(), int32_t(seq - fill), 0, 0});
            }
          } else {
            const auto lens = padded_lengths(g, d, mb.real, c.pp, seq);
            size_t k = 0;
            for (const Sample* x : mb.real) {
              const int64_t n = sample_tokens(g, d, *x);
              if (n <= 0) continue;
              Sample p = *x;
              p.text_tokens += int32_t(lens[k++] - n);
              mb.padded.push_back(p);
            }
          }
        }
        ranks[size_t(r)].push_back(std::move(mb));
      }
    return ranks;
  }

  // Section s's share of the layers on stage j: decoders (transformers) split
  // first_stage_layers / L on stage 0 and the rest evenly; everything else
  // (encoders, projectors) wholly on stage 0.
  double share(int s, int64_t j, const FaithfulMegatronConfig& c) const {
    return megatron_stage_share(g, sections, s, j, c);
  }

  SectionPlan whole(const FaithfulMegatronConfig& c) const {
    return {0, devices, c.tp, 1, c.dp, c.micro_batch, c.distributed_optimizer, c.recompute_level};
  }

  Evaluated evaluate(const Batch& batch, const FaithfulMegatronConfig& c) const {
    const SectionPlan p = whole(c);
    const auto ranks = micro_batches(batch, c);
    // Memory, per stage: parameter state of its shares + the 1F1B in-flight
    // micro-batches (pp - j on stage j) of its largest activations.
    double state = 0, need = 0;
    for (int64_t j = 0; j < c.pp; ++j) {
      // worst_kept: what a micro-batch keeps between its forward and
      // backward (less than all of it for a stage recomputed whole).
      double weights = 0, worst_act = 0, worst_kept = 0;
      for (int s : sections) weights += share(s, j, c) * double(cost.weights_bytes_per_device(s, p));
      for (const auto& rank : ranks)
        for (const MicroBatch& mb : rank) {
          const auto view = mb.decoder_view();
          double act = 0, kept = 0;
          for (int s : sections)
            if (share(s, j, c) > 0) {
              const auto& samples = transformer_of(g, s) ? view : mb.real;
              act += share(s, j, c) * double(cost.activation_bytes(s, samples, p));
              kept += share(s, j, c) * double(cost.kept_activation_bytes(s, samples, p));
            }
          worst_act = std::max(worst_act, act), worst_kept = std::max(worst_kept, kept);
        }
      const double activations = double(c.pp - j - 1) * worst_kept + worst_act;
      const double total = weights + activations;
      state = std::max(state, weights), need = std::max(need, total);
      if (total > double(cl.device.memory_bytes))
        return {0, fmt::format("stage {}: {:.1f} GB of weights + {:.1f} GB of activations per device exceeds {}'s {:.0f} GB", j,
                               weights / 1e9, activations / 1e9, cl.device.name,
                               double(cl.device.memory_bytes) / 1e9)};
    }
    // Each rank's 1F1B pipeline; the step waits for the slowest rank.
    double slowest = 0;
    for (const auto& rank : ranks) {
      std::vector<std::vector<double>> fwd, bwd;
      for (const MicroBatch& mb : rank) {
        const auto view = mb.decoder_view();
        std::vector<double> f(size_t(c.pp), 0.0), b(size_t(c.pp), 0.0);
        for (int s : sections) {
          const auto& samples = transformer_of(g, s) ? view : mb.real;
          const double fs = cost.forward_s(s, samples, p);
          const double bs = g.section(s).mode == Mode::Train ? cost.backward_s(s, samples, p) : 0.0;
          for (int64_t j = 0; j < c.pp; ++j) f[size_t(j)] += share(s, j, c) * fs, b[size_t(j)] += share(s, j, c) * bs;
        }
        fwd.push_back(f), bwd.push_back(b);
      }
      slowest = std::max(slowest, one_f_one_b_s(fwd, bwd));
    }
    // Grad sync and optimizer of the slowest stage (the stages run theirs at once).
    double tail = 0;
    for (int64_t j = 0; j < c.pp; ++j) {
      double t = 0;
      for (int s : sections) t += share(s, j, c) * (cost.grad_sync_s(s, p) + cost.optimizer_s(s, p));
      tail = std::max(tail, t);
    }
    return {slowest + tail, "", state, need};
  }

  // The grid: tp within a node, pp up to the decoder's layers (1 with no
  // decoder), dp filling the devices, micro_batch, first-stage layers
  // (even split, ¾, ½, ¼ of it), padding and packing, the distributed
  // optimizer off and (dp > 1) on. f(config without recomputation).
  template <class F>
  void each_config(F&& f) const {
    const int d = main_decoder(g, sections);
    const int64_t layers = d < 0 ? 1 : transformer_of(g, d)->layers;
    bool trains = false;
    for (int s : sections) trains |= g.section(s).mode == Mode::Train;
    for (int64_t tp : kDegreeChoices) {
      if (tp > std::min(cl.devices_per_node, devices)) continue;
      if (std::any_of(sections.begin(), sections.end(), [&](int s) { return !splits_over_tp(g.section(s).model, tp); }))
        continue;  // the module's sections all run at its tp
      for (int64_t pp : kDegreeChoices) {
        if (devices % (tp * pp) != 0 || pp > layers || (d < 0 && pp > 1)) continue;
        const int64_t dp = devices / (tp * pp);
        std::vector<int64_t> firsts;
        for (double x : {1.0, 0.75, 0.5, 0.25}) {
          const int64_t k = pp == 1 ? layers : std::max<int64_t>(1, int64_t(double(layers) / double(pp) * x + 0.5));
          if (std::find(firsts.begin(), firsts.end(), k) == firsts.end() && (pp == 1 || layers - k >= pp - 1))
            firsts.push_back(k);
        }
        for (int64_t mb : kMicroBatchChoices)
          for (bool packing : {false, true}) {
            if (packing && d < 0) continue;
            for (int64_t k : firsts)
              for (bool dopt : {false, true}) {
                if (dopt && (dp <= 1 || !trains)) continue;
                f(FaithfulMegatronConfig{tp, pp, dp, mb, k, packing, dopt, 0});
              }
          }
      }
    }
  }

  // f(config, its evaluation) for each configuration that fits on `batch`,
  // at each recomputation level that fits (every_level) or at the least one
  // (more recomputation only adds work). `last_problem`: why the last
  // configuration tried did not fit.
  template <class F>
  void each_fitting(const Batch& batch, bool every_level, std::string& last_problem, F&& f) const {
    // recomputation of none, half, all the layers, each stage whole, where a
    // trained section has `recompute = auto`
    int64_t levels = 1;
    for (int s : sections)
      if (g.section(s).mode == Mode::Train && g.section(s).recompute_auto) levels = 4;
    each_config([&](FaithfulMegatronConfig c) {
      for (c.recompute_level = 0; c.recompute_level < levels; ++c.recompute_level) {
        const Evaluated e = evaluate(batch, c);
        if (!e.problem.empty()) {
          last_problem = c.str() + ": " + e.problem;
          continue;
        }
        f(c, e);
        if (!every_level) break;
      }
    });
  }

  // The fastest configuration that fits, tuned on `batch`.
  std::optional<std::pair<FaithfulMegatronConfig, double>> tune(const Batch& batch, std::string& last_problem) const {
    std::optional<std::pair<FaithfulMegatronConfig, double>> best;
    each_fitting(batch, false, last_problem, [&](const FaithfulMegatronConfig& c, const Evaluated& e) {
      if (!best || e.iteration_s < best->second) best = {{c, e.iteration_s}};
    });
    return best;
  }

  // As a module sharing its devices with others: the Pareto-best of every
  // configuration that fits alone, at every recomputation level (less
  // activations is what sharing may need; shared_devices_fit.h).
  std::vector<ModuleOption> options(const Batch& batch, std::string& last_problem) const {
    std::vector<ModuleOption> all;
    each_fitting(batch, true, last_problem, [&](const FaithfulMegatronConfig& c, const Evaluated& e) {
      all.push_back({c, e.iteration_s, int64_t(e.state_bytes), int64_t(e.need_bytes - e.state_bytes)});
    });
    return pareto_best(std::move(all));
  }

  double mean_s(const std::vector<Batch>& batches, const FaithfulMegatronConfig& c) const {
    double sum = 0;
    for (const Batch& b : batches) sum += evaluate(b, c).iteration_s;
    return sum / double(batches.size());
  }
};

std::vector<int> all_sections(const SectionGraph& g) { return g.topo_order; }

}  // namespace

double faithful_megatron_iteration_s(const SectionGraph& g, const Cluster& cl, const CostModel& cost,
                                     const FaithfulMegatronConfig& c, const Batch& batch, std::string* problem) {
  const Evaluator ev{g, cl, cost, all_sections(g), cl.devices};
  const Evaluated e = ev.evaluate(batch, c);
  if (problem) *problem = e.problem;
  return e.iteration_s;
}

BaselineResult tuned_faithful_megatron(const SectionGraph& g, const Cluster& cl, const CostModel& cost,
                                       const std::vector<Batch>& batches) {
  const Evaluator ev{g, cl, cost, all_sections(g), cl.devices};
  std::string last;
  const auto best = ev.tune(batches.front(), last);
  if (!best) throw PlanError("megatron baseline: no configuration fits (last tried " + last + ")");
  return {"megatron", ev.mean_s(batches, best->first), best->first.str(), std::nullopt, ""};
}

BaselineResult tuned_mimo(const SectionGraph& g, const Cluster& cl, const CostModel& cost,
                          const std::vector<Batch>& batches) {
  // Modules: the trained sections with a loss (the LLM, the student) form
  // the language module; every other section (encoders, projectors, a
  // frozen teacher) is a module of its own.
  std::vector<int> language, others;
  for (int s : g.topo_order) (g.nodes[size_t(s)].has_loss && g.section(s).mode == Mode::Train ? language : others).push_back(s);
  std::string last;
  // One group of modules on the same `devices`, run one after another. Each
  // module's parameter state stays on the devices all step, so the modules'
  // configurations are chosen together: the least sum of their times on
  // the first batch such that every module's state plus the largest
  // module's in-flight activations fit a device. (One module: tuned alone.)
  auto group = [&](const std::vector<int>& modules, int64_t devices, std::string& config, int64_t* llm_micro_batches)
      -> std::optional<double> {
    double sum_first = 0;
    std::vector<std::pair<const Evaluator*, FaithfulMegatronConfig>> chosen;
    std::vector<Evaluator> evs;
    evs.reserve(modules.size());
    for (int s : modules) evs.push_back({g, cl, cost, {s}, devices});
    if (evs.size() == 1) {
      const auto best = evs[0].tune(batches.front(), last);
      if (!best) return std::nullopt;
      chosen.push_back({&evs[0], best->first});
    } else {
      std::vector<std::vector<ModuleOption>> options;
      for (const Evaluator& ev : evs) options.push_back(ev.options(batches.front(), last));
      const std::vector<ModuleOption> picked = choose_least_sum(options, cl.device.memory_bytes);
      if (picked.empty()) {
        int64_t states = 0;
        for (const auto& o : options) states += o.empty() ? 0 : least_resident(o);
        last = fmt::format("{} modules on {} devices: at least {:.1f} GB of parameter state per device together", evs.size(),
                           devices, double(states) / 1e9);
        return std::nullopt;
      }
      for (size_t i = 0; i < evs.size(); ++i) chosen.push_back({&evs[i], picked[i].config});
    }
    for (const auto& [ev, c] : chosen)
      config += fmt::format("{}{}[{} dev] {}", config.empty() ? "" : "; ", g.nodes[size_t(ev->sections[0])].name, devices,
                            c.str());
    for (const auto& [ev, c] : chosen) sum_first += ev->mean_s(batches, c);
    if (llm_micro_batches && !chosen.empty()) {
      const auto& c = chosen.back().second;
      *llm_micro_batches = std::max<int64_t>(1, int64_t(batches.front().samples.size()) / (c.micro_batch * c.dp));
    }
    return sum_first;
  };
  std::optional<std::pair<double, std::string>> best;
  // Colocated: every module on every device, one after another.
  {
    std::string config = "colocated: ";
    std::string body;
    std::vector<int> all = others;
    all.insert(all.end(), language.begin(), language.end());
    if (const auto t = group(all, cl.devices, body, nullptr)) best = {{*t, config + body}};
  }
  // Non-colocated: the non-language modules on the first `a` devices, the
  // language module on the rest, streaming micro-batches (the language
  // module waits for the first micro-batch's embeddings).
  if (!others.empty() && !language.empty())
    for (int64_t a = cl.devices_per_node; a < cl.devices; a *= 2) {
      std::string enc_config, llm_config;
      int64_t llm_mbs = 1;
      const auto te = group(others, a, enc_config, nullptr);
      const auto tl = group(language, cl.devices - a, llm_config, &llm_mbs);
      if (!te || !tl) continue;
      const double t = std::max(*te, *tl) + std::min(*te, *tl) / double(llm_mbs);
      if (!best || t < best->first) best = {{t, "non-colocated: " + enc_config + "; " + llm_config}};
    }
  if (!best) throw PlanError("mimo baseline: no configuration fits (last tried " + last + ")");
  return {"mimo", best->first, best->second, std::nullopt, ""};
}

}  // namespace maestro
