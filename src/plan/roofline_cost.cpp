// RooflineCost (see roofline_cost.h; formulas in docs/planner.md).
#include "plan/roofline_cost.h"

#include <algorithm>
#include <numeric>

#include "graph/counts.h"

namespace maestro {

namespace {

// Width of the activations between layers, and the layers that each do two
// tensor-parallel all-reduces per forward (Megatron's column/row split: one
// after attention, one after the MLP; a projector has one pair in all).
struct Shape {
  int64_t width = 0, layers = 0;
};
Shape shape_of(const ModelSpec& m) {
  return std::visit(
      [](const auto& s) -> Shape {
        using T = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<T, MlpSpec>) return {s.out, 1};
        else return {s.hidden, s.layers};
      },
      m.spec);
}

// Layers whose forward runs again in backward: the recomputed ones, or
// every layer of a stage recomputed whole.
int64_t layers_run_again(const Section& s, const SectionPlan& p) {
  return recomputes_stage(s, p) ? s.model.layers() : recomputed_layers(s, p);
}

int64_t total(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); }

// Rows inside the layers per emitted token: a pixel-shuffled vit runs
// merge² patches for each token it emits (dsl/program.h VitSpec), others 1.
int64_t rows_per_token(const ModelSpec& m) {
  if (const auto* v = std::get_if<VitSpec>(&m.spec)) return v->merge * v->merge;
  return 1;
}

}  // namespace

double ring_all_reduce_s(double bytes, int64_t n, double bytes_per_s) {
  if (n <= 1) return 0.0;
  return 2.0 * double(n - 1) / double(n) * bytes / bytes_per_s;
}

double ring_reduce_scatter_s(double bytes, int64_t n, double bytes_per_s) {
  if (n <= 1) return 0.0;
  return double(n - 1) / double(n) * bytes / bytes_per_s;
}

RooflineCost::RooflineCost(const SectionGraph& graph, const Cluster& cluster, bool fp32_activations)
    : graph_(graph), cluster_(cluster), fp32_activations_(fp32_activations) {}

Precision RooflineCost::activation_precision() const {
  return fp32_activations_ ? Precision::FP32 : graph_.program->train.precision;
}

int64_t RooflineCost::element_bytes() const { return precision_bytes(activation_precision()); }

double RooflineCost::peak_flops() const {
  return cluster_.device.flops(graph_.program->train.precision == Precision::BF16);
}

std::vector<int64_t> RooflineCost::seq_lens(int s, const std::vector<const Sample*>& samples) const {
  std::vector<int64_t> lens;
  lens.reserve(samples.size());
  for (const Sample* x : samples) {
    const int64_t n = graph_.tokens(s, {x->modalities, x->text_tokens, x->images, x->audio_frames});
    if (n > 0) lens.push_back(n);
  }
  return lens;
}

double RooflineCost::efficiency(int s, int64_t tokens, int64_t tp) const {
  const ModelSpec& model = graph_.section(s).model;
  const Shape sh = shape_of(model);
  return cluster_.device.gemm.at(double(tokens * rows_per_token(model)) * double(sh.width) / double(tp));
}

double RooflineCost::stage_forward_s(int s, const std::vector<int64_t>& lens, const SectionPlan& p) const {
  if (lens.empty()) return 0.0;
  const ModelSpec& model = graph_.section(s).model;
  const Shape sh = shape_of(model);
  const int64_t tokens = total(lens);
  // The weight GEMMs run on the micro-batch's rows at once. Attention's QKᵀ
  // and AV run as one kernel over the sequences: their FLOPs at the curve's
  // maximum plus one shortfall, the largest a sequence pays alone at its
  // size's efficiency (one sequence, or equal ones: as if at the
  // micro-batch's efficiency). So adding a sample never makes a micro-batch
  // cheaper, which the lower bound relies on (it costs each sample alone).
  // A device profile with a measured attention curve (--calibrate) costs
  // each sequence's attention at its own length's efficiency instead.
  const double best = cluster_.device.gemm.max;
  const EfficiencyTable& measured = cluster_.device.attention;
  double weights = 0, attention = 0, shortfall = 0;  // FLOPs; attention and the shortfall as FLOPs run at peak
  for (int64_t n : lens) {
    const double a = attention_forward_flops(model, n);
    weights += forward_flops(model, n) - a;
    if (!measured.empty()) {
      attention += a / measured.at(double(n));
      continue;
    }
    attention += a / best;
    shortfall = std::max(shortfall, a / efficiency(s, n, p.tp) - a / best);
  }
  const double compute = (weights / efficiency(s, tokens, p.tp) + attention + shortfall) /
                         (peak_flops() * double(p.tp * p.pp));
  // Two all-reduces of the [tokens, width] activations per layer of the stage.
  const double layers = std::max(1.0, double(sh.layers) / double(p.pp));
  const double bytes = double(tokens * rows_per_token(model) * sh.width * element_bytes());
  const double tp_link = cluster_.link_bytes_per_s(0, p.tp);
  return compute + 2.0 * layers * ring_all_reduce_s(bytes, p.tp, tp_link);
}

int64_t RooflineCost::tp_all_reduce_bytes(int s, const std::vector<const Sample*>& samples,
                                          const SectionPlan& p) const {
  if (p.tp <= 1) return 0;
  const Section& section = graph_.section(s);
  const bool train = section.mode == Mode::Train;
  const int64_t tokens = total(seq_lens(s, samples));
  int64_t forward = 0, backward = 0;  // elements
  if (const auto* t = std::get_if<TransformerSpec>(&section.model.spec)) {
    int64_t text = 0;  // the kept text rows: the sequence less its spliced blocks
    for (const Sample* x : samples)
      text += graph_.tokens(s, {x->modalities, x->text_tokens, x->images, x->audio_frames}) -
              graph_.tokens(s, {x->modalities, 0, x->images, x->audio_frames});
    forward = 2 * t->layers * tokens * t->hidden + text * t->hidden;
    for (const LossTerm& term : section.loss) forward += (term.kind == LossKind::CrossEntropy ? 2 : 3) * text;
    backward = 2 * (t->layers + layers_run_again(section, p)) * tokens * t->hidden + text * t->hidden;
  } else if (const auto* v = std::get_if<VitSpec>(&section.model.spec)) {
    const int64_t rows = tokens * v->merge * v->merge + tokens / v->tokens_per_image();  // patches + a class token per image
    forward = 2 * v->layers * rows * v->hidden;
    backward = 2 * (v->layers + layers_run_again(section, p)) * rows * v->hidden;
  } else if (const auto* a = std::get_if<AudioEncoderSpec>(&section.model.spec)) {
    forward = 2 * a->layers * tokens * a->hidden;
    backward = 2 * (a->layers + layers_run_again(section, p)) * tokens * a->hidden;
  } else if (const auto* m = std::get_if<MlpSpec>(&section.model.spec)) {
    for (int64_t i = 0; i + 1 < m->layers; i += 2) {  // pairs (column, row): graph/tensor_parallel.h
      forward += tokens * (i + 1 == m->layers - 1 ? m->out : m->hidden);
      backward += tokens * (i == 0 ? m->in : m->hidden);
    }
  }
  return (forward + (train ? backward : 0)) * element_bytes();
}

int64_t RooflineCost::stage_bytes(int s, int64_t tokens, const SectionPlan& p) const {
  if (p.pp <= 1) return 0;
  const ModelSpec& model = graph_.section(s).model;
  return tokens * rows_per_token(model) * shape_of(model).width * element_bytes();
}

double RooflineCost::stage_send_s(int s, int64_t tokens, const SectionPlan& p) const {
  if (p.pp <= 1) return 0.0;
  // Stage boundaries cross nodes when one replica spans more than a node.
  const double link = cluster_.link_bytes_per_s(0, p.tp * p.pp);
  return double(stage_bytes(s, tokens, p)) / double(p.tp) / link;
}

int64_t RooflineCost::stage_handoff_bytes(int s, const std::vector<const Sample*>& samples, const SectionPlan& p) const {
  return stage_bytes(s, total(seq_lens(s, samples)), p);
}

double RooflineCost::forward_s(int s, const std::vector<const Sample*>& samples, const SectionPlan& p) const {
  const std::vector<int64_t> lens = seq_lens(s, samples);
  return stage_forward_s(s, lens, p) + stage_send_s(s, total(lens), p);
}

double RooflineCost::backward_s(int s, const std::vector<const Sample*>& samples, const SectionPlan& p) const {
  if (graph_.section(s).mode == Mode::Frozen) return 0.0;
  const std::vector<int64_t> lens = seq_lens(s, samples);
  return stage_backward_s(s, stage_forward_s(s, lens, p), stage_send_s(s, total(lens), p), p);
}

double RooflineCost::stage_backward_s(int s, double forward, double send, const SectionPlan& p) const {
  // Backward is twice the forward's GEMMs with the same all-reduces; the
  // recomputed layers (a share k/L of every stage's; all of a stage
  // recomputed whole) run their forward again.
  const Section& section = graph_.section(s);
  const double recomputed = double(layers_run_again(section, p)) / double(section.model.layers());
  return (2.0 + recomputed) * forward + send;
}

CostModel::MicroBatchCosts RooflineCost::micro_batch_costs(int s, const std::vector<const Sample*>& samples,
                                                           const SectionPlan& p) const {
  const std::vector<int64_t> lens = seq_lens(s, samples);
  const double forward = stage_forward_s(s, lens, p), send = stage_send_s(s, total(lens), p);
  MicroBatchCosts c;
  c.forward_s = forward + send;
  if (graph_.section(s).mode != Mode::Frozen) c.backward_s = stage_backward_s(s, forward, send, p);
  c.activation_bytes = activation_bytes_of(s, lens, p);
  c.kept_activation_bytes = kept_activation_bytes_of(s, lens, c.activation_bytes, p);
  return c;
}

double RooflineCost::transfer_s(const Flow& flow, const std::vector<const Sample*>& samples, const SectionPlan& from,
                                const SectionPlan& to) const {
  // Same devices, same layout: every replica's output is already where its
  // consumer runs.
  if (from.first_device == to.first_device && from.tp == to.tp && from.pp == to.pp && from.dp == to.dp) return 0.0;
  const int64_t first = std::min(from.first_device, to.first_device);
  const int64_t last = std::max(from.first_device + from.devices, to.first_device + to.devices);
  // The tensor is split over the producer's tp devices (logits by vocabulary,
  // activations by sequence), sent over min(tp) links in parallel.
  const double links = double(std::min(from.tp, to.tp));
  return double(transfer_bytes(flow, samples)) / (links * cluster_.link_bytes_per_s(first, last - first));
}

int64_t RooflineCost::transfer_bytes(const Flow& flow, const std::vector<const Sample*>& samples) const {
  const int producer = graph_.find(flow.from);
  const ModelSpec& model = graph_.section(producer).model;
  int64_t width = model.output_width();
  if (flow.kind == FlowKind::Logits) width = std::get<TransformerSpec>(model.spec).vocab;
  int64_t tokens = 0;  // the rows the producer emits
  for (const Sample* x : samples) tokens += graph_.emitted(producer, {x->modalities, x->text_tokens, x->images, x->audio_frames});
  return tokens * width * element_bytes();
}

SectionMemory RooflineCost::parameter_state(int s, const SectionPlan& p) const {
  return memory_per_device(graph_.section(s), p.tp, p.pp, {}, graph_.program->train.precision,
                           p.shard_optimizer ? p.dp : 1);
}

double RooflineCost::grad_sync_s(int s, const SectionPlan& p) const {
  if (graph_.section(s).mode == Mode::Frozen || p.dp <= 1) return 0.0;
  const SectionMemory m = parameter_state(s, p);
  const double link = cluster_.link_bytes_per_s(p.first_device, p.devices);
  // ZeRO-1: reduce-scatter the fp32 gradients to the shard owners, all-gather
  // the updated working-precision weights (Megatron's distributed optimizer;
  // bf16: 4 + 2 bytes per parameter on the wire instead of the all-reduce's 2 × 4).
  if (p.shard_optimizer)
    return ring_reduce_scatter_s(double(m.gradients), p.dp, link) + ring_reduce_scatter_s(double(m.weights), p.dp, link);
  return ring_all_reduce_s(double(m.gradients), p.dp, link);
}

double RooflineCost::optimizer_s(int s, const SectionPlan& p) const {
  if (graph_.section(s).mode == Mode::Frozen) return 0.0;
  // AdamW is memory-bound: it reads and writes the whole parameter state, or
  // with ZeRO-1 its 1/dp shard of it (m.optimizer is already that shard).
  const SectionMemory m = parameter_state(s, p);
  const int64_t shards = p.shard_optimizer ? p.dp : 1;
  const double bytes = 2.0 * (double(m.weights + m.gradients) / double(shards) + double(m.optimizer));
  return bytes / cluster_.device.memory_bytes_per_s;
}

int64_t RooflineCost::weights_bytes_per_device(int s, const SectionPlan& p) const {
  return parameter_state(s, p).total();
}

int64_t RooflineCost::activation_bytes(int s, const std::vector<const Sample*>& samples, const SectionPlan& p) const {
  return activation_bytes_of(s, seq_lens(s, samples), p);
}

int64_t RooflineCost::activation_bytes_of(int s, const std::vector<int64_t>& lens, const SectionPlan& p) const {
  if (lens.empty()) return 0;
  const Section& section = graph_.section(s);
  const Precision precision = activation_precision();
  const ActivationKind kind = activation_kind(section.mode);
  const int64_t k = recomputed_layers(section, p);
  if (cluster_.device.fused_attention)
    return activation_bytes_per_token(section.model, precision, kind, k) * total(lens) / (p.tp * p.pp);
  return maestro::activation_bytes(section.model, lens, precision, kind, k) / (p.tp * p.pp);
}

int64_t RooflineCost::kept_activation_bytes(int s, const std::vector<const Sample*>& samples,
                                            const SectionPlan& p) const {
  const std::vector<int64_t> lens = seq_lens(s, samples);
  return kept_activation_bytes_of(s, lens, recomputes_stage(graph_.section(s), p) ? 0 : activation_bytes_of(s, lens, p), p);
}

int64_t RooflineCost::kept_activation_bytes_of(int s, const std::vector<int64_t>& lens, int64_t all,
                                               const SectionPlan& p) const {
  const Section& section = graph_.section(s);
  if (!recomputes_stage(section, p)) return all;
  // The stage's input: one layer input, [rows, width] (tp-split like the
  // layer inputs above; a first stage's raw input counted as wide).
  const Shape sh = shape_of(section.model);
  return total(lens) * rows_per_token(section.model) * sh.width * element_bytes() / p.tp;
}

double RooflineCost::peak_device_s(int s, const Sample& sample) const {
  const std::vector<int64_t> lens = seq_lens(s, {&sample});
  if (lens.empty()) return 0.0;
  return section_flops(graph_.section(s), lens).total() / (peak_flops() * cluster_.device.gemm.max);
}

}  // namespace maestro
