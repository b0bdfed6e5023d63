// mlp: the projector (sect-language.md, "Built-in models"): `layers` biased
// linear layers in -> hidden -> ... -> out with the activation between them
// (gelu = the tanh form of backend.h; silu; relu), applied row-wise to every
// sample's rows, packed end to end.
// As a tensor-parallel rank (graph/tensor_parallel.h): layers in pairs, the
// first column-parallel (its rows of the hidden width; the gradient of its
// replicated input all-reduced in backward), the second row-parallel (its
// columns; the output all-reduced in forward, the replicated bias added by
// rank 0); an unpaired last layer runs whole on every rank.
#include <fmt/format.h>

#include <algorithm>

#include "nn/model_impl.h"

namespace maestro {

namespace {

class Mlp final : public ModelImpl {
 public:
  Mlp(const Section& s, Backend& b, const ParamLookup& p, StagePart part)
      : section_(s), spec_(std::get<MlpSpec>(s.model.spec)), b_(b) {
    const int64_t tp = part.tp.size;
    for (int64_t i = 0; i < spec_.layers; ++i) {
      int64_t in = i == 0 ? spec_.in : spec_.hidden, out = i == spec_.layers - 1 ? spec_.out : spec_.hidden;
      Split split = Split::None;
      if (tp > 1 && i % 2 == 0 && i + 1 < spec_.layers) split = Split::Column, out /= tp;
      if (tp > 1 && i % 2 == 1) split = Split::Row, in /= tp;
      layers_.push_back({p(fmt::format("layers.{}.weight", i)), p(fmt::format("layers.{}.bias", i)), in, out, split});
    }
    if (tp > 1) tp_ = part.tp.comm;
    adds_bias_ = part.tp.rank == 0;
    if (spec_.act == Activation::Silu) {  // silu(x) = swiglu(gate = x, up = 1)
      const std::vector<float> ones(spec_.hidden, 1.0f);
      ones_capacity_ = spec_.hidden;
      ones_ = b_.allocate(ones_capacity_);
      b_.copy_from_host(ones_, ones.data(), ones.size() * sizeof(float));
    }
  }
  ~Mlp() override {
    if (ones_) b_.release(ones_);
  }

  struct Acts final : Activations {
    std::vector<int64_t> rows;  // [samples]
    int64_t N = 0;
    std::vector<float*> xs;  // [layers] inputs of each layer, [N, in_i]
    std::vector<float*> zs;  // [layers] outputs of each linear, [N, out_i]
  };

  ForwardOutput forward(std::shared_ptr<ForwardContext> ctxp, const std::vector<SampleInput>& samples,
                        const StageInput* /*one stage*/) override {
    ForwardContext& ctx = *ctxp;
    auto acts = std::make_unique<Acts>();
    Acts& a = *acts;
    for (size_t i = 0; i < samples.size(); ++i) {
      if (samples[i].values.size() % spec_.in != 0)
        input_error(section_, fmt::format("sample {}: {} values are not a whole number of rows of width {}", i,
                                          samples[i].values.size(), spec_.in));
      a.rows.push_back(int64_t(samples[i].values.size()) / spec_.in);
      a.N += a.rows.back();
    }
    const int64_t N = a.N;
    float* x = ctx.take(N * spec_.in);
    int64_t at = 0;
    for (const auto& s : samples) {
      b_.copy_from_host_held(x + at, s.values.data(), s.values.size() * sizeof(float));
      at += int64_t(s.values.size());
    }
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      a.xs.push_back(x);
      float* z = ctx.take(N * L.out);
      const bool row = L.split == Split::Row;
      b_.linear_forward(z, x, L.w.linear(), row && !adds_bias_ ? nullptr : L.b.w, N, L.in, L.out);
      if (row) tp_->all_reduce(z, N * L.out);
      a.zs.push_back(z);
      if (l + 1 < layers_.size()) {
        x = ctx.take(N * L.out);
        act_forward(x, z, N * L.out);
      }
    }
    ForwardOutput out;
    int64_t first = 0;
    for (int64_t r : a.rows) {
      out.outputs.push_back({a.zs.back() + first * spec_.out, r, spec_.out});
      first += r;
    }
    ctx.acts = std::move(acts);
    out.context = std::move(ctxp);
    return out;
  }

  std::vector<std::vector<RowsView>> backward(ForwardContext& ctx,
                                              const std::vector<std::span<const float>>& output_grads,
                                              std::span<const float> /*one stage*/) override {
    Acts& a = static_cast<Acts&>(*ctx.acts);
    const int64_t N = a.N;
    float* dz = ctx.take_zeroed(N * spec_.out);
    int64_t first = 0;
    for (size_t i = 0; i < a.rows.size(); ++i) {
      if (i < output_grads.size() && !output_grads[i].empty()) {
        if (int64_t(output_grads[i].size()) != a.rows[i] * spec_.out)
          input_error(section_, fmt::format("sample {}: output gradient of {} floats, expected [{}, {}]", i,
                                            output_grads[i].size(), a.rows[i], spec_.out));
        b_.copy_from_host_held(dz + first * spec_.out, output_grads[i].data(), output_grads[i].size() * sizeof(float));
      }
      first += a.rows[i];
    }
    float* dx = nullptr;
    for (int64_t l = int64_t(layers_.size()) - 1; l >= 0; --l) {
      const Layer& L = layers_[l];
      dx = ctx.take(N * L.in);
      b_.linear_backward(Grad::overwrite(dx), L.w.grad_write(), L.b.grad_add(), dz, a.xs[l], L.w.linear(), N, L.in,
                         L.out);
      if (L.split == Split::Column) tp_->all_reduce(dx, N * L.in);
      if (l > 0) {
        dz = ctx.take(N * L.in);
        act_backward(dz, dx, a.zs[l - 1], N * L.in);
      }
    }
    std::vector<std::vector<RowsView>> out(a.rows.size());
    first = 0;
    for (size_t i = 0; i < a.rows.size(); ++i) {
      out[i].push_back({dx + first * spec_.in, a.rows[i], spec_.in});
      first += a.rows[i];
    }
    return out;
  }

 private:
  enum class Split { None, Column, Row };
  struct Layer {
    Param w, b;  // [out, in], [out]  (this rank's shard: in or out divided by tp)
    int64_t in, out;
    Split split;
  };

  // out[n] = act(z[n])
  void act_forward(float* out, const float* z, size_t n) {
    switch (spec_.act) {
      case Activation::Gelu: b_.gelu_forward(out, z, n); break;
      case Activation::Silu:
        for (size_t r = 0; r < n; r += ones_capacity_)
          b_.swiglu_forward(out + r, z + r, ones_, std::min(ones_capacity_, n - r));
        break;
      case Activation::Relu: b_.relu_forward(out, z, n); break;
    }
  }
  // dz[n] = dout[n] · act'(z[n])   (overwritten)
  void act_backward(float* dz, const float* dout, const float* z, size_t n) {
    switch (spec_.act) {
      case Activation::Gelu: b_.gelu_backward(Grad::overwrite(dz), dout, z, n); break;
      case Activation::Silu:
        for (size_t r = 0; r < n; r += ones_capacity_)
          b_.swiglu_backward(Grad::overwrite(dz + r), nullptr, dout + r, z + r, ones_, std::min(ones_capacity_, n - r));
        break;
      case Activation::Relu: b_.relu_backward(Grad::overwrite(dz), dout, z, n); break;
    }
  }

  const Section& section_;
  MlpSpec spec_;
  Backend& b_;
  std::vector<Layer> layers_;
  Communicator* tp_ = nullptr;  // the tensor-parallel group, null for one rank
  bool adds_bias_ = true;       // row-parallel layers: rank 0 adds the replicated bias
  float* ones_ = nullptr;  // [hidden] for silu
  size_t ones_capacity_ = 0;
};

}  // namespace

std::unique_ptr<ModelImpl> make_mlp(const Section& s, Backend& b, const ParamLookup& params, StagePart part) {
  return std::make_unique<Mlp>(s, b, params, part);
}

}  // namespace maestro
