// SectionModel: the flat parameter/gradient/moment buffers, initialisation,
// losses, AdamW, checkpoints and weights files around the four models (see
// section_model.h and docs/engine.md).
#include "nn/section_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

#include "graph/tensor_parallel.h"
#include "nn/init.h"
#include "nn/model_impl.h"
#include "nn/safetensors.h"
#include "nn/vocab_parallel_loss.h"

namespace maestro {

void input_error(const Section& s, const std::string& what) {
  throw std::invalid_argument(fmt::format("section '{}': {}", s.name, what));
}

float* pack_teacher_logits(const Section& s, Backend& b, ForwardContext& ctx,
                           const std::vector<std::span<const float>>& teacher_logits, int64_t vocab) {
  const size_t samples = ctx.text_offsets.size() - 1;
  if (teacher_logits.size() != samples)
    input_error(s, fmt::format("kl needs teacher logits for each of the {} samples, got {}", samples,
                               teacher_logits.size()));
  const int64_t V = ctx.vocab, first = ctx.vocab_first, width = ctx.vocab_valid;
  float* packed = V == width ? ctx.take(ctx.text_offsets.back() * V) : ctx.take_zeroed(ctx.text_offsets.back() * V);
  for (size_t i = 0; i < samples; ++i) {
    const int64_t rows = ctx.text_offsets[i + 1] - ctx.text_offsets[i];
    const std::span<const float> t = teacher_logits[i];
    if (int64_t(t.size()) % vocab != 0 || int64_t(t.size()) < rows * vocab)
      input_error(s, fmt::format("sample {}: teacher logits of {} floats, expected at least [{}, {}]", i, t.size(),
                                 rows, vocab));
    float* dst = packed + ctx.text_offsets[i] * V;
    if (V == vocab) b.copy_from_host_held(dst, t.data(), size_t(rows * V) * sizeof(float));  // whole rows
    else if (rows > 0 && width > 0)  // this rank's columns [first, first + width) of each row
      b.copy_rows_from_host_held(dst, size_t(V) * sizeof(float), t.data() + first, size_t(vocab) * sizeof(float),
                                 size_t(width) * sizeof(float), size_t(rows));
  }
  return packed;
}

void copy_stage_grad(const Section& s, Backend& b, float* dst, std::span<const float> grad, int64_t rows,
                     int64_t cols) {
  if (int64_t(grad.size()) != rows * cols)
    input_error(s, fmt::format("the gradient of the stage's output has {} floats, expected [{}, {}]", grad.size(),
                               rows, cols));
  b.copy_from_host_held(dst, grad.data(), size_t(rows * cols) * sizeof(float));
}

namespace {

// Σ over the tp ranks of a double, through the float all-reduce (on backend
// memory, which an NCCL group needs): each value as hi + lo floats (hi =
// float(x), lo = float(x − hi)), ~48 bits kept; the same on every rank.
double tp_sum(Backend& b, Communicator& comm, double x) {
  float parts[2] = {float(x), 0.0f};
  parts[1] = float(x - double(parts[0]));
  const ScopedBuffer buf(b, 2);
  b.copy_from_host(buf.get(), parts, sizeof parts);
  comm.all_reduce(buf.get(), 2);
  b.copy_to_host(parts, buf.get(), sizeof parts);
  return double(parts[0]) + double(parts[1]);
}

}  // namespace

struct SectionModel::Impl {
  explicit Impl(Backend& b) : pool(b) {}
  ActivationPool pool;  // declared first: contexts give buffers back to it, the model below may hold some
  std::unique_ptr<ModelImpl> model;
};

SectionModel::SectionModel(const Section& section, Backend& backend, uint64_t seed, int64_t stage, int64_t stages,
                           TensorParallel tp)
    : section_(section), backend_(backend), stage_(stage), stages_(stages), tp_(tp) {
  LayerRange layers;
  try {
    layers = stage_layers(section.model, stage, stages);
    whole_ = stage_tensors(section.model, stage, stages);
  } catch (const std::invalid_argument& e) {
    input_error(section_, e.what());
  }
  if (tp_.size < 1 || tp_.rank < 0 || tp_.rank >= tp_.size)
    input_error(section_, fmt::format("tensor-parallel rank {} of {}", tp_.rank, tp_.size));
  if (tp_.size > 1) {
    if (!tp_.comm || tp_.comm->size() != tp_.size || tp_.comm->rank() != tp_.rank)
      input_error(section_, fmt::format("tp = {} needs a communicator of {} ranks at rank {}", tp_.size, tp_.size,
                                        tp_.rank));
    if (const std::string e = tp_divisibility_error(section.model, tp_.size); !e.empty())
      input_error(section_, "tensor parallelism: " + e);
  }
  // Flat layout: the split tensors, then (tp > 1) the replicated ones.
  offsets_.assign(whole_.size(), 0);
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < whole_.size(); ++i) {
      const bool split = tp_.size > 1 && tp_split(section.model, whole_[i].name) != TpSplit::Replicated;
      if ((pass == 0) != (split || tp_.size == 1)) continue;
      offsets_[i] = n_params_;
      n_params_ += tp_shard_shape(section.model, whole_[i], tp_.size).numel();
    }
    if (pass == 0) n_split_ = n_params_;
  }
  for (const auto& t : whole_) tensors_.push_back(tp_shard_shape(section.model, t, tp_.size));
  params_ = backend_.allocate(n_params_);
  if (backend_.wants_bf16_operands() && n_params_ > 0) {
    for (const auto& t : tensors_) {
      offsets16_.push_back(params16_bytes_);
      params16_bytes_ += (size_t(t.numel()) * 2 + 255) / 256 * 256;
    }
    params16_ = static_cast<std::byte*>(backend_.allocate(params16_bytes_ / 2, DType::BF16));
    params16_dense_ = true;
    for (size_t i = 0; i < tensors_.size(); ++i)
      params16_dense_ = params16_dense_ && offsets16_[i] == size_t(2 * offsets_[i]);
  }
  scalars_ = backend_.allocate_scalars(std::max<size_t>(1, section_.loss.size()));
  if (section_.mode == Mode::Train) {
    grads_ = backend_.allocate(n_params_);  // zero-filled: written, as far as the flags go
    grad_unwritten_.assign(tensors_.size(), 0);
    for (size_t i = 0; i < tensors_.size(); ++i) grad_order_.push_back(i);
    std::sort(grad_order_.begin(), grad_order_.end(), [&](size_t a, size_t b) { return offsets_[a] < offsets_[b]; });
    adam_m_ = backend_.allocate(n_params_);
    adam_v_ = backend_.allocate(n_params_);
    opt_count_ = n_params_;
  }
  std::vector<float> whole, shard;
  for (size_t i = 0; i < tensors_.size(); ++i) {  // the whole tensor's values, so every tp agrees
    whole.resize(whole_[i].numel());
    shard.resize(tensors_[i].numel());
    init_tensor(whole.data(), whole_[i], section_.name + "." + whole_[i].name, seed);
    tp_slice(shard.data(), whole.data(), section_.model, whole_[i], tp_.size, tp_.rank);
    backend_.copy_from_host(params_ + offsets_[i], shard.data(), shard.size() * sizeof(float));
  }
  if (!section_.weights.empty()) {
    try {
      load_weights(section_.weights);
    } catch (const std::exception& e) {
      release_buffers();  // the destructor does not run for a throwing constructor
      throw std::runtime_error(fmt::format("section '{}': weights: {}", section_.name, e.what()));
    }
  }
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < tensors_.size(); ++i) index[tensors_[i].name] = i;
  ParamLookup lookup = [this, index](const std::string& name) {
    const size_t i = index.at(name);
    Param p{params_ + offsets_[i], params16_ ? params16_ + offsets16_[i] : nullptr};
    if (grads_) {
      p.g_ = grads_ + offsets_[i], p.n_ = size_t(tensors_[i].numel());
      p.unwritten_ = &grad_unwritten_[i], p.backend_ = &backend_;
    }
    return p;
  };
  impl_ = std::make_unique<Impl>(backend_);
  const std::string kind = section_.model.builtin();
  const StagePart part{stage == 0, stage == stages - 1, layers.first, layers.last, tp_};
  if (kind == "transformer") impl_->model = make_transformer(section_, backend_, lookup, part);
  else if (kind == "vit") impl_->model = make_vit(section_, backend_, lookup, part);
  else if (kind == "audio_encoder") impl_->model = make_audio_encoder(section_, backend_, lookup, part);
  else impl_->model = make_mlp(section_, backend_, lookup, part);
}

SectionModel::~SectionModel() {
  impl_.reset();
  release_buffers();
}

void SectionModel::release_buffers() {
  for (float** p : {&params_, &grads_, &adam_m_, &adam_v_})
    if (*p) backend_.release(std::exchange(*p, nullptr));
  if (scalars_) backend_.release(std::exchange(scalars_, nullptr));
  if (params16_) backend_.release(std::exchange(params16_, nullptr));
}

void SectionModel::refresh_params16() {
  if (!params16_ || !params16_stale_) return;
  // One convert when every copy sits at twice its fp32 offset (every tensor
  // a multiple of 128 elements, as in the 1.3B section), else one per tensor.
  if (params16_dense_) backend_.convert(params16_, DType::BF16, params_, DType::F32, size_t(n_params_));
  else
    for (size_t i = 0; i < tensors_.size(); ++i)
      backend_.convert(params16_ + offsets16_[i], DType::BF16, params_ + offsets_[i], DType::F32,
                       size_t(tensors_[i].numel()));
  params16_stale_ = false;
}

size_t SectionModel::activation_pool_floats() const { return impl_->pool.allocated_floats(); }

ForwardOutput SectionModel::forward(const std::vector<SampleInput>& samples, const StageInput* stage_input) {
  refresh_params16();
  auto ctx = std::make_shared<ForwardContext>(backend_, impl_->pool);
  // A transformer whose logits nobody reads (TransformerSpec::logits_read:
  // a text encoder) skips its head's GEMM and its [n_text, vocab]
  // activations: ForwardOutput::logits is empty and loss() is an error.
  if (auto* t = std::get_if<TransformerSpec>(&section_.model.spec)) ctx->logits_wanted = t->logits_read;
  return impl_->model->forward(std::move(ctx), samples, stage_ == 0 ? nullptr : stage_input);
}

void SectionModel::loss_terms(ForwardContext& ctx, const std::vector<std::span<const float>>& teacher_logits,
                              int64_t n_global, double* raw) {
  if (section_.loss.empty()) input_error(section_, "loss() on a section without a loss");
  if (!ctx.logits) input_error(section_, "loss() needs a transformer's logits");
  if (ctx.dlogits) input_error(section_, "loss() called twice for one micro-batch");
  const int64_t V = ctx.vocab, Nt = ctx.text_offsets.back();
  int64_t positions = 0;
  for (int32_t t : ctx.targets) positions += t >= 0;
  if (positions > 0 && n_global <= 0)
    input_error(section_, fmt::format("loss normaliser N_global = {} with {} target positions", n_global, positions));
  ctx.dlogits = ctx.take_zeroed(Nt * V);
  if (positions == 0) return backend_.zero_scalars(raw, section_.loss.size());
  if (tp_.size > 1) return vocab_parallel_loss(backend_, *tp_.comm, section_, ctx, teacher_logits, n_global, raw);
  const float* teacher = nullptr;
  for (size_t k = 0; k < section_.loss.size(); ++k) {
    const LossTerm& term = section_.loss[k];
    const float scale = float(term.weight / double(n_global));
    if (term.kind == LossKind::CrossEntropy) {
      backend_.cross_entropy(raw + k, ctx.dlogits, ctx.logits, ctx.targets.data(), Nt, V, scale);
      continue;
    }
    if (!teacher) teacher = pack_teacher_logits(section_, backend_, ctx, teacher_logits, V);
    backend_.kl_divergence(raw + k, ctx.dlogits, ctx.logits, teacher, ctx.targets.data(), Nt, V,
                           float(term.temperature), scale);
  }
}

double SectionModel::loss_value(const Section& section, std::span<const double> raw, int64_t n_global) {
  if (n_global <= 0) return 0;  // no target position in the global batch: nothing to average (and no gradient)
  double total = 0;
  for (size_t k = 0; k < section.loss.size(); ++k) total += section.loss[k].weight * raw[k] / double(n_global);
  return total;
}

double SectionModel::loss(ForwardContext& ctx, const std::vector<std::span<const float>>& teacher_logits,
                          int64_t n_global) {
  loss_terms(ctx, teacher_logits, n_global, scalars_);
  std::vector<double> raw(section_.loss.size());
  backend_.copy_to_host(raw.data(), scalars_, raw.size() * sizeof(double));
  return loss_value(section_, raw, n_global);
}

std::vector<std::vector<RowsView>> SectionModel::backward(ForwardContext& ctx,
                                                          const std::vector<std::span<const float>>& output_grads,
                                                          std::span<const float> stage_grad) {
  if (ctx.backward_done) input_error(section_, "backward() called twice for one micro-batch");
  ctx.backward_done = true;
  refresh_params16();
  return impl_->model->backward(ctx, output_grads, stage_grad);
}

RowsView SectionModel::stage_input_grad(const ForwardContext& ctx) { return ctx.stage_dinput; }

void SectionModel::zero_grads() {
  // Marked, not zeroed: the backward's first write of each gradient
  // overwrites it or zeroes it first (model_impl.h's Param), and
  // settle_grads() zeroes the ones it never wrote before they are read.
  if (grads_) std::fill(grad_unwritten_.begin(), grad_unwritten_.end(), uint8_t(1));
}

void SectionModel::settle_grads() {
  // The unwritten tensors, in runs of adjacent ones: one zero per run.
  size_t i = 0;
  while (i < grad_order_.size()) {
    if (!grad_unwritten_[grad_order_[i]]) {
      ++i;
      continue;
    }
    const int64_t begin = offsets_[grad_order_[i]];
    int64_t end = begin;
    for (; i < grad_order_.size() && grad_unwritten_[grad_order_[i]] && offsets_[grad_order_[i]] == end; ++i) {
      end += tensors_[grad_order_[i]].numel();
      grad_unwritten_[grad_order_[i]] = 0;
    }
    backend_.zero(grads_ + begin, size_t(end - begin));
  }
}

void SectionModel::grad_sq_norm(double* out) {
  // This rank's share of the global norm²: the tensors it counts (the split ones on
  // every tp rank, the replicated ones on tp rank 0 only) within its dp shard (ZeRO-1).
  settle_grads();
  const int64_t counted = tp_.rank == 0 ? n_params_ : n_split_;
  const int64_t begin = std::min(opt_offset_, counted), end = std::min(opt_offset_ + opt_count_, counted);
  if (grads_) backend_.sq_norm(out, grads_ + begin, size_t(end - begin));
  else backend_.zero_scalars(out, 1);
}

double SectionModel::grad_sq_norm() {
  grad_sq_norm(scalars_);
  double host = 0;
  backend_.copy_to_host(&host, scalars_, sizeof(double));
  if (tp_.size > 1) host = tp_sum(backend_, *tp_.comm, host);
  return host;
}

void SectionModel::adamw_step(const OptimizerSpec& opt, double lr, float grad_scale) {
  if (!grads_) input_error(section_, "an optimizer step on a frozen section");
  settle_grads();
  ++adam_t_;
  // The step writes the bf16 copy too when it updates every parameter and
  // the copy is laid out like them (dense); else the copy is refreshed from
  // the parameters before the next pass (a sharded step's all-gather writes
  // the other replicas' parameters here).
  void* p16 = params16_dense_ && !all_gather_ ? params16_ : nullptr;
  backend_.adamw(params_ + opt_offset_, grads_ + opt_offset_, adam_m_, adam_v_, size_t(opt_count_), float(lr),
                 float(opt.beta1), float(opt.beta2), float(opt.eps), float(opt.weight_decay), adam_t_, grad_scale,
                 p16);
  if (all_gather_) all_gather_(params_, params_ + opt_offset_, size_t(n_params_));
  params16_stale_ = p16 == nullptr;
}

void SectionModel::shard_optimizer(int64_t offset, int64_t count, AllGather all_gather) {
  if (!grads_) input_error(section_, "a sharded optimizer on a frozen section");
  if (all_gather_ || offset < 0 || count < 0 || offset + count > n_params_)
    throw std::logic_error(fmt::format("shard_optimizer({}, {}) of {} parameters", offset, count, n_params_));
  // [count] each: this shard's slice of the moments (loaded or zero), the whole freed
  for (float** moments : {&adam_m_, &adam_v_}) {
    float* shard = backend_.allocate(size_t(std::max<int64_t>(count, 1)));
    backend_.copy(shard, *moments + offset, size_t(count));
    backend_.release(std::exchange(*moments, shard));
  }
  opt_offset_ = offset, opt_count_ = count;
  all_gather_ = std::move(all_gather);
}

namespace {

std::string full_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// A host copy of n floats of backend memory, as an F32 tensor of `shape`.
Tensor host_copy(Backend& b, const float* src, const std::vector<int64_t>& shape) {
  Tensor t = Tensor::host(DType::F32, shape);
  b.copy_to_host(t.f32(), src, t.numel() * sizeof(float));
  return t;
}

}  // namespace

Tensor SectionModel::whole_tensor(const float* buffer, size_t i) const {
  if (tp_.size == 1) return host_copy(backend_, buffer + offsets_[i], tensors_[i].shape);
  // Every rank's shard (all the same size), rank after rank, gathered in
  // backend memory, then unsliced on the host.
  const size_t n = size_t(tp_.size * tensors_[i].numel());
  const ScopedBuffer on_backend(backend_, n);
  tp_.comm->all_gather(on_backend.get(), buffer + offsets_[i], n);
  const Tensor gathered = host_copy(backend_, on_backend.get(), {tp_.size, tensors_[i].numel()});
  Tensor whole = Tensor::host(DType::F32, whole_[i].shape);
  for (int64_t r = 0; r < tp_.size; ++r)
    tp_unslice(whole.f32(), gathered.f32() + r * tensors_[i].numel(), section_.model, whole_[i], tp_.size, r);
  return whole;
}

void SectionModel::save(const std::string& path, const std::string& prefix) const {
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < tensors_.size() && !path.empty(); ++i)
    out.push_back({full_name(prefix, whole_[i].name), whole_tensor(params_, i)});
  std::map<std::string, std::string> meta;
  if (grads_) {
    // Whole moments, per tensor: this replica's, or (sharded) every dp shard
    // gathered into one temporary [n_params_] buffer at a time; then, with
    // tp > 1, every tp rank's slice (whole_tensor). A replica that only takes
    // part in the dp gather (path "") reads nothing back.
    std::vector<Tensor> moments[2];
    for (int k = 0; k < 2; ++k) {
      const ScopedBuffer whole(backend_, all_gather_ ? size_t(n_params_) : 0);
      const float* src = k == 0 ? adam_m_ : adam_v_;
      if (whole.get()) all_gather_(whole.get(), src, size_t(n_params_)), src = whole.get();
      for (size_t i = 0; i < tensors_.size() && !path.empty(); ++i) moments[k].push_back(whole_tensor(src, i));
    }
    for (size_t i = 0; i < tensors_.size() && !path.empty(); ++i) {
      const std::string n = full_name(prefix, whole_[i].name);
      out.push_back({n + ":exp_avg", std::move(moments[0][i])});
      out.push_back({n + ":exp_avg_sq", std::move(moments[1][i])});
    }
    meta["adamw_step"] = std::to_string(adam_t_);
  }
  if (!path.empty() && tp_.rank == 0) write_safetensors(path, out, meta);
}

void SectionModel::read_parameters(const std::string& path, const std::string& prefix, bool with_optimizer) {
  SafetensorsReader file(path);
  std::vector<float> whole, shard;
  // Tensor i's whole values from the file, this tp rank's slice of them, and of
  // that the part in the flat range [first, first + count) that dst holds.
  auto read = [&](const std::string& name, size_t i, float* dst, int64_t first = 0, int64_t count = INT64_MAX) {
    whole.resize(whole_[i].numel());
    shard.resize(tensors_[i].numel());
    file.read_f32(name, whole_[i].shape, whole.data());
    tp_slice(shard.data(), whole.data(), section_.model, whole_[i], tp_.size, tp_.rank);
    const int64_t begin = std::max(offsets_[i], first), end = std::min(offsets_[i] + tensors_[i].numel(), first + count);
    if (begin < end)
      backend_.copy_from_host(dst + (begin - first), shard.data() + (begin - offsets_[i]), size_t(end - begin) * sizeof(float));
  };
  params16_stale_ = true;
  for (size_t i = 0; i < tensors_.size(); ++i) read(full_name(prefix, whole_[i].name), i, params_);
  if (!with_optimizer) return;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const std::string n = full_name(prefix, whole_[i].name);
    read(n + ":exp_avg", i, adam_m_, opt_offset_, opt_count_);
    read(n + ":exp_avg_sq", i, adam_v_, opt_offset_, opt_count_);
  }
  auto it = file.metadata().find("adamw_step");
  if (it == file.metadata().end()) throw std::runtime_error(path + ": no 'adamw_step' in the metadata");
  try {
    adam_t_ = std::stoll(it->second);
  } catch (const std::exception&) {
    throw std::runtime_error(fmt::format("{}: adamw_step '{}' is not an integer", path, it->second));
  }
}

void SectionModel::load(const std::string& path, const std::string& prefix) {
  read_parameters(path, prefix, grads_ != nullptr);
}

void SectionModel::load_weights(const std::string& path) { read_parameters(path, "", false); }

double lr_at(const TrainSpec& spec, int64_t step) {
  const double lr = spec.optimizer.lr;
  if (spec.schedule.kind == LrSchedule::Kind::Constant) return lr;
  const int64_t warmup = spec.schedule.warmup;
  if (step < warmup) return lr * double(step) / double(warmup);
  const double progress = double(step - warmup) / double(std::max<int64_t>(1, spec.steps - warmup));
  return lr * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace maestro
