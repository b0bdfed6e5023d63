// Ten AdamW steps of a small student LLM distilled from a frozen teacher
// (cross_entropy + 0.5 kl(T = 2)) with warmup-cosine and global-norm
// clipping, against torch.optim.AdamW + clip_grad_norm_: the losses of every
// step and the final parameters. Plus the learning-rate schedule itself.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "oracle_harness.h"

using namespace maestro;
using namespace maestro::test;

BOOST_AUTO_TEST_SUITE(optimizer)

BOOST_AUTO_TEST_CASE(lr_schedule) {
  TrainSpec t;
  t.steps = 10;
  t.optimizer.lr = 1e-3;
  BOOST_CHECK_EQUAL(lr_at(t, 0), 1e-3);
  BOOST_CHECK_EQUAL(lr_at(t, 9), 1e-3);
  t.schedule = {LrSchedule::Kind::Cosine, 4};
  BOOST_CHECK_EQUAL(lr_at(t, 0), 0.0);
  BOOST_CHECK_CLOSE(lr_at(t, 2), 0.5e-3, 1e-9);
  BOOST_CHECK_CLOSE(lr_at(t, 4), 1e-3, 1e-9);
  BOOST_CHECK_CLOSE(lr_at(t, 7), 0.5e-3, 1e-9);  // halfway through the cosine
  BOOST_CHECK_SMALL(lr_at(t, 10), 1e-12);
}

BOOST_AUTO_TEST_CASE(adamw_trajectory_matches_torch, *kOracle) {
  const int64_t vocab = 23;
  TransformerSpec tt{.layers = 1, .hidden = 16, .heads = 2, .kv_heads = 2, .ffn = 24, .vocab = vocab, .max_seq = 32};
  TransformerSpec st{.layers = 2, .hidden = 16, .heads = 4, .kv_heads = 2, .ffn = 24, .vocab = vocab, .max_seq = 32};
  SectionModel teacher(make_section("teacher", {"transformer", tt}, Mode::Frozen), cpu(), 1);
  SectionModel student(make_section("student", {"transformer", st}, Mode::Train, false,
                                    {{LossKind::CrossEntropy, 1.0, 1.0}, {LossKind::KL, 0.5, 2.0}}),
                       cpu(), 1);
  randomize(teacher, 40);
  randomize(student, 41);

  TrainSpec train;
  train.steps = 10;
  train.optimizer = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  train.schedule = {LrSchedule::Kind::Cosine, 3};
  train.grad_clip = 0.5;

  OracleCase c;
  c.add_model(teacher);
  c.add_model(student);  // the initial weights
  c.json["order"] = {"teacher", "student"};
  c.json["loss"] = {{"model", "student"},
                    {"teacher", "teacher"},
                    {"terms", {{{"kind", "ce"}, {"weight", 1.0}}, {{"kind", "kl"}, {"weight", 0.5}, {"temperature", 2.0}}}}};
  nlohmann::json& tj = c.json["train"];
  tj = {{"lr", train.optimizer.lr}, {"betas", {0.9, 0.95}}, {"eps", 1e-8}, {"weight_decay", 0.1},
        {"schedule", "cosine"}, {"warmup", 3}, {"total_steps", 10}, {"clip", 0.5}};

  std::vector<float> losses;
  int clipped = 0;
  for (int step = 0; step < 10; ++step) {
    const std::vector<std::vector<int32_t>> tokens{random_tokens(7 + step % 3, 100 + step, vocab),
                                                   random_tokens(12 - step % 4, 200 + step, vocab)};
    const int64_t n_global = int64_t(tokens[0].size() + tokens[1].size()) - 2;
    std::vector<SampleInput> in(2);
    nlohmann::json samples = nlohmann::json::array();
    for (int i = 0; i < 2; ++i) {
      in[i].tokens = tokens[i];
      samples.push_back({{"teacher", {{"tokens", tokens[i]}}}, {"student", {{"tokens", tokens[i]}}}});
    }
    tj["steps"].push_back(samples);
    tj["n_global"].push_back(n_global);

    student.zero_grads();
    ForwardOutput tf = teacher.forward(in);
    ForwardOutput sf = student.forward(in);
    const std::vector<float> t0 = host_of(tf.logits[0]), t1 = host_of(tf.logits[1]);  // through the host
    losses.push_back(float(student.loss(*sf.context, {span_of(t0), span_of(t1)}, n_global)));
    student.backward(*sf.context, {});
    const double norm = std::sqrt(student.grad_sq_norm());
    const double coef = std::min(1.0, train.grad_clip / (norm + 1e-6));
    clipped += coef < 1.0;
    student.adamw_step(train.optimizer, lr_at(train, step), float(coef));
  }
  BOOST_CHECK_GT(clipped, 0);  // the test exercises clipping
  BOOST_CHECK_EQUAL(student.adamw_steps(), 10);
  Reference ref = c.run("trajectory");
  check_close("losses", losses.data(), losses.size(), ref, "losses", 1e-5);
  int64_t offset = 0;
  for (const auto& t : student.tensors()) {
    check_close("final " + t.name, student.params() + offset, size_t(t.numel()), ref, "final.student." + t.name);
    offset += t.numel();
  }
}

BOOST_AUTO_TEST_SUITE_END()
