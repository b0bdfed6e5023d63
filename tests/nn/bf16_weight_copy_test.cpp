// The bf16 copies of linear operands the engine keeps for a backend with
// bf16 GEMMs (Backend::wants_bf16_operands; docs/engine.md) — the
// parameters' (section_model.h) and the layers' inputs — on CheckedBackend,
// which wants the copies and checks every one a linear op reads against its
// fp32 values, element by element. The parameters' copy stays current through optimizer
// steps, a sharded optimizer's all-gather, checkpoint loads and writes
// through params(); a write the model cannot see is caught — so the checks
// can fail. Training results are the fp32 path's (CheckedBackend computes
// from the fp32 weights; the CUDA backend's results with and without copies
// are compared bit for bit by gpu/backend_compare.cpp).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "cpu/cpu_backend.h"
#include "oracle_harness.h"
#include "support/checked_backend.h"

using namespace maestro;
using namespace maestro::test;

namespace {

Section llm() {
  return make_section("llm", llama(2, 32, 4, 2, 48, 37, 16), Mode::Train, false,
                      {{LossKind::CrossEntropy, 1.0, 1.0}});
}

// One micro-batch: forward, loss, backward; the loss.
double train_pass(SectionModel& m, uint64_t seed) {
  const std::vector<int32_t> tokens = random_tokens(11, seed, 37);
  std::vector<SampleInput> in(1);
  in[0].tokens = tokens;
  ForwardOutput fw = m.forward(in);
  const double loss = m.loss(*fw.context, {}, 10);
  m.backward(*fw.context, {});
  return loss;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(bf16_weight_copy)

BOOST_AUTO_TEST_CASE(stays_current_through_steps_loads_and_writes) {
  test_support::CheckedBackend b(1);
  const Section sec = llm();
  SectionModel m(sec, b, 3);
  BOOST_TEST(m.bf16_copy_bytes() >= size_t(m.parameter_count()) * 2);
  {  // written through params() (CheckedBackend's memory is host memory)
    float* p = m.params();
    for (int64_t j = 0; j < m.parameter_count(); ++j) p[j] *= 1.5f;
  }
  const TrainSpec train;
  for (uint64_t step = 0; step < 3; ++step) {
    m.zero_grads();
    train_pass(m, step);
    m.adamw_step(train.optimizer, 1e-2);
  }
  // Copies checked current: (15 weights — 7 linears per layer × 2 layers
  // and the head — and 15 inputs, 7 per layer and the head's) × (forward +
  // backward); per layer in backward, the gate, up, q and k projections'
  // dout (swiglu's gradients, GradOut; rope's, Out), and the attention's q,
  // k, v forward and backward; × 3 steps.
  const int64_t uses = b.bf16_copy_uses();
  BOOST_TEST(uses == ((15 + 15) * 2 + 2 * (4 + 6)) * 3);

  // A checkpoint load replaces every parameter: the next passes read the loaded ones.
  const std::string dir = temp_dir("bf16_copy");
  m.save(dir + "/a.safetensors", "llm");
  const double before = train_pass(m, 9);
  m.zero_grads();
  train_pass(m, 1);
  m.adamw_step(train.optimizer, 1e-2);  // moves away from the checkpoint
  m.load(dir + "/a.safetensors", "llm");
  BOOST_TEST(train_pass(m, 9) == before);
  BOOST_TEST(b.bf16_copy_uses() > uses);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(refreshes_in_one_convert_when_every_tensor_is_a_multiple_of_128) {
  test_support::CheckedBackend b(1);
  const Section sec = make_section("llm", llama(1, 128, 4, 2, 256, 64, 16), Mode::Train, false,
                                   {{LossKind::CrossEntropy, 1.0, 1.0}});
  SectionModel m(sec, b, 3);
  BOOST_TEST(m.bf16_copy_bytes() == size_t(m.parameter_count()) * 2);  // no gaps
  const int64_t before = b.converts();
  const std::vector<int32_t> tokens = random_tokens(11, 1, 64);
  std::vector<SampleInput> in(1);
  in[0].tokens = tokens;
  m.forward(in);
  // the parameters' refresh, then the attention's output (the norms, rope,
  // swiglu and v's GEMM write their outputs' copies themselves, Out)
  BOOST_TEST(b.converts() - before == 1 + 1);
  // the layer's inputs and weights, the attention's q, k, v, the head's weight and input
  BOOST_TEST(b.bf16_copy_uses() == 7 + 7 + 3 + 2);
  BOOST_TEST(b.bf16_outputs() == 6 + 1);  // n1, v, q, k, n2, act; the final norm
}

BOOST_AUTO_TEST_CASE(an_optimizer_step_writes_the_copy_in_its_own_pass) {
  test_support::CheckedBackend b(1);
  const Section sec = make_section("llm", llama(1, 128, 4, 2, 256, 64, 16), Mode::Train, false,
                                   {{LossKind::CrossEntropy, 1.0, 1.0}});
  SectionModel m(sec, b, 3);
  const TrainSpec train;
  m.zero_grads();
  m.params();  // written (as far as the model knows): the pass refreshes the copy
  int64_t converts = b.converts();
  train_pass(m, 1);
  const int64_t refreshing = b.converts() - converts;
  m.adamw_step(train.optimizer, 1e-2);
  BOOST_TEST(b.adamw_copies() == 1);
  // The next pass reads the copy AdamW wrote (CheckedBackend filled it with
  // NaN before the step and checks each use against the new parameters)
  // and converts only the layers' activations: one convert fewer.
  converts = b.converts();
  const int64_t uses = b.bf16_copy_uses();
  train_pass(m, 2);
  BOOST_TEST(b.converts() - converts == refreshing - 1);
  BOOST_TEST(b.bf16_copy_uses() > uses);
}

BOOST_AUTO_TEST_CASE(follows_a_sharded_optimizers_all_gather) {
  test_support::CheckedBackend b(1);
  const Section sec = llm();
  SectionModel m(sec, b, 3);
  const int64_t n = m.parameter_count(), half = n / 2;
  // This replica's shard is the first half; the "peers" move the second half
  // (CheckedBackend's memory is host memory, so the stand-in writes it directly).
  m.shard_optimizer(0, half, [&](float* out, const float*, size_t count) {  // in = out: offset 0
    for (size_t j = size_t(half); j < count; ++j) out[j] *= 0.5f;
  });
  const TrainSpec train;
  for (uint64_t step = 0; step < 2; ++step) {
    m.zero_grads();
    train_pass(m, step);
    m.adamw_step(train.optimizer, 1e-2);
  }
  BOOST_TEST(b.bf16_copy_uses() > 0);
  BOOST_TEST(b.adamw_copies() == 0);  // a shard's step leaves the copy to the refresh after the all-gather
}

BOOST_AUTO_TEST_CASE(a_write_the_model_cannot_see_is_caught) {
  test_support::CheckedBackend b(1);
  const Section sec = llm();
  SectionModel m(sec, b, 3);
  size_t q = 0;  // layer 0's query projection, a linear weight
  while (m.tensors()[q].name != "model.layers.0.self_attn.q_proj.weight") ++q;
  float* p = m.params() + m.offset(q);
  train_pass(m, 1);  // refreshes the copy
  p[0] += 1.0f;      // through a pointer taken before that pass: the model cannot know
  BOOST_CHECK_EXCEPTION(train_pass(m, 2), std::logic_error, [](const std::logic_error& e) {
    return std::string(e.what()).find("the bf16 copy of 'w' is stale") != std::string::npos;
  });
}

// Where the copies suffice (Backend::bf16_operands_suffice: the CUDA
// backend with bf16 GEMMs), the activations read only as Operands — the
// norms' outputs, swiglu's and its gradients, which linear ops read; q, k
// and v, which rope and the attention read; gate and up, which swiglu
// reads — are kept in bf16 alone: their fp32 buffers are never taken, the
// GEMMs write q, k, v, gate and up in bf16, and the ops read the copies
// alone. Training then gives the bf16 GEMMs' results, within bf16 rounding
// of the fp32 ones (CheckedBackend made with bf16_alone rounds every
// linear operand, as bf16 GEMMs do, and computes the rest from the bf16
// values widened).
BOOST_AUTO_TEST_CASE(activations_read_only_as_operands_are_bf16_alone_where_copies_suffice) {
  test_support::CheckedBackend beside(1), alone(1, true);
  const Section sec = llm();
  SectionModel with_fp32(sec, beside, 3), bf16(sec, alone, 3);
  with_fp32.zero_grads();
  bf16.zero_grads();
  const double l32 = train_pass(with_fp32, 4), l16 = train_pass(bf16, 4);
  BOOST_TEST(beside.bf16_alone_uses() == 0);
  BOOST_TEST(beside.bf16_alone_inputs() == 0);
  // per layer: n1 read by q, k, v, n2 by gate, up, act by down, forward and
  // backward (dw), and the gate's, up's, q's and k's dout in backward
  BOOST_TEST(alone.bf16_alone_uses() == 2 * (6 * 2 + 4));
  // per layer: q, k by rope; q, k, v by the attention's forward and
  // backward; gate, up by swiglu's forward and backward
  BOOST_TEST(alone.bf16_alone_inputs() == 2 * (2 + 3 * 2 + 2 * 2));
  // 11 tokens, each buffer one page of the pool (1,024 floats,
  // nn/activation_pool.cpp). fp32 buffers not taken: n1, n2, act, q, k, v,
  // gate and up per layer, and the backward's dgate and dup; bf16 buffers
  // taken for gate and up per layer.
  BOOST_TEST(with_fp32.activation_pool_floats() - bf16.activation_pool_floats() ==
             size_t(2 * 8 + 2 - 2 * 2) * 1024);
  BOOST_TEST(std::abs(l16 - l32) <= 1e-2 * std::abs(l32));
  const int64_t n = with_fp32.parameter_count();
  double diff = 0, scale = 0;
  for (int64_t j = 0; j < n; ++j) {
    diff = std::max(diff, std::abs(double(bf16.grads()[j]) - double(with_fp32.grads()[j])));
    scale = std::max(scale, std::abs(double(with_fp32.grads()[j])));
  }
  BOOST_TEST(diff > 0.0);  // the bf16 path did run
  BOOST_TEST(diff <= 3e-2 * scale, "gradients differ by " << diff / scale);
}

BOOST_AUTO_TEST_CASE(a_backend_without_bf16_gemms_gets_no_copy) {
  const Section sec = llm();
  auto plain = make_cpu_backend(1);
  SectionModel m(sec, *plain, 3);
  BOOST_TEST(m.bf16_copy_bytes() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
