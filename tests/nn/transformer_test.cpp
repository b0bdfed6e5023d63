// The transformer against the PyTorch oracle: outputs (the final-normed
// hidden states of the text positions, with an upstream gradient on them),
// text logits, the cross-entropy share, every parameter gradient and the
// spliced blocks' gradients, on a packed micro-batch of different, odd
// lengths with GQA, spliced prefixes and a text cut at max_seq; recompute
// gives the same gradients as keeping the activations.
#define BOOST_TEST_MODULE nn
#include <boost/test/unit_test.hpp>

#include "oracle_harness.h"

using namespace maestro;
using namespace maestro::test;

namespace {

ModelSpec small_llama(int64_t kv_heads, bool causal = true) {
  TransformerSpec t;
  t.layers = 2;
  t.hidden = 32;
  t.heads = 4;
  t.kv_heads = kv_heads;
  t.ffn = 48;
  t.vocab = 37;
  t.max_seq = 16;
  t.causal = causal;
  return {"transformer", t};
}

// Three samples: 7 text tokens; a spliced [3, 32] + [2, 32] prefix and 5
// tokens; 20 tokens (cut to max_seq = 16).
struct Batch3 {
  std::vector<std::vector<int32_t>> tokens{random_tokens(7, 1, 37), random_tokens(5, 2, 37), random_tokens(20, 3, 37)};
  std::vector<float> splice_a = random_floats(3 * 32, 4), splice_b = random_floats(2 * 32, 5);
  std::vector<SampleInput> inputs() const {
    std::vector<SampleInput> in(3);
    for (int i = 0; i < 3; ++i) in[i].tokens = tokens[i];
    in[1].spliced = {span_of(splice_a), span_of(splice_b)};
    return in;
  }
  // target positions: 6 + 4 + 15
  static constexpr int64_t kPositions = 25;
};

// with_loss = false: an encoder — no loss, an upstream gradient on every
// sample's hidden states (the head gets none).
void run_case(int64_t kv_heads, bool recompute, const std::string& tag, bool causal = true, bool with_loss = true) {
  Section sec = make_section("llm", small_llama(kv_heads, causal), Mode::Train, recompute,
                             with_loss ? std::vector<LossTerm>{{LossKind::CrossEntropy, 1.0, 1.0}} : std::vector<LossTerm>{});
  SectionModel m(sec, cpu(), 1);
  randomize(m, 7);
  m.zero_grads();
  Batch3 b;
  const int64_t n_global = Batch3::kPositions + 9;  // the global batch has more positions than this micro-batch
  ForwardOutput fw = m.forward(b.inputs());
  BOOST_REQUIRE_EQUAL(fw.outputs.size(), 3u);
  BOOST_REQUIRE_EQUAL(fw.logits.size(), 3u);
  for (const auto& [i, rows] : {std::pair{0, 7}, {1, 5}, {2, 16}}) {  // text positions, cut to max_seq
    BOOST_CHECK_EQUAL(fw.outputs[size_t(i)].rows, rows);
    BOOST_CHECK_EQUAL(fw.outputs[size_t(i)].cols, 32);  // hidden
    BOOST_CHECK_EQUAL(fw.logits[size_t(i)].rows, rows);
    BOOST_CHECK_EQUAL(fw.logits[size_t(i)].cols, 37);  // vocab
  }
  const double loss = with_loss ? m.loss(*fw.context, {}, n_global) : 0.0;
  // An extra upstream gradient on sample 0's output (its hidden states), as from a consumer.
  std::vector<float> g0 = random_floats(7 * 32, 6, 0.05f), g1 = random_floats(5 * 32, 16, 0.05f),
                     g2 = random_floats(16 * 32, 26, 0.05f);
  auto dins = with_loss ? m.backward(*fw.context, {span_of(g0), {}, {}})
                        : m.backward(*fw.context, {span_of(g0), span_of(g1), span_of(g2)});

  OracleCase c;
  c.add_model(m);
  c.json["order"] = {"llm"};
  c.add_input("splice_a", b.splice_a);
  c.add_input("splice_b", b.splice_b);
  c.add_input("g0", g0);
  c.add_input("g1", g1);
  c.add_input("g2", g2);
  for (int i = 0; i < 3; ++i) {
    nlohmann::json s = {{"tokens", b.tokens[i]}};
    if (i == 1) s["splice"] = {{{"input", "splice_a"}}, {{"input", "splice_b"}}};
    c.json["samples"].push_back({{"llm", s}});
  }
  if (with_loss)
    c.json["loss"] = {{"model", "llm"}, {"terms", {{{"kind", "ce"}, {"weight", 1.0}}}}, {"n_global", n_global}};
  c.json["out_grads"]["llm"]["0"] = "g0";
  if (!with_loss) c.json["out_grads"]["llm"]["1"] = "g1", c.json["out_grads"]["llm"]["2"] = "g2";
  Reference ref = c.run(tag);

  for (int i = 0; i < 3; ++i) {
    check_close("hidden states of sample " + std::to_string(i), fw.outputs[i].data, fw.outputs[i].values().size(),
                ref, "out.llm." + std::to_string(i));
    check_close("logits of sample " + std::to_string(i), fw.logits[i].data, fw.logits[i].values().size(), ref,
                "logits.llm." + std::to_string(i));
  }
  const float got_loss = float(loss);
  if (with_loss) check_close("loss", &got_loss, 1, ref, "loss", 1e-5);
  check_grads(m, ref);
  BOOST_REQUIRE_EQUAL(dins[1].size(), 2u);
  BOOST_CHECK(dins[0].empty() && dins[2].empty());
  check_close("d splice_a", dins[1][0].data, dins[1][0].values().size(), ref, "dinput.splice_a");
  check_close("d splice_b", dins[1][1].data, dins[1][1].values().size(), ref, "dinput.splice_b");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(transformer)

BOOST_AUTO_TEST_CASE(gqa_packed_spliced_matches_torch, *kOracle) { run_case(2, false, "gqa"); }

BOOST_AUTO_TEST_CASE(multi_head_recompute_matches_torch, *kOracle) { run_case(4, true, "mha_recompute"); }

BOOST_AUTO_TEST_CASE(bidirectional_matches_torch, *kOracle) { run_case(1, false, "bidirectional", false); }

// A bidirectional encoder without a loss, trained through its hidden states only.
BOOST_AUTO_TEST_CASE(an_encoder_trains_through_its_hidden_states, *kOracle) {
  run_case(2, false, "encoder", false, false);
}

BOOST_AUTO_TEST_CASE(recompute_gives_the_same_gradients) {
  // Layers recomputed: none, 1 of 2 (partial: every other one), both.
  std::vector<float> grads[3];
  double losses[3];
  for (int r = 0; r < 3; ++r) {
    Section sec = make_section("llm", small_llama(2), Mode::Train, false, {{LossKind::CrossEntropy, 1.0, 1.0}});
    sec.recompute = r;
    SectionModel m(sec, cpu(), 3);
    m.zero_grads();
    Batch3 b;
    ForwardOutput fw = m.forward(b.inputs());
    losses[r] = m.loss(*fw.context, {}, Batch3::kPositions);
    m.backward(*fw.context, {});
    grads[r].assign(m.grads(), m.grads() + m.grad_count());
  }
  for (int r = 1; r < 3; ++r) {
    BOOST_CHECK_EQUAL(losses[0], losses[r]);
    BOOST_CHECK(grads[0] == grads[r]);  // the same ops on the same inputs: bitwise equal
  }
}

// A text encoder's head is skipped when nobody reads its logits: the same
// hidden states and gradients, no logits, less activation memory, and a
// loss is refused.
BOOST_AUTO_TEST_CASE(logits_nobody_reads_are_not_computed) {
  // (a loss term only so that loss() gets as far as the logits; it is never called on the compared runs)
  Section sec = make_section("enc", small_llama(2, false), Mode::Train, false, {{LossKind::CrossEntropy, 1.0, 1.0}});
  std::vector<float> grads[2], hidden[2];
  size_t pool[2];
  for (int skip = 0; skip < 2; ++skip) {
    std::get<TransformerSpec>(sec.model.spec).logits_read = !skip;
    SectionModel m(sec, cpu(), 3);
    m.zero_grads();
    Batch3 b;
    ForwardOutput fw = m.forward(b.inputs());
    BOOST_TEST(fw.logits.size() == (skip ? 0u : 3u));
    BOOST_REQUIRE_EQUAL(fw.outputs.size(), 3u);
    hidden[skip].assign(fw.outputs[2].data, fw.outputs[2].data + fw.outputs[2].values().size());
    const std::vector<float> g = random_floats(16 * 32, 8, 0.05f);
    m.backward(*fw.context, {{}, {}, span_of(g)});
    grads[skip].assign(m.grads(), m.grads() + m.grad_count());
    pool[skip] = m.activation_pool_floats();
    if (skip)
      BOOST_CHECK_EXCEPTION(m.loss(*m.forward(b.inputs()).context, {}, 1), std::invalid_argument,
                            [](const std::invalid_argument& e) { return std::string(e.what()).find("logits") != std::string::npos; });
  }
  BOOST_TEST(hidden[0] == hidden[1]);
  BOOST_TEST(grads[0] == grads[1]);
  BOOST_TEST(pool[1] < pool[0]);
}

// A global batch without a target position (every text one token long):
// the loss is 0, not 0/0, and the gradients are zero.
BOOST_AUTO_TEST_CASE(no_target_position_is_a_zero_loss) {
  Section sec = make_section("llm", small_llama(2), Mode::Train, false, {{LossKind::CrossEntropy, 1.0, 1.0}});
  SectionModel m(sec, cpu(), 3);
  m.zero_grads();
  const std::vector<int32_t> one{5}, other{7};
  std::vector<SampleInput> in(2);
  in[0].tokens = one, in[1].tokens = other;
  ForwardOutput fw = m.forward(in);
  BOOST_TEST(m.loss(*fw.context, {}, 0) == 0.0);
  m.backward(*fw.context, {});
  BOOST_TEST(m.grad_sq_norm() == 0.0);
}

BOOST_AUTO_TEST_CASE(bad_inputs_name_the_section) {
  Section sec = make_section("llm", small_llama(2));
  SectionModel m(sec, cpu(), 1);
  std::vector<int32_t> bad{1, 2, 99};
  std::vector<SampleInput> in(1);
  in[0].tokens = bad;
  BOOST_CHECK_EXCEPTION(m.forward(in), std::invalid_argument, [](const std::invalid_argument& e) {
    return std::string(e.what()).find("section 'llm'") != std::string::npos &&
           std::string(e.what()).find("token 99") != std::string::npos;
  });
  std::vector<float> too_long = random_floats(17 * 32, 1);
  in[0].tokens = {};
  in[0].spliced = {span_of(too_long)};
  BOOST_CHECK_THROW(m.forward(in), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(kl_without_teacher_logits_is_an_error) {
  Section sec = make_section("student", small_llama(2), Mode::Train, false, {{LossKind::KL, 1.0, 2.0}});
  SectionModel m(sec, cpu(), 1);
  Batch3 b;
  ForwardOutput fw = m.forward(b.inputs());
  BOOST_CHECK_EXCEPTION(m.loss(*fw.context, {}, 25), std::invalid_argument, [](const std::invalid_argument& e) {
    return std::string(e.what()).find("kl needs teacher logits") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(frozen_sections_hold_no_gradients_but_pass_them_upstream) {
  MlpSpec p{.in = 4, .out = 6, .hidden = 5, .layers = 2};
  SectionModel m(make_section("proj", {"mlp", p}, Mode::Frozen), cpu(), 1);
  BOOST_CHECK(m.grads() == nullptr);
  BOOST_CHECK_EQUAL(m.grad_sq_norm(), 0.0);
  BOOST_CHECK_THROW(m.adamw_step(OptimizerSpec{}, 1e-3), std::invalid_argument);
  std::vector<float> x = random_floats(3 * 4, 1), g = random_floats(3 * 6, 2);
  std::vector<SampleInput> in(1);
  in[0].values = span_of(x);
  ForwardOutput fw = m.forward(in);
  auto d = m.backward(*fw.context, {span_of(g)});
  BOOST_REQUIRE_EQUAL(d[0].size(), 1u);
  BOOST_CHECK_EQUAL(d[0][0].rows, 3);
  BOOST_CHECK_GT(rel_error(d[0][0].data, std::vector<float>(12, 0.0f)), 0.0);
}

BOOST_AUTO_TEST_CASE(activation_pool_stops_growing_once_warm) {
  Section sec = make_section("llm", small_llama(2), Mode::Train, false, {{LossKind::CrossEntropy, 1.0, 1.0}});
  SectionModel m(sec, cpu(), 1);
  Batch3 b;
  size_t warm = 0;
  for (int step = 0; step < 3; ++step) {
    // two micro-batches in flight at once, then both backwards
    ForwardOutput f1 = m.forward(b.inputs());
    ForwardOutput f2 = m.forward(b.inputs());
    m.loss(*f1.context, {}, 50);
    m.loss(*f2.context, {}, 50);
    m.backward(*f2.context, {});
    m.backward(*f1.context, {});
    if (step == 0) warm = m.activation_pool_floats();
  }
  BOOST_CHECK_GT(warm, 0u);
  BOOST_CHECK_EQUAL(m.activation_pool_floats(), warm);
}

// The step's path: loss_terms and grad_sq_norm(double*) only queue work that
// writes the backend's scalar accumulators; read back once, they give the
// same bits as the waiting loss() and grad_sq_norm().
BOOST_AUTO_TEST_CASE(scalar_results_land_in_backend_accumulators) {
  Section sec = make_section("llm", small_llama(2), Mode::Train, false,
                             {{LossKind::CrossEntropy, 0.75, 1.0}, {LossKind::CrossEntropy, 0.25, 1.0}});
  SectionModel m(sec, cpu(), 1);
  Batch3 b;
  ForwardOutput waited = m.forward(b.inputs());
  const double loss = m.loss(*waited.context, {}, 40);
  m.backward(*waited.context, {});
  const double norm = m.grad_sq_norm();
  m.zero_grads();

  double* acc = cpu().allocate_scalars(3);  // [2 loss terms, norm²]
  ForwardOutput queued = m.forward(b.inputs());
  m.loss_terms(*queued.context, {}, 40, acc);
  m.backward(*queued.context, {});
  m.grad_sq_norm(acc + 2);
  std::vector<double> host(3);
  cpu().copy_to_host(host.data(), acc, 3 * sizeof(double));
  cpu().release(acc);
  BOOST_CHECK_GT(host[0], 0.0);
  BOOST_CHECK_EQUAL(host[0], host[1]);  // the same term twice
  BOOST_CHECK_EQUAL(SectionModel::loss_value(sec, std::span<const double>(host.data(), 2), 40), loss);
  BOOST_CHECK_EQUAL(host[2], norm);
}

BOOST_AUTO_TEST_SUITE_END()

