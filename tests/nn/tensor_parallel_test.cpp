// Tensor parallelism (Megatron-LM): each built-in model split over tp = 2
// and 4 ranks — threads over make_local_group, each with its own CPU
// backend — computes what the whole model computes: every rank's outputs
// (a transformer's: its vocabulary columns), the loss (cross-entropy and KL,
// reduced across ranks), the input gradients, and every parameter gradient
// (each rank's slice of the whole gradient), within 1e-5 relative (norm-
// wise; see check_tp for gradients that cancel to round-off). The cases
// cover GQA with kv_heads < heads, vocabularies that are not multiples of
// tp (padded), and packed sequences of different lengths.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>

#include "support/checked_backend.h"
#include "graph/tensor_parallel.h"
#include "oracle_harness.h"
#include "transport/collectives.h"

using namespace maestro;
using namespace maestro::test;

namespace {

constexpr double kTol = 1e-5;

// ‖got − want‖ / ‖want‖ over equal-length vectors.
double rel(const std::vector<float>& got, const std::vector<float>& want) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  return rel_error(got.data(), want);
}

std::vector<float> rows_of(const RowsView& r) { return {r.data, r.data + r.rows * r.cols}; }

// Columns [c0, c0 + n) of rows[rows, cols], zero past cols.        [rows, n]
std::vector<float> columns(const std::vector<float>& m, int64_t cols, int64_t c0, int64_t n) {
  const int64_t rows = int64_t(m.size()) / cols;
  std::vector<float> out(size_t(rows * n), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n && c0 + j < cols; ++j) out[size_t(r * n + j)] = m[size_t(r * cols + c0 + j)];
  return out;
}

// Runs body(rank, communicator) on `tp` threads over one make_local_group,
// each rank with its own CPU backend; a rank that throws aborts the group
// (so no peer waits forever) and fails the test with its message.
void on_ranks(int64_t tp, const std::function<void(int64_t rank, Backend& backend, Communicator* comm)>& body) {
  auto group = make_local_group(int(tp));
  std::vector<std::string> errors(static_cast<size_t>(tp));
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < tp; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto backend = std::make_unique<test_support::CheckedBackend>(1);  // host/backend memory kept apart
        body(r, *backend, tp > 1 ? group[size_t(r)].get() : nullptr);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        group[size_t(r)]->abort(e.what());
      }
    });
  for (auto& th : ranks) th.join();
  for (int64_t r = 0; r < tp; ++r) BOOST_REQUIRE_MESSAGE(errors[size_t(r)].empty(), "rank " << r << ": " << errors[size_t(r)]);
}

struct Case {
  Section sec;
  std::vector<SampleInput> in;
  std::vector<std::vector<float>> out_grads;          // per sample, the whole output's gradient (or empty)
  std::vector<std::span<const float>> teacher;        // kl: per sample [rows, vocab]
  int64_t n_global = 40;
};

// What one run (the whole model, or one tp rank) produced.
struct Result {
  std::vector<std::vector<float>> outputs, logits, input_grads;
  double loss = 0, grad_sq = 0;
  std::vector<std::vector<float>> grads;  // per tensor, this model's (shard's) gradient
};

// Whole-model values of every tensor of `whole` (params, or grads), by index.
std::vector<std::vector<float>> per_tensor(SectionModel& m, const float* flat) {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < m.tensors().size(); ++i)
    out.emplace_back(flat + m.offset(i), flat + m.offset(i) + m.tensors()[i].numel());
  return out;
}

// Runs forward, loss (with a loss), backward. Outputs and their gradients
// are whole on every rank (a transformer's hidden states too); a
// transformer rank's logits are its columns.
Result run(SectionModel& m, const Case& c) {
  Result r;
  m.zero_grads();
  ForwardOutput f = m.forward(c.in);
  for (const RowsView& o : f.outputs) r.outputs.push_back(rows_of(o));
  for (const RowsView& o : f.logits) r.logits.push_back(rows_of(o));
  if (!c.sec.loss.empty()) r.loss = m.loss(*f.context, c.teacher, c.n_global);
  std::vector<std::span<const float>> spans;
  for (const auto& g : c.out_grads) spans.push_back(span_of(g));
  for (const auto& sample : m.backward(*f.context, spans))
    for (const RowsView& v : sample) r.input_grads.push_back(rows_of(v));
  r.grads = per_tensor(m, m.grads());
  r.grad_sq = m.grad_sq_norm();
  return r;
}

void check_tp(const Case& c, int64_t tp) {
  BOOST_TEST_CONTEXT(c.sec.name << " (" << c.sec.model.builtin() << ") at tp = " << tp) {
    SectionModel whole(c.sec, cpu(), 5);
    randomize(whole, 17);
    const auto whole_params = per_tensor(whole, whole.params());
    const auto* t = std::get_if<TransformerSpec>(&c.sec.model.spec);
    const int64_t V = t ? t->vocab : 0, Vs = t ? tp_padded_vocab(V, tp) / tp : 0;
    const Result want = run(whole, c);

    std::vector<Result> got(static_cast<size_t>(tp));
    on_ranks(tp, [&](int64_t r, Backend& backend, Communicator* comm) {
      SectionModel m(c.sec, backend, 5, 0, 1, TensorParallel{r, tp, comm});
      for (size_t i = 0; i < m.tensors().size(); ++i)
        tp_slice(m.params() + m.offset(i), whole_params[i].data(), c.sec.model, whole.tensors()[i], tp, r);
      got[size_t(r)] = run(m, c);
    });

    for (int64_t r = 0; r < tp; ++r) {
      const Result& g = got[size_t(r)];
      BOOST_TEST_CONTEXT("rank " << r) {
        BOOST_REQUIRE_EQUAL(g.outputs.size(), want.outputs.size());
        for (size_t i = 0; i < want.outputs.size(); ++i)
          BOOST_CHECK_MESSAGE(rel(g.outputs[i], want.outputs[i]) <= kTol,
                              "output " << i << ": " << rel(g.outputs[i], want.outputs[i]));
        BOOST_REQUIRE_EQUAL(g.logits.size(), want.logits.size());
        for (size_t i = 0; i < want.logits.size(); ++i) {
          const auto expect = columns(want.logits[i], V, r * Vs, Vs);
          BOOST_CHECK_MESSAGE(rel(g.logits[i], expect) <= kTol, "logits " << i << ": " << rel(g.logits[i], expect));
        }
        if (!c.sec.loss.empty())
          BOOST_CHECK_MESSAGE(std::abs(g.loss - want.loss) <= kTol * std::abs(want.loss),
                              "loss " << g.loss << " vs " << want.loss);
        BOOST_CHECK_MESSAGE(std::abs(g.grad_sq - want.grad_sq) <= kTol * want.grad_sq,
                            "squared gradient norm " << g.grad_sq << " vs " << want.grad_sq);
        BOOST_REQUIRE_EQUAL(g.input_grads.size(), want.input_grads.size());
        for (size_t i = 0; i < want.input_grads.size(); ++i)
          BOOST_CHECK_MESSAGE(rel(g.input_grads[i], want.input_grads[i]) <= kTol, "input gradient " << i);
        for (size_t i = 0; i < whole.tensors().size(); ++i) {
          const TensorShape& ts = whole.tensors()[i];
          std::vector<float> expect(size_t(tp_shard_shape(c.sec.model, ts, tp).numel()));
          tp_slice(expect.data(), want.grads[i].data(), c.sec.model, ts, tp, r);
          // ‖got − want‖ over max(‖want‖, 1% of the whole gradient's norm): a
          // gradient that cancels to round-off (the key bias's, zero in exact
          // arithmetic: it shifts all of a query's scores alike) is measured
          // against the model's gradient scale, not its own noise.
          double diff = 0, norm = 0;
          for (size_t k = 0; k < expect.size(); ++k) {
            diff += (double(g.grads[i][k]) - expect[k]) * (double(g.grads[i][k]) - expect[k]);
            norm += double(expect[k]) * expect[k];
          }
          const double e = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-2 * std::sqrt(want.grad_sq));
          BOOST_CHECK_MESSAGE(e <= kTol, "gradient of " << ts.name << ": rel error " << e);
        }
      }
    }
  }
}

Case transformer_case(const ModelSpec& m, std::vector<LossTerm> loss, const std::vector<std::vector<int32_t>>& tokens,
                      const std::vector<float>& splice, const std::vector<std::vector<float>>& teacher,
                      std::vector<std::vector<float>> out_grads, bool recompute = false) {
  Case c;
  c.sec = make_section("llm", m, Mode::Train, recompute, std::move(loss));
  c.in.resize(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) c.in[i].tokens = tokens[i];
  c.in[1].spliced = {span_of(splice)};
  for (const auto& t : teacher) c.teacher.push_back(span_of(t));
  c.out_grads = std::move(out_grads);
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tensor_parallel)

BOOST_AUTO_TEST_CASE(shards_slice_and_gather_whole_tensors) {
  const ModelSpec m = llama(1, 8, 2, 2, 8, 11);
  const TensorShape embed{"model.embed_tokens.weight", {11, 8}}, o{"model.layers.0.self_attn.o_proj.weight", {8, 8}};
  BOOST_CHECK((tp_shard_shape(m, embed, 4).shape == std::vector<int64_t>{3, 8}));  // 11 -> 12 rows, 3 each
  BOOST_CHECK((tp_shard_shape(m, o, 2).shape == std::vector<int64_t>{8, 4}));
  BOOST_CHECK(tp_split(m, "model.norm.weight") == TpSplit::Replicated);
  std::vector<float> whole(88), back(88, -1.0f), shard(24);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = float(i);
  for (int64_t r = 0; r < 4; ++r) {
    tp_slice(shard.data(), whole.data(), m, embed, 4, r);
    tp_unslice(back.data(), shard.data(), m, embed, 4, r);
  }
  BOOST_CHECK(back == whole);
  tp_slice(shard.data(), whole.data(), m, embed, 4, 3);  // rows 9, 10, then a zero padding row
  BOOST_CHECK_EQUAL(shard[0], 72.0f);
  BOOST_CHECK_EQUAL(shard[16], 0.0f);
  BOOST_CHECK_NE(tp_divisibility_error(llama(1, 12, 6, 3, 8, 11), 2), "");  // kv_heads 3
  BOOST_CHECK_EQUAL(tp_divisibility_error(llama(1, 16, 4, 2, 8, 11), 2), "");
}

BOOST_AUTO_TEST_CASE(transformer_equals_tp1) {
  // GQA (kv_heads < heads), vocabulary 37 (not a multiple of 2 or 4), packed
  // samples of 7, 3 + 5 (a spliced block) and 12 positions, CE + KL and an
  // output gradient on the first sample's hidden states; then without a
  // loss, output gradients only (an encoder: the head is skipped).
  const std::vector<std::vector<int32_t>> tokens{random_tokens(7, 1, 37), random_tokens(5, 2, 37),
                                                 random_tokens(12, 3, 37)};
  const std::vector<float> splice = random_floats(3 * 32, 4);
  const std::vector<std::vector<float>> teacher{random_floats(7 * 37, 5, 3.0f), random_floats(5 * 37, 6, 3.0f),
                                                random_floats(12 * 37, 7, 3.0f)};
  const std::vector<LossTerm> loss{{LossKind::CrossEntropy, 1.0, 1.0}, {LossKind::KL, 0.5, 2.0}};
  const std::vector<std::vector<float>> g{random_floats(7 * 32, 8, 0.05f), {}, {}};
  for (int64_t tp : {2, 4}) {
    Case c = transformer_case(llama(2, 32, 8, 4, 48, 37), loss, tokens, splice, teacher, g);
    check_tp(c, tp);
  }
  check_tp(transformer_case(llama(2, 32, 8, 4, 48, 37), loss, tokens, splice, teacher, g, /*recompute=*/true), 2);
  const std::vector<std::vector<float>> every{random_floats(7 * 32, 12, 0.05f), random_floats(5 * 32, 13, 0.05f),
                                              random_floats(12 * 32, 14, 0.05f)};
  check_tp(transformer_case(llama(2, 32, 8, 4, 48, 37), {}, tokens, splice, {}, every), 2);
  const std::vector<std::vector<int32_t>> few{random_tokens(6, 9, 5), random_tokens(4, 10, 5)};
  const std::vector<float> splice16 = random_floats(2 * 16, 11);
  Case tiny_vocab = transformer_case(llama(1, 16, 4, 4, 16, 5), {{LossKind::CrossEntropy, 1.0, 1.0}}, few, splice16,
                                     {}, {});
  check_tp(tiny_vocab, 4);  // vocabulary 5 over 4 ranks: the last rank holds only padding
}

BOOST_AUTO_TEST_CASE(encoders_equal_tp1) {
  VitSpec v;
  v.layers = 2, v.hidden = 24, v.heads = 4, v.ffn = 40, v.patch = 4, v.image = 12, v.channels = 3;
  const std::vector<float> two_images = random_floats(2 * 3 * 12 * 12, 1), one_image = random_floats(3 * 12 * 12, 2);
  Case vit;
  vit.sec = make_section("vision", {"vit", v});
  vit.in.resize(2);
  vit.in[0].values = span_of(two_images);
  vit.in[1].values = span_of(one_image);
  vit.out_grads = {random_floats(2 * 9 * 24, 3), random_floats(9 * 24, 4)};
  AudioEncoderSpec a;
  a.layers = 2, a.hidden = 24, a.heads = 4, a.ffn = 32, a.mel_bins = 10, a.frames_per_token = 2, a.max_frames = 64;
  const std::vector<float> clip_a = random_floats(9 * 10, 5), clip_b = random_floats(4 * 10, 6);  // 4 and 2 tokens
  Case audio;
  audio.sec = make_section("audio", {"audio_encoder", a});
  audio.in.resize(2);
  audio.in[0].values = span_of(clip_a);
  audio.in[1].values = span_of(clip_b);
  audio.out_grads = {random_floats(4 * 24, 7), random_floats(2 * 24, 8)};
  for (int64_t tp : {2, 4}) {
    check_tp(vit, tp);
    check_tp(audio, tp);
  }
}

BOOST_AUTO_TEST_CASE(mlp_equals_tp1) {
  const std::vector<float> x0 = random_floats(3 * 6, 1), x1 = random_floats(5 * 6, 2);
  for (auto [layers, act] : {std::pair{2, Activation::Gelu}, {3, Activation::Silu}, {4, Activation::Relu}}) {
    MlpSpec p;
    p.in = 6, p.out = 10, p.hidden = 12, p.layers = layers, p.act = act;
    Case c;
    c.sec = make_section("proj", {"mlp", p});
    c.in.resize(2);
    c.in[0].values = span_of(x0);
    c.in[1].values = span_of(x1);
    c.out_grads = {random_floats(3 * 10, 3), random_floats(5 * 10, 4)};
    for (int64_t tp : {2, 4}) check_tp(c, tp);
  }
}

BOOST_AUTO_TEST_CASE(a_model_that_does_not_split_is_an_error) {
  auto group = make_local_group(2);
  const Section sec = make_section("llm", llama(1, 12, 6, 3, 8, 11));  // kv_heads 3 over 2 ranks
  BOOST_CHECK_THROW(SectionModel(sec, cpu(), 1, 0, 1, TensorParallel{0, 2, group[0].get()}), std::invalid_argument);
  const Section ok = make_section("llm", llama(1, 16, 4, 2, 8, 11));
  BOOST_CHECK_THROW(SectionModel(ok, cpu(), 1, 0, 1, TensorParallel{0, 2, nullptr}), std::invalid_argument);
  BOOST_CHECK_THROW(SectionModel(ok, cpu(), 1, 0, 1, TensorParallel{1, 2, group[0].get()}), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

// Checkpoints and `weights =` files hold whole tensors: a tp = 2 run's
// checkpoint resumes at tp = 1 and at tp = 4 with the losses the tp = 2 run
// goes on to have.
BOOST_AUTO_TEST_SUITE(tensor_parallel_files)

namespace {

const OptimizerSpec kAdam{};

// `steps` optimizer steps of every rank of a tp group on one micro-batch;
// before the first, rank models load `load_path` (prefix "llm"), after the
// last they save to `save_path` (collective) when given. Returns the losses.
std::vector<double> train_at_tp(const Section& sec, int64_t tp, const std::string& load_path, bool load_weights,
                                int steps, const std::string& save_path,
                                const std::vector<std::vector<int32_t>>& tokens) {
  std::vector<std::vector<double>> losses(static_cast<size_t>(tp));
  on_ranks(tp, [&](int64_t r, Backend& backend, Communicator* comm) {
    SectionModel m(sec, backend, 5, 0, 1, TensorParallel{r, tp, comm});
    if (load_weights) m.load_weights(load_path);
    else m.load(load_path, "llm");
    std::vector<SampleInput> in(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) in[i].tokens = tokens[i];
    for (int s = 0; s < steps; ++s) {
      m.zero_grads();
      ForwardOutput f = m.forward(in);
      losses[size_t(r)].push_back(m.loss(*f.context, {}, 30));
      m.backward(*f.context, {});
      m.adamw_step(kAdam, 1e-2);
    }
    if (!save_path.empty()) m.save(save_path, "llm");
  });
  for (int64_t r = 1; r < tp; ++r) BOOST_CHECK(losses[size_t(r)] == losses[0]);  // every rank has the loss
  return losses[0];
}

void check_losses(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    BOOST_CHECK_MESSAGE(std::abs(got[i] - want[i]) <= 1e-5 * std::abs(want[i]),
                        what << ": step " << i << " loss " << got[i] << " vs " << want[i]);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_tp2_checkpoint_resumes_at_tp1_and_tp4) {
  const Section sec = make_section("llm", llama(2, 32, 8, 4, 48, 37), Mode::Train, false,
                                   {{LossKind::CrossEntropy, 1.0, 1.0}});
  const std::vector<std::vector<int32_t>> tokens{random_tokens(9, 1, 37), random_tokens(13, 2, 37)};
  const std::string dir = temp_dir("tp-ckpt");
  {  // the weights file: a randomised whole model
    SectionModel whole(sec, cpu(), 5);
    randomize(whole, 23);
    whole.save(dir + "/weights.safetensors", "");
  }
  // tp = 1 and tp = 2 from the same weights agree; tp = 2 saves after 2 steps, then goes on for 3.
  const auto base = train_at_tp(sec, 1, dir + "/weights.safetensors", true, 2, "", tokens);
  const auto first = train_at_tp(sec, 2, dir + "/weights.safetensors", true, 2, dir + "/ckpt.safetensors", tokens);
  check_losses(first, base, "tp 2 vs tp 1 from the weights file");
  const auto go_on = train_at_tp(sec, 2, dir + "/ckpt.safetensors", false, 3, "", tokens);
  // The file holds whole HF-named tensors (not shards) and the AdamW state.
  SafetensorsReader file(dir + "/ckpt.safetensors");
  std::vector<float> embed(37 * 32);
  BOOST_CHECK_NO_THROW(file.read_f32("llm.model.embed_tokens.weight", {37, 32}, embed.data()));
  BOOST_CHECK_NO_THROW(file.read_f32("llm.lm_head.weight:exp_avg", {37, 32}, embed.data()));
  check_losses(train_at_tp(sec, 1, dir + "/ckpt.safetensors", false, 3, "", tokens), go_on, "resumed at tp 1");
  check_losses(train_at_tp(sec, 4, dir + "/ckpt.safetensors", false, 3, "", tokens), go_on, "resumed at tp 4");
}

BOOST_AUTO_TEST_SUITE_END()
