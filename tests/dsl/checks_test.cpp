// One test per semantic check: a valid program with one mistake, and the
// words the first error must contain. Plus the defaults the checker applies.
#include "sect_test_util.h"

using namespace maestro;
using maestro::test::expect_error;
using maestro::test::kBase;
using maestro::test::must_load;
using maestro::test::with;

namespace {

// A distillation program: a frozen teacher hands logits to a student.
const std::string kKd = R"(model teacher_net = transformer(layers: 1, hidden: 64, heads: 4, ffn: 128, vocab: 256);
model student_net = transformer(layers: 1, hidden: 32, heads: 2, ffn: 64, vocab: 256);
section teacher { model = teacher_net; mode = frozen; consumes = [text]; }
section student { model = student_net; consumes = [text]; loss = cross_entropy + 0.5 * kl(temperature: 2.0); }
flow teacher -> student : logits;
data { source = synthetic(seed: 3); mix { text = 1.0; } text_tokens = 16; }
train { global_batch = 4; steps = 1; }
)";

std::string kd(const std::string& from, const std::string& to) { return with(from, to, kKd); }

}  // namespace

BOOST_AUTO_TEST_SUITE(checks)

BOOST_AUTO_TEST_CASE(base_programs_are_valid) {
  must_load(kBase);
  must_load(kKd);
}

BOOST_AUTO_TEST_CASE(unknown_and_duplicate_keys) {
  expect_error(with("micro_batch = 4;", "micro_bach = 4;"), "unknown key 'micro_bach' in section 'vision'; did you mean 'micro_batch'?");
  expect_error(with("micro_batch = 4;", "micro_batch = 4; micro_batch = 2;"), "'micro_batch' is set twice in section 'vision'");
  expect_error(with("images      = 1;", "imagse = 1;"), "unknown key 'imagse' in the data block; did you mean 'images'?");
  expect_error(with("steps = 2;", "stpes = 2;"), "unknown key 'stpes' in the train block; did you mean 'steps'?");
  expect_error(with("tp = 1;", "tq = 1;"), "unknown key 'tq' in 'parallel' of section 'llm'");
  expect_error(with("parallel { tp = 1; dp = auto; }", "parallel = 2;"), "'parallel' is a block");
  expect_error(with("model = mlp(in: 32, out: d_model);", "model { in = 32; }"), "'model' takes a value");
}

BOOST_AUTO_TEST_CASE(duplicate_and_missing_sections) {
  expect_error(kBase + "section proj { model = mlp(in: 1, out: 1); }\n", "section 'proj' is already defined at line 9");
  expect_error(with("model = mlp(in: 32, out: d_model);", "recompute = true;"), "section 'proj' has no 'model'");
}

BOOST_AUTO_TEST_CASE(types) {
  expect_error(with("micro_batch = 4;", "micro_batch = \"4\";"), "'micro_batch' takes a whole number or auto, not a string");
  expect_error(with("micro_batch = 4;", "micro_batch = 4; recompute = 2;"),
               "'recompute' (layers of 1) must be at most 1, not 2");
  expect_error(with("micro_batch = 4;", "micro_batch = 4; weights = w;"), "'weights' takes a string");
  expect_error(with("micro_batch = 4;", "micro_batch = 4; mode = frozn;"), "'mode' must be 'train' or 'frozen', not 'frozn'; did you mean 'frozen'?");
  expect_error(with("consumes = [image];", "consumes = image;"), "'consumes' takes a list of modalities");
  expect_error(with("consumes = [image];", "consumes = [imagee];"), "unknown modality 'imagee'; did you mean 'image'?");
  expect_error(with("precision = fp32;", "precision = fp16;"), "'precision' must be 'bf16' or 'fp32'");
  expect_error(with("tp = 1;", "tp = 0;"), "'tp' must be at least 1, not 0");
}

// `recompute = auto` leaves the choice to the planner (SectionPlan::recompute_level);
// true pins it for every layer, a number for that many, false turns it off.
// Not written: auto for a trained section that feeds another (the vision
// encoder here: its activations wait for its consumers' backward), off for
// the rest (the llm, a sink; a frozen section has no backward).
BOOST_AUTO_TEST_CASE(recompute_values) {
  const Program a = must_load(with("micro_batch = 4;", "micro_batch = 4; recompute = auto;"));
  BOOST_TEST(a.find_section("vision")->recompute_auto);
  BOOST_TEST(!a.find_section("vision")->recompute);
  const Program t = must_load(with("micro_batch = 4;", "micro_batch = 4; recompute = true;"));
  BOOST_TEST(!t.find_section("vision")->recompute_auto);
  BOOST_TEST(t.find_section("vision")->recompute == 1);  // the vit's one layer
  const std::string deep = "transformer(layers: 1,";
  auto llm = [&](const std::string& value) {
    std::string text = with("loss     = cross_entropy;", "loss     = cross_entropy; recompute = " + value + ";");
    return text.replace(text.find(deep), deep.size(), "transformer(layers: 6,");
  };
  BOOST_TEST(must_load(llm("4")).find_section("llm")->recompute == 4);
  BOOST_TEST(must_load(llm("true")).find_section("llm")->recompute == 6);
  BOOST_TEST(must_load(llm("0")).find_section("llm")->recompute == 0);
  BOOST_TEST(must_load("let half = 3;\n" + llm("half")).find_section("llm")->recompute == 3);
  expect_error(llm("7"), "'recompute' (layers of 6) must be at most 6, not 7");
  expect_error(llm("-1"), "must be at least 0, not -1");
  expect_error(llm("2.5"), "'recompute' (layers of 6) must be a whole number, not 2.5");
  const Program f = must_load(kBase);
  BOOST_TEST(f.find_section("vision")->recompute_auto);
  BOOST_TEST(!f.find_section("vision")->recompute);
  BOOST_TEST(!f.find_section("llm")->recompute_auto);
  const Program off = must_load(with("micro_batch = 4;", "micro_batch = 4; recompute = false;"));
  BOOST_TEST(!off.find_section("vision")->recompute_auto);
  BOOST_TEST(!off.find_section("vision")->recompute);
  const Program frozen = must_load(with("micro_batch = 4;", "micro_batch = 4; mode = frozen;"));
  BOOST_TEST(!frozen.find_section("vision")->recompute_auto);
  expect_error(with("micro_batch = 4;", "micro_batch = 4; recompute = \"auto\";"),
               "'recompute' takes true, false, auto or a number of layers, not a string");
}

BOOST_AUTO_TEST_CASE(models) {
  expect_error(with("mlp(in: 32", "mpl(in: 32"), "unknown model 'mpl'; did you mean 'mlp'?");
  expect_error(kd("model = teacher_net;", "model = teacher_nett;"), "unknown model 'teacher_nett'; did you mean 'teacher_net'?");
  expect_error(with("vocab: 256", "vocab: 256, dropout: 1"), "unknown parameter 'dropout' of 'transformer'");
  expect_error(with("vocab: 256", "vocab: 256, ffn: 1"), "parameter 'ffn' of 'transformer' is given twice");
  expect_error(with(", vocab: 256", ""), "'transformer' needs 'vocab'");
  expect_error(with("mlp(in: 32", "mlp(32"), "the arguments of 'mlp' are named");
  expect_error(with("heads: 4, ffn", "heads: 4, kv_heads: 3, ffn"), "'kv_heads' (3) must divide 'heads' (4)");
  expect_error(with("heads: 4, ffn", "heads: 5, ffn"), "'hidden' (64) must be divisible by 'heads' (5)");
  // Tensor parallelism splits heads, GQA kv heads and ffn: each a multiple of tp, located at tp's value.
  expect_error(with("tp = 1;", "tp = 8;"), "section 'llm' cannot be split over tp = 8 ranks: 'heads' (4) must be a "
                                           "multiple of tp (8)");
  expect_error(with("heads: 4, ffn", "heads: 4, kv_heads: 2, ffn", with("tp = 1;", "tp = 4;")),
               "'kv_heads' (2) must be a multiple of tp (4)");
  {
    const test::Loaded l = test::load_text(with("tp = 1;", "tp = 8;"));
    BOOST_CHECK_MESSAGE(l.rendered().find("test.sect:16:") != std::string::npos, l.rendered());
  }
  BOOST_CHECK(test::load_text(with("heads: 4, ffn", "heads: 4, kv_heads: 2, ffn", with("tp = 1;", "tp = 2;"))).program);
  expect_error(with("image: 8", "image: 10"), "'image' (10) must be divisible by 'patch' (4)");
  expect_error(with("vit(layers: 1", "vit(layers: 0"), "'layers' must be at least 1, not 0");
  expect_error(with("mlp(in: 32", "mlp(in: -32"), "'in' must be at least 1, not -32");
  expect_error(with("out: d_model)", "out: d_model, act: tanh)"), "'act' must be 'gelu', 'relu' or 'silu'");
  expect_error(kd("model student_net", "model teacher_net"), "'teacher_net' is already defined at line 1");
  expect_error(with("vocab: 256)", "vocab: 256, norm_eps: 0)"), "'norm_eps' must be positive");
}

BOOST_AUTO_TEST_CASE(model_defaults) {
  Program p = must_load(with("vocab: 256)", "vocab: 256, kv_heads: 2, causal: false, rope_theta: 500000)",
                             with("out: d_model)", "out: d_model, hidden: 48, layers: 3, act: silu)")));
  const auto& t = std::get<TransformerSpec>(p.find_section("llm")->model.spec);
  BOOST_TEST(t.kv_heads == 2);
  BOOST_TEST(!t.causal);
  BOOST_TEST(t.rope_theta == 500000.0);
  BOOST_TEST(t.norm_eps == 1e-5);
  BOOST_TEST(t.max_seq == 4096);
  const auto& m = std::get<MlpSpec>(p.find_section("proj")->model.spec);
  BOOST_TEST(m.hidden == 48);
  BOOST_TEST(m.layers == 3);
  BOOST_TEST((m.act == Activation::Silu));
  const auto& v = std::get<VitSpec>(p.find_section("vision")->model.spec);
  BOOST_TEST(v.channels == 3);
  BOOST_TEST(p.find_section("proj")->model.name == "mlp");
}

// Whether a transformer's logits are read: by its loss, by a logits flow
// out of it; a text encoder handing on its hidden states has neither.
BOOST_AUTO_TEST_CASE(logits_read_by_a_loss_or_a_logits_flow) {
  auto read = [](const Program& p, const std::string& section) {
    return std::get<TransformerSpec>(p.find_section(section)->model.spec).logits_read;
  };
  const Program kd_program = must_load(kKd);
  BOOST_TEST(read(kd_program, "teacher"));
  BOOST_TEST(read(kd_program, "student"));
  const Program encoder = must_load(R"(
section enc { model = transformer(layers: 1, hidden: 32, heads: 2, ffn: 64, vocab: 61); consumes = [text]; }
section proj { model = mlp(in: 32, out: 48); }
section llm { model = transformer(layers: 1, hidden: 48, heads: 2, ffn: 64, vocab: 64); consumes = [text]; loss = cross_entropy; }
flow enc -> proj -> llm;
data { source = synthetic(seed: 5); mix { text = 1.0; } text_tokens = 8; }
train { global_batch = 4; steps = 1; }
)");
  BOOST_TEST(!read(encoder, "enc"));
  BOOST_TEST(read(encoder, "llm"));
}

BOOST_AUTO_TEST_CASE(conditions) {
  Program p = must_load(with("consumes = [image];", "consumes = [image];\n  when = has(image) and not (has(audio) or has(video));"));
  const Condition& c = p.find_section("vision")->when;
  BOOST_TEST(c.str() == "(has(image) and not (has(audio) or has(video)))");
  ModalitySet image;
  image.add(Modality::Image);
  BOOST_TEST(c.eval(image));
  image.add(Modality::Audio);
  BOOST_TEST(!c.eval(image));
  Program q = must_load(with("consumes = [image];", "consumes = [image, text, audio];",
                             with("image_text = 0.5;", "image_audio_text = 0.5;")));
  BOOST_TEST(q.find_section("vision")->when.str() == "(has(image) and has(audio))");
  expect_error(with("consumes = [image];", "consumes = [image]; when = image;"), "'when' takes a condition");
  expect_error(with("consumes = [image];", "consumes = [image]; when = has(vidoe);"), "unknown modality 'vidoe'");
}

// Each model reads one kind of sample input (and an mlp none): without it
// in `consumes` the run could only fail (or emit nothing) once started; so
// could a section that runs on samples without its input, or a data block
// drawing more than a section takes.
BOOST_AUTO_TEST_CASE(sections_run_on_what_they_read) {
  expect_error(with("consumes = [image];", "consumes = [text];"),
               "section 'vision' is a vit, which reads images from the sample: its 'consumes' must name 'image' or "
               "'video'");
  expect_error(with("consumes = [text];", "consumes = [];"),
               "section 'llm' is a transformer, which reads text from the sample: its 'consumes' must name 'text'");
  expect_error(with("  consumes = [text];\n", ""), "section 'llm' is a transformer, which reads text from the sample");
  expect_error(with("flow vision -> proj -> llm;", "flow proj -> llm;"),
               "section 'proj' is an mlp, which reads its input from activations flows, but none comes into it");
  // Over the samples the mix draws: an encoder runs where its input is, a
  // student where its teacher runs.
  expect_error(with("consumes = [image];", "consumes = [image]; when = true;"),
               "section 'vision' reads images but its 'when' holds on mix entry 'text', which has none");
  expect_error(with("mix { text = 1.0; }", "mix { text = 0.5; image_text = 0.5; }",
                    kd("mode = frozen; consumes = [text];", "mode = frozen; consumes = [text]; when = has(image);")),
               "flow teacher -> student: 'student' needs the logits of 'teacher' on every sample it runs on, but "
               "'teacher' does not run on mix entry 'text' (its 'when')");
  must_load(with("mix { text = 1.0; }", "mix { text = 0.0; image_text = 1.0; }",
                 kd("mode = frozen; consumes = [text];", "mode = frozen; consumes = [text]; when = has(image);")));
  // What the synthetic source draws, against what the sections take.
  expect_error(with("when = has(image);", "when = has(audio);",
                    with("consumes = [text];\n  parallel", "consumes = [text]; when = has(image);\n  parallel")),
               "section 'llm' would never run: its 'when' holds on no entry of the mix");
  expect_error(with("text_tokens = lognormal(median: 32, sigma: 0.5, max: 128);", "text_tokens = choice([1, 2], weights: [1, 0]);"),
               "'text_tokens' is never more than 1, so no text position is followed by text: the loss of section 'llm' "
               "has no target position to average");
  const std::string with_audio =
      with("mix { image_text = 0.5; text = 0.5; }", "mix { image_text = 0.5; audio_text = 0.5; }",
           with("section proj {",
                "section audio {\n  model = audio_encoder(layers: 1, hidden: 32, heads: 2, ffn: 64, mel_bins: 16, "
                "max_frames: 50);\n  consumes = [audio];\n}\nsection aproj { model = mlp(in: 32, out: d_model); }\n"
                "flow audio -> aproj -> llm;\nsection proj {"));
  must_load(with("images      = 1;", "images = 1;\n  audio_frames = uniform(min: 20, max: 50);", with_audio));
  expect_error(with("images      = 1;", "images = 1;\n  audio_frames = uniform(min: 40, max: 120);", with_audio),
               "'audio_frames' draws up to 120 frames, but section 'audio' takes at most max_frames = 50");
  expect_error(with("tp = 1; dp = auto;", "tp = 1; dp = 9;"),
               "section 'llm' has dp = 9 replicas but 'global_batch' is 8: each step some would get no sample");
  must_load(with("tp = 1; dp = auto;", "tp = 1; dp = 8;"));
  expect_error(kd("vocab: 256);\nmodel student_net", "vocab: 256, max_seq: 12);\nmodel student_net"),
               "flow teacher -> student: 'teacher' keeps at most 12 text positions (its max_seq) but 'student' up to 16 "
               "('text_tokens' draws up to 16), and its loss needs the teacher's logits at each of them");
  must_load(kd("vocab: 256);\nmodel student_net", "vocab: 256, max_seq: 16);\nmodel student_net"));
  // Other modalities only gate when a section runs.
  Program p = must_load(with("consumes = [image];", "consumes = [image, text];"));
  BOOST_TEST(p.sections[0].consumes.size() == 2u);
  must_load(with("model = mlp(in: 32, out: d_model);", "model = mlp(in: 32, out: d_model); consumes = [image];"));
}

BOOST_AUTO_TEST_CASE(flows) {
  expect_error(with("flow vision -> proj", "flow vision -> prj"), "flow names an unknown section 'prj'; did you mean 'proj'?");
  expect_error(kBase + "section loop { model = mlp(in: 64, out: 64); }\nflow llm -> loop -> llm;\n",
               "the flows form a cycle: llm -> loop -> llm");
  expect_error(kBase + "flow llm -> llm;\n", "the flows form a cycle: llm -> llm");
  expect_error(with("mlp(in: 32, out: d_model)", "mlp(in: 32, out: 128)"),
               "flow proj -> llm: 'proj' emits width 128 but 'llm' takes width 64");
  expect_error(kBase + "flow proj -> llm;\n", "flow proj -> llm is declared twice");
  expect_error(kd("student : logits", "student : logit"), "unknown flow kind 'logit'; did you mean 'logits'?");
  expect_error(kd("ffn: 64, vocab: 256", "ffn: 64, vocab: 512"),
               "flow teacher -> student: 'teacher' has vocabulary 256 but 'student' has vocabulary 512");
  expect_error(kBase + "flow vision -> llm : logits;\n", "a logits flow links two transformers, but 'vision' is a vit");
  Program p = must_load(kBase);
  BOOST_REQUIRE(p.flows.size() == 2u);
  BOOST_TEST(p.flows[1].from == "proj");
  BOOST_TEST(p.flows[1].loc.line == 20);
}

BOOST_AUTO_TEST_CASE(losses) {
  expect_error(with("loss     = cross_entropy;", "loss = cross_entopy;"), "unknown loss 'cross_entopy'; did you mean 'cross_entropy'?");
  expect_error(kd("0.5 * kl", "-0.5 * kl"), "a loss weight must be positive, not -0.5");
  expect_error(kd("temperature: 2.0", "temperature: 0"), "'temperature' must be positive");
  expect_error(kd(" : logits;", ";").replace(kKd.find("hidden: 32, heads: 2"), 20, "hidden: 64, heads: 2"),
               "section 'student' has a kl loss but no 'logits' flow comes into it");
  expect_error(with("flow vision -> proj -> llm;", "flow vision -> proj;",
                    with("model = mlp(in: 32, out: d_model);", "model = mlp(in: 32, out: d_model); loss = cross_entropy;")),
               "section 'proj' has a 'loss' but it is not a transformer and no flow leaves it");
  Program p = must_load(kd("cross_entropy + 0.5 * kl(temperature: 2.0)", "kl(temperature: 3) * 2 + cross_entropy"));
  const auto& loss = p.find_section("student")->loss;
  BOOST_REQUIRE(loss.size() == 2u);
  BOOST_TEST(loss[0].weight == 2.0);
  BOOST_TEST(loss[0].temperature == 3.0);
}

BOOST_AUTO_TEST_CASE(consumes_needs_a_mix_entry) {
  expect_error(with("consumes = [image];", "consumes = [image, audio];"),
               "section 'vision' consumes 'audio' but no 'mix' entry of the data has it");
}

BOOST_AUTO_TEST_CASE(data_checks) {
  expect_error(with("text = 0.5;", "text = 0.4;"), "the mix weights sum to 0.9, not 1");
  must_load(with("image_text = 0.5; text = 0.5;", "image_text = 0.3333333; text = 0.6666667;"));
  expect_error(with("image_text = 0.5;", "imge_text = 0.5;"), "unknown modality 'imge' in mix entry 'imge_text'");
  expect_error(with(" text = 0.5;", " text_image = 0.5;"), "mix entry 'text_image' repeats the modalities");
  expect_error(with("images      = 1;", "images = uniform(min: 4, max: 2);"), "uniform: 'min' (4) is larger than 'max' (2)");
  expect_error(with("sigma: 0.5", "sigma: 0"), "'sigma' must be positive");
  expect_error(with("median: 32", "median: 0"), "'median' must be positive");
  expect_error(with("images      = 1;", "images = choice([1, 2], weights: [1]);"), "choice has 2 values but 1 weights");
  expect_error(with("images      = 1;", "images = choice([1, 2], weights: [1, -1]);"), "must not be negative");
  expect_error(with("images      = 1;", "images = choice([1, 2], weights: [0, 0]);"), "positive sum");
  expect_error(with("images      = 1;", "images = unifrom(min: 1, max: 2);"), "unknown distribution 'unifrom'; did you mean 'uniform'?");
  expect_error(with("  source = synthetic(seed: 7);\n", ""), "the data block has no 'source'");
  Program p = must_load(with("images      = 1;", "images = choice([1, 2, 4], weights: [0.8, 0.15, 0.05]);\n  audio_frames = uniform(min: 3, max: 9);",
                             with("source = synthetic(seed: 7);", "source = files(manifest: \"d/train.jsonl\");")),
                        "/w/m.sect");
  BOOST_TEST((p.data.source == DataSpec::Source::Files));
  BOOST_TEST(p.data.manifest == "/w/d/train.jsonl");
  BOOST_TEST(p.data.images->values.size() == 3u);
  BOOST_TEST(p.data.audio_frames->min == 3);
  BOOST_TEST(p.data.text_tokens->median == 32);
}

BOOST_AUTO_TEST_CASE(images_without_an_image_mix_entry_are_ignored) {
  Program p = must_load(kd("text_tokens = 16;", "text_tokens = 16; images = uniform(min: 1, max: 3);"));
  BOOST_TEST(p.data.mix.size() == 1u);
}

BOOST_AUTO_TEST_CASE(exactly_one_data_and_train) {
  size_t data_at = kBase.find("data {"), train_at = kBase.find("train {");
  expect_error(kBase.substr(0, data_at) + kBase.substr(train_at), "the program has no 'data' block");
  expect_error(kBase.substr(0, train_at), "the program has no 'train' block");
  expect_error(kBase + "data { source = synthetic(seed: 1); mix { text = 1; } text_tokens = 4; }\n",
               "a second 'data' block: a program has exactly one, and the first is at line 22");
  expect_error(kBase + "train { global_batch = 8; steps = 2; }\n", "a second 'train' block");
}

BOOST_AUTO_TEST_CASE(train_checks_and_defaults) {
  expect_error(with("  global_batch = 8;\n", ""), "the train block has no 'global_batch'");
  expect_error(with("  steps = 2;\n", ""), "the train block has no 'steps'");
  expect_error(with("micro_batch = 4;", "micro_batch = 16;"), "'micro_batch' (16) of section 'vision' is larger than 'global_batch' (8)");
  expect_error(with("adamw(lr: 1e-3)", "adamw(lr: 1e-3, betas: [0.9])"), "'betas' takes two numbers");
  expect_error(with("adamw(lr: 1e-3)", "sgd(lr: 1e-3)"), "'optimizer' takes adamw(");
  expect_error(with("adamw(lr: 1e-3)", "adamw(lr: 1e-3, shard: 1)"), "'shard' takes true or false, not a number");
  expect_error(with("adamw(lr: 1e-3)", "adamw(lr: 1e-3, shard: \"yes\")"), "'shard' takes true or false");
  BOOST_TEST(must_load(with("adamw(lr: 1e-3)", "adamw(lr: 1e-3, shard: true)")).train.optimizer.shard);
  expect_error(with("precision = fp32;", "schedule = linear;"), "'schedule' takes cosine(warmup: N) or constant");
  expect_error(with("precision = fp32;", "checkpoint { every = 10; }"), "'checkpoint' has no 'dir'");
  Program d = must_load(with("optimizer = adamw(lr: 1e-3);\n  precision = fp32;\n", ""));
  BOOST_TEST(d.train.optimizer.lr == 1e-3);
  BOOST_TEST(d.train.optimizer.beta1 == 0.9);
  BOOST_TEST(d.train.optimizer.beta2 == 0.999);
  BOOST_TEST(d.train.optimizer.weight_decay == 0.01);
  BOOST_TEST(!d.train.optimizer.shard);
  BOOST_TEST((d.train.precision == Precision::BF16));
  BOOST_TEST(d.train.seed == 1u);
  BOOST_TEST(d.train.checkpoint_dir.empty());
  Program p = must_load(with("precision = fp32;", "precision = fp32; seed = 9; grad_clip = 0; schedule = cosine(warmup: 5);\n"
                                                  "  checkpoint { every = 10; dir = \"ck\"; }"),
                        "/runs/m.sect");
  BOOST_TEST(p.train.seed == 9u);
  BOOST_TEST(p.train.grad_clip == 0.0);
  BOOST_TEST(p.train.schedule.warmup == 5);
  BOOST_TEST(p.train.checkpoint_every == 10);
  BOOST_TEST(p.train.checkpoint_dir == "/runs/ck");
}

BOOST_AUTO_TEST_SUITE_END()
