// SectionRunner (see section_runner.h): the glue between the runtime's
// messages (flow tensors per sample, StepData) and the engine's SectionModel
// (per-sample spans in, per-sample row views out).
#include "actors/section_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "nn/backend.h"
#include "nn/section_model.h"

namespace maestro {

// One micro-batch's forward, kept until its backward: the engine's context
// and, per sample, which incoming activations flows were spliced (in order).
// A stage recomputed whole keeps the forward's task instead of its context:
// the task's tensors (upstream outputs, the previous stage's hidden states,
// the step's data) are the stage's input, and backward runs the forward
// again from them.
struct SectionRunner::Pending {
  std::shared_ptr<ForwardContext> context;          // null until the replay when recompute_stage_
  std::vector<std::vector<int32_t>> spliced_flows;  // [sample in mb] -> flow ids
  std::optional<RunTask> replay;                    // recompute_stage_: the forward's task
};

// The engine's inputs of a forward task: views into the task's tensors and
// step data, valid while the task lives.
struct SectionRunner::EngineInputs {
  std::vector<SampleInput> samples;
  std::vector<std::vector<int32_t>> spliced_flows;  // [sample in mb] -> flow ids
  std::vector<std::span<const float>> teacher;      // [sample in mb] a logits flow's tensor, or empty
  bool has_teacher = false;
  StageInput stage;  // stages after the first
};

SectionRunner::SectionRunner(const Program& program, int section, int stage, int stages, uint64_t seed,
                             Transport& transport, std::unique_ptr<Backend> backend,
                             std::shared_ptr<Communicator> dp_group, std::shared_ptr<Communicator> tp_group,
                             bool shard_optimizer, int64_t recompute, bool recompute_stage,
                             bool resident_handoffs)
    : program_(program),
      section_(section),
      stage_(stage),
      stages_(stages),
      transport_(transport),
      backend_(std::move(backend)),
      resident_(resident_handoffs && backend_->device() != Device::Host),
      dp_group_(std::move(dp_group)),
      tp_group_(std::move(tp_group)),
      recompute_stage_(recompute_stage && program.sections[size_t(section)].mode == Mode::Train) {
  const TensorParallel tp = tp_group_ ? TensorParallel{tp_group_->rank(), tp_group_->size(), tp_group_.get()}
                                      : TensorParallel{};
  Section engine_section = program.sections[size_t(section)];
  engine_section.recompute = std::max(engine_section.recompute, recompute);
  model_ = std::make_unique<SectionModel>(engine_section, *backend_, seed, stage, stages, tp);
  // ZeRO-1: this replica's shard of the flat buffer (the one reduce_scatter gives it); with
  // tp > 1 the dp group is this tp rank's, over the rank's own flat buffer.
  if (shard_optimizer && model_->grads() && dp_group_ && dp_group_->size() > 1) {
    const Shard sh = shard_of(model_->grad_count(), dp_group_->size(), dp_group_->rank());
    Communicator* group = dp_group_.get();
    model_->shard_optimizer(int64_t(sh.offset), int64_t(sh.count),
                            [group](float* out, const float* in, size_t n) { group->all_gather(out, in, n); });
  }
}

int64_t SectionRunner::recomputed_layers() const { return model_->section().recompute; }

bool SectionRunner::tp_rank0() const { return !tp_group_ || tp_group_->rank() == 0; }

template <class F>
auto SectionRunner::on_all_ranks(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    if (tp_group_ && tp_group_->size() > 1) tp_group_->abort(fmt::format("tp rank {} failed: {}", tp_group_->rank(), e.what()));
    throw;
  }
}

template <class F>
auto SectionRunner::holding(const RunTask& rt, F&& f) -> decltype(f()) {
  release_passed();
  held_.push_back({});
  held_.back().tasks.push_back(rt);
  struct Seal {  // the fence after everything the call queued; on the CPU that is passed at once
    SectionRunner& r;
    ~Seal() {
      Held& h = r.held_.back();
      try {
        h.fence = r.backend_->fence();
        if (r.backend_->passed(h.fence)) r.held_.pop_back();
      } catch (const std::exception&) {
        // A faulted device: the tensors stay held (a fence of ~0 never
        // passes); the next call on the backend reports the fault.
      }
    }
  } seal{*this};
  return f();
}

void SectionRunner::release_passed() {
  while (!held_.empty() && backend_->passed(held_.front().fence)) held_.pop_front();
}

SectionRunner::Result SectionRunner::forward(const RunTask& rt) {
  return holding(rt, [&] { return on_all_ranks([&] { return forward_rank(rt); }); });
}
SectionRunner::Result SectionRunner::backward(const RunTask& rt) {
  return holding(rt, [&] { return on_all_ranks([&] { return backward_rank(rt); }); });
}

SectionRunner::~SectionRunner() {
  pending_.clear();  // contexts die before the model that made them
  model_.reset();
  for (double* c : chunks_) backend_->release(c);
}

size_t SectionRunner::take_slots(size_t n) {
  if (n > kSlots) throw std::logic_error(fmt::format("{} scalar slots at once (at most {})", n, kSlots));
  if (used_ % kSlots + n > kSlots) used_ = (used_ / kSlots + 1) * kSlots;  // not across chunks
  while (chunks_.size() * kSlots < used_ + n) chunks_.push_back(backend_->allocate_scalars(kSlots));
  const size_t first = used_;
  used_ += n;
  return first;
}

const std::string& SectionRunner::section_name() const { return program_.sections[size_t(section_)].name; }

std::string part_name(const std::string& section, int stage, int stages) {
  return stages == 1 ? section : fmt::format("{}.stage{}", section, stage);
}

std::string SectionRunner::part_name() const { return maestro::part_name(section_name(), stage_, stages_); }

namespace {

// A host tensor holding a copy of backend memory.   [shape]
TensorRef host_copy(Transport& transport, Backend& backend, std::vector<int64_t> shape, const float* src) {
  TensorRef t = transport.allocate(std::move(shape));
  if (t.numel() > 0) backend.copy_to_host(t.values().data(), src, t.bytes());
  return t;
}

// Index of a sample within the task's micro-batch.
size_t position_of(const RunTask& t, int32_t sample) {
  auto it = std::find(t.samples.begin(), t.samples.end(), sample);
  if (it == t.samples.end())
    throw std::logic_error(fmt::format("sample {} is not in micro-batch {}", sample, t.task.micro_batch));
  return size_t(it - t.samples.begin());
}

}  // namespace

bool SectionRunner::fits_resident(size_t bytes) const {
  return resident_ && resident_bytes_->load() + bytes <= backend_->device_memory_bytes() / kResidentShare;
}

TensorRef SectionRunner::hand_off(std::vector<int64_t> shape, const float* src) {
  size_t n = 1;
  for (const int64_t d : shape) n *= size_t(d);
  if (!fits_resident(n * sizeof(float))) return host_copy(transport_, *backend_, std::move(shape), src);
  return kept(std::move(shape), [&](float* block, size_t count) { backend_->copy(block, src, count); });
}

TensorRef SectionRunner::kept(std::vector<int64_t> shape, const std::function<void(float*, size_t)>& write) {
  size_t n = 1;
  for (const int64_t d : shape) n *= size_t(d);
  TensorRef t{nullptr, std::move(shape), DType::F32};
  float* p = backend_->allocate(std::max<size_t>(n, 1));
  // The block goes back to its backend, from whichever thread lets go last.
  std::shared_ptr<Backend> owner = backend_;
  std::shared_ptr<std::atomic<size_t>> counted = resident_bytes_;
  *counted += n * sizeof(float);
  t.buffer = std::shared_ptr<Buffer>(
      new Buffer{reinterpret_cast<std::byte*>(p), n * sizeof(float), 0, 0, 0, backend_->device(), {}, nullptr},
      [owner, counted](Buffer* b) {
        *counted -= b->capacity;
        owner->release(b->data);
        delete b;
      });
  write(p, n);
  t.buffer->ready = backend_->ready_marker();
  return t;
}

std::span<const float> SectionRunner::floats_of(const TensorRef& t) const {
  if (t.device() == Device::Host) return t.values();
  if (t.dtype != DType::F32) throw std::logic_error("a resident hand-off that is not fp32");
  backend_->wait_for(t.buffer->ready);
  return {reinterpret_cast<const float*>(t.buffer->data), size_t(t.numel())};
}

// One sample's logits on the host; a split transformer's [rows, Vs] gathered
// from every rank into the whole [rows, vocab] (collective; on rank 0 only:
// the other ranks' results are never handed on, so they get none).
TensorRef SectionRunner::logits_of(const RowsView& v) {
  const int64_t V = std::get<TransformerSpec>(program_.sections[size_t(section_)].model.spec).vocab;
  if (!tp_group_ || tp_group_->size() == 1) return hand_off({v.rows, v.cols}, v.data);
  const int64_t R = tp_group_->size(), Vs = v.cols;
  // Gathered in backend memory (an NCCL group's). Rank 0's stands for the
  // replica: the other ranks take part in the gather only.
  const ScopedBuffer gathered(*backend_, size_t(R * v.rows * Vs));  // [R, rows, Vs]
  tp_group_->all_gather(gathered.get(), v.data, size_t(R * v.rows * Vs));
  if (!tp_rank0()) return {};
  if (fits_resident(size_t(v.rows * V) * sizeof(float)))  // laid side by side in backend memory: a resident hand-off
    return kept({v.rows, V}, [&](float* block, size_t) {  // [rows, V]: rank r's columns [r·Vs, r·Vs + its width)
      for (int64_t r = 0; r < R; ++r)
        if (const int64_t width = std::min(Vs, V - r * Vs); width > 0)
          backend_->copy_rows(block + r * Vs, size_t(V), gathered.get() + r * v.rows * Vs, size_t(Vs), size_t(width),
                              size_t(v.rows));
    });
  std::vector<float> all(size_t(R * v.rows * Vs));  // read back once, and laid side by side on the host
  backend_->copy_to_host(all.data(), gathered.get(), all.size() * sizeof(float));
  TensorRef t = transport_.allocate({v.rows, V});
  std::span<float> dst = t.values();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < v.rows; ++i)
      for (int64_t j = 0; j < Vs && r * Vs + j < V; ++j) dst[size_t(i * V + r * Vs + j)] = all[size_t((r * v.rows + i) * Vs + j)];
  return t;
}

SectionRunner::EngineInputs SectionRunner::inputs_of(const RunTask& rt) const {
  const Section& sec = program_.sections[size_t(section_)];
  const size_t n = rt.samples.size();
  // Inputs per sample: step data, then the flows' tensors in flow order.
  EngineInputs in;
  in.samples.resize(n);
  in.spliced_flows.resize(n);
  in.teacher.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const int32_t i = rt.samples[k];
    if (size_t(section_) < rt.data->inputs.size() && !rt.data->inputs[size_t(section_)].empty()) {
      const SampleInputs& s = rt.data->inputs[size_t(section_)][size_t(i)];
      in.samples[k].tokens = s.tokens;
      if (!s.pixels.empty()) in.samples[k].values = s.pixels;
      if (!s.mel.empty()) in.samples[k].values = s.mel;
    }
  }
  std::vector<const FlowTensor*> ordered;  // flow order, then sample order (inputs_of's order)
  for (const FlowTensor& ft : rt.inputs) ordered.push_back(&ft);
  std::stable_sort(ordered.begin(), ordered.end(), [](auto* a, auto* b) { return a->flow < b->flow; });
  const bool is_mlp = std::holds_alternative<MlpSpec>(sec.model.spec);
  for (const FlowTensor* ft : ordered) {
    const size_t k = position_of(rt, ft->sample);
    if (program_.flows[size_t(ft->flow)].kind == FlowKind::Logits) {
      in.teacher[k] = floats_of(ft->tensor);
      in.has_teacher = true;
    } else if (is_mlp) {
      in.samples[k].values = floats_of(ft->tensor);
      in.spliced_flows[k].push_back(ft->flow);
    } else {
      in.samples[k].spliced.push_back(floats_of(ft->tensor));
      in.spliced_flows[k].push_back(ft->flow);
    }
  }
  if (stage_ > 0) {
    if (rt.stage_in.empty())
      throw std::logic_error(fmt::format("stage {} forward without stage {}'s output", stage_, stage_ - 1));
    if (!rt.stage_in.geometry)  // kept by another process: a replica's stages share one (processes.h)
      throw std::logic_error(fmt::format("stage {} forward without the layout of stage {}'s output", stage_, stage_ - 1));
    in.stage = {floats_of(rt.stage_in.tensor), rt.stage_in.geometry};
  }
  return in;
}

SectionRunner::Result SectionRunner::forward_rank(const RunTask& rt) {
  const Task& t = rt.task;
  const Section& sec = program_.sections[size_t(section_)];
  const size_t n = rt.samples.size();
  EngineInputs in = inputs_of(rt);
  const bool last = stage_ == stages_ - 1;
  ForwardOutput out = model_->forward(in.samples, stage_ > 0 ? &in.stage : nullptr);
  Result result;
  if (!last) {
    if (tp_rank0())  // the ranks' hidden states are the same
      result.stage_out = {hand_off({out.hidden.rows, out.hidden.cols}, out.hidden.data), out.geometry};
  } else if (!sec.loss.empty()) {
    if (!in.has_teacher) in.teacher.clear();
    const QueuedLoss q{t.id, rt.data->loss_positions.at(size_t(section_)), take_slots(sec.loss.size())};
    model_->loss_terms(*out.context, in.teacher, q.n_global, slot(q.slot));
    queued_losses_.push_back(q);
  }
  // Outputs: a copy per sample of what the outgoing flows carry (a
  // transformer's logits or its hidden states, by the flow's kind), handed on
  // by handle.
  std::vector<TensorRef> emitted, logits;  // per sample; a split transformer's logits gathered
  for (size_t fi = 0; fi < program_.flows.size() && last; ++fi) {
    if (program_.flows[fi].from != sec.name) continue;
    const bool carries_logits = program_.flows[fi].kind == FlowKind::Logits;
    if (!carries_logits && !tp_rank0()) continue;  // the same on every rank; the gather is collective
    std::vector<TensorRef>& whole = carries_logits ? logits : emitted;
    if (whole.empty())
      for (size_t k = 0; k < n; ++k)
        whole.push_back(carries_logits ? logits_of(out.logits.at(k))
                                       : hand_off({out.outputs[k].rows, out.outputs[k].cols}, out.outputs[k].data));
    for (size_t k = 0; k < n && tp_rank0(); ++k) result.outputs.push_back({int32_t(fi), rt.samples[k], whole[k]});
  }
  if (sec.mode == Mode::Train) {
    Pending pending;
    pending.spliced_flows = std::move(in.spliced_flows);
    // A stage recomputed whole lets its activations go back to the pool now
    // (out.context dies here) and keeps the task, its input.
    if (recompute_stage_) pending.replay = rt;
    else pending.context = std::move(out.context);
    pending_[t.micro_batch] = std::move(pending);
  }
  return result;
}

SectionRunner::Result SectionRunner::backward_rank(const RunTask& rt) {
  const Task& t = rt.task;
  auto it = pending_.find(t.micro_batch);
  if (it == pending_.end())
    throw std::logic_error(fmt::format("backward of micro-batch {} without its forward", t.micro_batch));
  Pending pending = std::move(it->second);
  pending_.erase(it);
  if (!pending.context) {  // a stage recomputed whole: its forward again, the same on every tp rank
    const RunTask& forward = held_.back().tasks.emplace_back(std::move(*pending.replay));
    EngineInputs in = inputs_of(forward);
    pending.context = model_->forward(in.samples, stage_ > 0 ? &in.stage : nullptr).context;
    const Section& sec = program_.sections[size_t(section_)];
    if (stage_ == stages_ - 1 && !sec.loss.empty()) {
      // The loss's gradient again (the same); its value was queued by the
      // forward, so this one goes to slots nobody reads.
      if (!in.has_teacher) in.teacher.clear();
      model_->loss_terms(*pending.context, in.teacher, forward.data->loss_positions.at(size_t(section_)),
                         slot(take_slots(sec.loss.size())));
    }
  }
  const size_t n = rt.samples.size();
  // The gradient of each sample's output: summed over the consumers in flow
  // order (a fixed order, whatever order they finished in), in backend
  // memory — each uploaded held (host memory) or copied (a resident
  // hand-off, once this backend waits for its marker), then added.
  std::vector<std::vector<const TensorRef*>> grads(n);
  {
    std::vector<const FlowTensor*> ordered;
    for (const FlowTensor& ft : rt.inputs) ordered.push_back(&ft);
    std::stable_sort(ordered.begin(), ordered.end(), [](auto* a, auto* b) { return a->flow < b->flow; });
    for (const FlowTensor* ft : ordered) grads[position_of(rt, ft->sample)].push_back(&ft->tensor);
  }
  // (Never a transformer's: its logits leave by logits flows only, which carry no gradient.)
  std::vector<std::span<const float>> output_grads(n);
  for (size_t k = 0; k < n; ++k) {
    if (grads[k].size() < 2) {
      if (!grads[k].empty()) output_grads[k] = floats_of(*grads[k][0]);
      continue;
    }
    TensorRef sum = kept(grads[k][0]->shape, [&](float* block, size_t count) {  // [shape]
      const ScopedBuffer next(*backend_, count);
      for (size_t g = 0; g < grads[k].size(); ++g) {
        const std::span<const float> src = floats_of(*grads[k][g]);
        if (src.size() != count) throw std::logic_error("output gradients of different shapes");
        backend_->copy_from_host_held(g == 0 ? block : next.get(), src.data(), count * sizeof(float));
        if (g > 0) backend_->accumulate(block, next.get(), count);
      }
    });
    output_grads[k] = floats_of(sum);
    held_.back().tensors.push_back(std::move(sum));
  }
  std::span<const float> stage_grad;
  if (stage_ < stages_ - 1) {
    if (rt.stage_in.empty())
      throw std::logic_error(fmt::format("stage {} backward without stage {}'s gradient", stage_, stage_ + 1));
    stage_grad = floats_of(rt.stage_in.tensor);
  }
  const std::vector<std::vector<RowsView>> in_grads = model_->backward(*pending.context, output_grads, stage_grad);
  Result out;
  if (!tp_rank0()) return out;  // rank 0's input gradients stand for the replica (the ranks' are the same)
  if (stage_ > 0) {
    const RowsView d = SectionModel::stage_input_grad(*pending.context);
    out.stage_out.tensor = hand_off({d.rows, d.cols}, d.data);
    return out;
  }
  for (size_t k = 0; k < n && k < in_grads.size(); ++k)
    for (size_t b = 0; b < in_grads[k].size() && b < pending.spliced_flows[k].size(); ++b) {
      const int32_t flow = pending.spliced_flows[k][b];
      // Only a producer that trains takes the gradient (a frozen encoder
      // runs no backward): the rest are not copied out, nor shipped.
      const Section* producer = program_.find_section(program_.flows[size_t(flow)].from);
      if (!producer || producer->mode != Mode::Train) continue;
      const RowsView& v = in_grads[k][b];
      out.outputs.push_back({flow, rt.samples[k], hand_off({v.rows, v.cols}, v.data)});
    }
  return out;
}

SectionRunner::StepScalars SectionRunner::reduce_grads() {
  return on_all_ranks([&] { return reduce_grads_rank(); });
}

SectionRunner::StepScalars SectionRunner::reduce_grads_rank() {
  size_t norm_slot = 0;
  if (float* g = model_->grads()) {
    const size_t n = model_->grad_count();
    if (model_->optimizer_sharded())  // the sums of this replica's shard only, in place
      dp_group_->reduce_scatter(g + shard_of(n, dp_group_->size(), dp_group_->rank()).offset, g, n);
    else if (dp_group_ && dp_group_->size() > 1)
      dp_group_->all_reduce(g, n);
    norm_slot = take_slots(1);
    model_->grad_sq_norm(slot(norm_slot));
  }
  // The one read of the step: every used chunk, in one copy each.
  std::vector<double> host(used_);
  for (size_t c = 0; c * kSlots < used_; ++c)
    backend_->copy_to_host(host.data() + c * kSlots, chunks_[c], std::min(kSlots, used_ - c * kSlots) * sizeof(double));
  StepScalars out;
  const Section& sec = program_.sections[size_t(section_)];
  for (const QueuedLoss& q : queued_losses_)
    out.losses.push_back(
        {q.task, SectionModel::loss_value(sec, std::span<const double>(host.data() + q.slot, sec.loss.size()), q.n_global)});
  if (model_->grads())
    out.grad_sq_norm = model_->optimizer_sharded() ? group_sq_norm(host[norm_slot]) : host[norm_slot];
  queued_losses_.clear();
  used_ = 0;
  release_passed();  // the copies above waited for the backend
  return out;
}

void SectionRunner::apply(double scale, double lr) {
  if (!model_->grads()) throw std::logic_error("an optimizer step on a frozen section");
  model_->adamw_step(program_.train.optimizer, lr, float(scale));  // clipping inside the step
  model_->zero_grads();
}

// Σ over the group of each replica's shard norm², in rank order, so every
// replica gets the same global norm². The Communicator moves floats: each
// double travels as its two floats' bits (all_gather copies, never adds).
double SectionRunner::group_sq_norm(double mine) {
  static_assert(sizeof(double) == 2 * sizeof(float));
  const size_t ranks = size_t(dp_group_->size());
  std::vector<double> host(ranks);
  const ScopedBuffer scoped(*backend_, 2 * ranks + 2);  // [2·ranks] gathered, then [2] mine
  float* buf = scoped.get();
  backend_->copy_from_host(buf + 2 * ranks, &mine, sizeof(double));
  dp_group_->all_gather(buf, buf + 2 * ranks, 2 * ranks);
  backend_->copy_to_host(host.data(), buf, ranks * sizeof(double));
  double sum = 0;
  for (double d : host) sum += d;
  return sum;
}

size_t SectionRunner::optimizer_state_bytes() const { return model_->optimizer_state_bytes(); }
size_t SectionRunner::memory_bytes() const {
  return sizeof(float) * (size_t(model_->parameter_count()) + model_->grad_count() + model_->activation_pool_floats()) +
         model_->optimizer_state_bytes() + model_->bf16_copy_bytes();
}
size_t SectionRunner::unsharded_optimizer_state_bytes() const { return 2 * model_->grad_count() * sizeof(float); }
bool SectionRunner::optimizer_sharded() const { return model_->optimizer_sharded(); }

// Tensors keep their section prefix on every stage (their names differ by layer).
void SectionRunner::save(const std::string& path) {
  on_all_ranks([&] { model_->save(path, section_name()); });
}
void SectionRunner::load(const std::string& path) { model_->load(path, section_name()); }

}  // namespace maestro
