// Every example under models/ loads, and resolves to the values its text says.
#define BOOST_TEST_MODULE dsl
#include <variant>

#include "sect_test_util.h"

using namespace maestro;
using maestro::test::must_load;

namespace {

Program load_file(const std::string& path) {
  Diagnostics diags;
  auto p = load_program(path, diags);
  std::ostringstream out;
  diags.render(out);
  BOOST_REQUIRE_MESSAGE(p.has_value(), path + " has errors:\n" + out.str());
  return *p;
}

const Section& section(const Program& p, const std::string& name) {
  const Section* s = p.find_section(name);
  BOOST_REQUIRE_MESSAGE(s != nullptr, "no section " + name);
  return *s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(examples)

BOOST_AUTO_TEST_CASE(tiny_mllm) {
  Program p = load_file("models/tiny_mllm.sect");
  BOOST_TEST(p.sections.size() == 5u);
  BOOST_TEST(p.flows.size() == 4u);
  const auto& llm = std::get<TransformerSpec>(section(p, "llm").model.spec);
  BOOST_TEST(llm.ffn == 384);
  BOOST_TEST(llm.hidden == 128);
  BOOST_TEST(llm.kv_heads == 4);  // defaults to heads
  BOOST_TEST(llm.max_seq == 512);
  BOOST_TEST(section(p, "vision").when.str() == "has(image)");
  BOOST_TEST(section(p, "llm").when.str() == "always");
  BOOST_TEST(*section(p, "vision").micro_batch == 8);
  BOOST_TEST(!section(p, "audio").micro_batch.has_value());
  BOOST_TEST(*section(p, "vision").parallel.dp == 1);
  BOOST_TEST(!section(p, "llm").parallel.dp.has_value());
  BOOST_TEST(*section(p, "llm").parallel.tp == 1);
  const auto& proj = std::get<MlpSpec>(section(p, "vision_proj").model.spec);
  BOOST_TEST(proj.hidden == 128);  // defaults to out
  BOOST_TEST(proj.layers == 2);
  BOOST_TEST((proj.act == Activation::Gelu));
  BOOST_TEST(std::get<AudioEncoderSpec>(section(p, "audio").model.spec).mel_bins == 16);
  BOOST_TEST(p.flows[0].from == "vision");
  BOOST_TEST(p.flows[0].to == "vision_proj");
  BOOST_TEST((p.flows[0].kind == FlowKind::Activations));
  BOOST_TEST(p.data.mix.size() == 3u);
  BOOST_TEST(p.data.mix[0].name == "image_text");
  BOOST_TEST(p.data.mix[0].modalities.has(Modality::Image));
  BOOST_TEST(p.data.mix[0].weight == 0.5);
  BOOST_TEST((p.data.images->kind == Distribution::Kind::Constant));
  BOOST_TEST(p.data.audio_frames->max == 128);
  BOOST_TEST(p.train.global_batch == 32);
  BOOST_TEST(p.train.optimizer.beta2 == 0.95);
  BOOST_TEST(p.train.optimizer.eps == 1e-8);  // PyTorch's default
  BOOST_TEST((p.train.precision == Precision::FP32));
  BOOST_TEST(p.train.grad_clip == 1.0);
  BOOST_TEST(std::filesystem::path(p.file).is_absolute());
}

BOOST_AUTO_TEST_CASE(tiny_kd) {
  Program p = load_file("models/tiny_kd.sect");
  BOOST_TEST(p.sections.size() == 2u);
  BOOST_TEST((section(p, "teacher").mode == Mode::Frozen));
  BOOST_TEST(section(p, "teacher").model.name == "teacher_net");
  const auto& loss = section(p, "student").loss;
  BOOST_REQUIRE(loss.size() == 2u);
  BOOST_TEST((loss[0].kind == LossKind::CrossEntropy));
  BOOST_TEST(loss[0].weight == 1.0);
  BOOST_TEST((loss[1].kind == LossKind::KL));
  BOOST_TEST(loss[1].weight == 0.5);
  BOOST_TEST(loss[1].temperature == 2.0);
  BOOST_TEST((p.flows.at(0).kind == FlowKind::Logits));
  BOOST_TEST(std::get<TransformerSpec>(section(p, "student").model.spec).vocab == 512);
  BOOST_TEST((p.train.schedule.kind == LrSchedule::Kind::Constant));
}

BOOST_AUTO_TEST_CASE(omni_imports_encoders) {
  Program p = load_file("models/omni_7b.sect");
  BOOST_TEST(p.sources.size() == 2u);
  BOOST_TEST(std::filesystem::path(p.sources[1]).filename() == "encoders.sect");
  BOOST_TEST(p.sections.size() == 5u);
  BOOST_TEST(p.flows.size() == 4u);
  const auto& vit = std::get<VitSpec>(section(p, "vision").model.spec);
  BOOST_TEST(vit.hidden == 1280);
  BOOST_TEST(vit.patches_per_image() == 32 * 32);
  BOOST_TEST(section(p, "vision").model.name == "vit_h14");
  BOOST_TEST(std::get<AudioEncoderSpec>(section(p, "audio").model.spec).mel_bins == 128);
  BOOST_TEST(std::get<TransformerSpec>(section(p, "llm").model.spec).kv_heads == 4);
  BOOST_TEST(*section(p, "llm").parallel.pp == 2);
  BOOST_TEST(p.data.mix.size() == 4u);
  BOOST_TEST(p.data.mix[2].modalities.has(Modality::Audio));
  BOOST_TEST(p.data.mix[2].modalities.has(Modality::Image));
  BOOST_TEST(p.train.optimizer.beta2 == 0.999);
}

BOOST_AUTO_TEST_CASE(llava_and_kd_70b) {
  Program llava = load_file("models/llava15_7b.sect");
  BOOST_TEST(section(llava, "llm").recompute);
  BOOST_TEST((llava.data.images->kind == Distribution::Kind::Choice));
  BOOST_TEST(llava.data.images->weights.size() == 3u);
  BOOST_TEST(llava.train.schedule.warmup == 150);
  BOOST_TEST((llava.train.schedule.kind == LrSchedule::Kind::Cosine));
  Program kd = load_file("models/kd_70b_to_8b.sect");
  BOOST_TEST(std::get<TransformerSpec>(section(kd, "teacher").model.spec).kv_heads == 8);
  BOOST_TEST(*section(kd, "teacher").parallel.tp == 8);
  BOOST_TEST(section(kd, "student").loss.size() == 2u);
}

BOOST_AUTO_TEST_SUITE_END()
