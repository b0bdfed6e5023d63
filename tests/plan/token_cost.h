// TokenCost: a cost model for the plan tests — time proportional to a
// section's tokens (graph.tokens), a fixed overhead per micro-batch, split
// over tp·pp, backward twice forward. Monotone and never faster than its
// peak_device_s, as cost_model.h requires, so the lower bound must hold.
#pragma once

#include "graph/section_graph.h"
#include "plan/cost_model.h"

namespace maestro::test {

class TokenCost : public CostModel {
 public:
  explicit TokenCost(const SectionGraph& g) : g_(g) {}

  double forward_s(int s, const std::vector<const Sample*>& mb, const SectionPlan& p) const override {
    return kOverhead + rate(s) * tokens(s, mb) / double(p.tp * p.pp);
  }
  double backward_s(int s, const std::vector<const Sample*>& mb, const SectionPlan& p) const override {
    return 2 * forward_s(s, mb, p);
  }
  double transfer_s(const Flow&, const std::vector<const Sample*>& mb, const SectionPlan&,
                    const SectionPlan&) const override {
    return 1e-5 * double(mb.size());
  }
  double grad_sync_s(int s, const SectionPlan& p) const override { return p.dp > 1 ? 1e-3 * (s + 1) : 0.0; }
  double optimizer_s(int, const SectionPlan& p) const override { return 5e-4 / double(p.tp * p.pp); }
  int64_t weights_bytes_per_device(int s, const SectionPlan& p) const override { return 1000 * (s + 1) / (p.tp * p.pp); }
  int64_t activation_bytes(int s, const std::vector<const Sample*>& mb, const SectionPlan& p) const override {
    return int64_t(10 * tokens(s, mb)) / (p.tp * p.pp);
  }
  double peak_device_s(int s, const Sample& sample) const override {
    const double t = rate(s) * tokens(s, {&sample});
    return g_.section(s).mode == Mode::Train ? 3 * t : t;
  }

  static constexpr double kOverhead = 1e-4;

 private:
  double rate(int s) const { return 1e-6 * (s + 1); }
  double tokens(int s, const std::vector<const Sample*>& mb) const {
    double n = 0;
    for (const Sample* x : mb) n += double(g_.tokens(s, {x->modalities, x->text_tokens, x->images, x->audio_frames}));
    return n;
  }
  const SectionGraph& g_;
};

}  // namespace maestro::test
