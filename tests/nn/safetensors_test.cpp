// safetensors: F32/BF16 round trips, every malformed-file error with its
// message; a section's checkpoint (parameters + AdamW state under a prefix)
// and `weights =` files (no prefix, BF16 accepted); the initialisation.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "nn/init.h"
#include "nn/safetensors.h"
#include "oracle_harness.h"

using namespace maestro;
using namespace maestro::test;

namespace {

// The safetensors bytes of a raw header text followed by `data`.
void write_raw(const std::string& path, const std::string& header, const std::string& data, int64_t claimed = -1) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = claimed < 0 ? header.size() : uint64_t(claimed);
  for (int i = 0; i < 8; ++i) out.put(char(n >> (8 * i)));
  out << header << data;
}

bool message_has(const std::exception& e, const std::string& a, const std::string& b = "") {
  const std::string m = e.what();
  return m.find(a) != std::string::npos && m.find(b) != std::string::npos;
}

ModelSpec tiny_mlp() { return {"mlp", MlpSpec{.in = 3, .out = 4, .hidden = 5, .layers = 2}}; }

}  // namespace

BOOST_AUTO_TEST_SUITE(safetensors)

BOOST_AUTO_TEST_CASE(round_trip_f32_and_bf16) {
  const std::string dir = temp_dir("st"), path = dir + "/a.safetensors";
  Tensor a = Tensor::host(DType::F32, {2, 3});
  for (int i = 0; i < 6; ++i) a.f32()[i] = 0.1f * float(i) - 0.25f;
  Tensor b = Tensor::host(DType::BF16, {5});
  for (int i = 0; i < 5; ++i) b.bf16()[i] = float_to_bf16(1.5f * float(i) - 2.0f);  // exact in bf16
  write_safetensors(path, {{"x.a", a}, {"b", b}}, {{"k", "v"}});
  BOOST_CHECK(!std::filesystem::exists(path + ".tmp"));
  SafetensorsReader r(path);
  BOOST_CHECK(r.names() == (std::vector<std::string>{"b", "x.a"}));
  BOOST_CHECK(r.metadata().at("k") == "v");
  BOOST_CHECK(r.dtype("b") == DType::BF16);
  Tensor a2 = r.read("x.a");
  BOOST_CHECK(a2.shape == a.shape);
  BOOST_CHECK(std::memcmp(a2.data, a.data, a.bytes()) == 0);
  float bf[5];
  r.read_f32("b", {5}, bf);
  for (int i = 0; i < 5; ++i) BOOST_CHECK_EQUAL(bf[i], 1.5f * float(i) - 2.0f);
  BOOST_CHECK_EQUAL(bf16_to_float(float_to_bf16(1.0f + 1.0f / 512)), 1.0f);  // round to nearest even
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_full_disk_names_the_file_and_the_reason) {
  // The staging file is a link to /dev/full: every write fails with ENOSPC.
  const std::string dir = temp_dir("st-full"), path = dir + "/full.safetensors";
  std::filesystem::create_symlink("/dev/full", path + ".tmp");
  Tensor a = Tensor::host(DType::F32, {4});
  try {
    write_safetensors(path, {{"a", a}});
    BOOST_FAIL("expected an error");
  } catch (const std::runtime_error& e) {
    BOOST_TEST(message_has(e, path + ".tmp", "write failed: No space left on device"), e.what());
  }
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(malformed_files_are_named_errors) {
  const std::string dir = temp_dir("bad"), p = dir + "/bad.safetensors";
  const std::string good = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  auto throws_with = [&](const std::string& a, const std::string& b = "") {
    bool ok = false;
    try {
      SafetensorsReader r(p);
      float out[2];
      r.read_f32("w", {2}, out);
    } catch (const std::runtime_error& e) {
      ok = message_has(e, p) && message_has(e, a, b);
      BOOST_TEST_MESSAGE(e.what());
    }
    return ok;
  };
  std::ofstream(p, std::ios::binary) << "abc";
  BOOST_CHECK(throws_with("truncated"));
  write_raw(p, good, "", 4096);
  BOOST_CHECK(throws_with("truncated header"));
  write_raw(p, "{\"w\": [", std::string(8, '\0'));
  BOOST_CHECK(throws_with("not valid JSON"));
  write_raw(p, good, std::string(4, '\0'));
  BOOST_CHECK(throws_with("'w'", "outside the file"));
  write_raw(p, R"({"v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'));
  BOOST_CHECK(throws_with("missing tensor 'w'"));
  write_raw(p, R"({"w":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}})", std::string(8, '\0'));
  BOOST_CHECK(throws_with("'w' has shape [1, 2], expected [2]"));
  write_raw(p, R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", std::string(4, '\0'));
  BOOST_CHECK(throws_with("unsupported dtype F16"));
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(checkpoint_round_trip_with_adam_state) {
  const std::string dir = temp_dir("ckpt"), path = dir + "/proj.safetensors";
  Section sec = make_section("proj", tiny_mlp());
  SectionModel a(sec, cpu(), 5);
  std::vector<float> x = random_floats(2 * 3, 1);
  std::vector<SampleInput> in(1);
  in[0].values = span_of(x);
  for (int step = 0; step < 2; ++step) {
    a.zero_grads();
    ForwardOutput f = a.forward(in);
    std::vector<float> g(f.outputs[0].values().size(), 1.0f);
    a.backward(*f.context, {span_of(g)});
    a.adamw_step(OptimizerSpec{}, 1e-2);
  }
  a.save(path, "proj");
  SafetensorsReader r(path);
  BOOST_CHECK(r.contains("proj.layers.0.weight") && r.contains("proj.layers.1.bias:exp_avg_sq"));
  SectionModel b(sec, cpu(), 99);  // other init
  b.load(path, "proj");
  BOOST_CHECK_EQUAL(b.adamw_steps(), 2);
  // One more identical step on both gives identical parameters.
  for (SectionModel* m : {&a, &b}) {
    m->zero_grads();
    ForwardOutput f = m->forward(in);
    std::vector<float> g(f.outputs[0].values().size(), 1.0f);
    m->backward(*f.context, {span_of(g)});
    m->adamw_step(OptimizerSpec{}, 1e-2);
  }
  BOOST_CHECK(std::memcmp(a.params(), b.params(), sizeof(float) * a.parameter_count()) == 0);
  BOOST_CHECK_EXCEPTION(b.load(path, "other"), std::runtime_error,
                        [](const std::runtime_error& e) { return message_has(e, "missing tensor 'other.layers.0.weight'"); });
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(weights_file_bf16_without_prefix) {
  const std::string dir = temp_dir("weights"), path = dir + "/w.safetensors";
  Section sec = make_section("proj", tiny_mlp(), Mode::Frozen);
  std::vector<NamedTensor> ts;
  for (const auto& t : model_tensors(sec.model)) {
    Tensor h = Tensor::host(DType::BF16, t.shape);
    for (int64_t i = 0; i < h.numel(); ++i) h.bf16()[i] = float_to_bf16(0.25f * float(i % 7));
    ts.push_back({t.name, h});
  }
  write_safetensors(path, ts);
  sec.weights = path;
  SectionModel m(sec, cpu(), 1);
  BOOST_CHECK_EQUAL(m.params()[3], 0.75f);
  // A file for another shape: the error names the section, the file and the tensor.
  Section other = make_section("vision_proj", {"mlp", MlpSpec{.in = 4, .out = 4, .hidden = 5, .layers = 2}});
  other.weights = path;
  BOOST_CHECK_EXCEPTION(SectionModel(other, cpu(), 1), std::runtime_error, [&](const std::runtime_error& e) {
    return message_has(e, "section 'vision_proj'", path) && message_has(e, "'layers.0.weight' has shape [5, 3]");
  });
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(initialisation_is_deterministic_and_per_section) {
  ModelSpec spec = tiny_mlp();
  SectionModel a(make_section("a", spec), cpu(), 1), a2(make_section("a", spec), cpu(), 1);
  SectionModel b(make_section("b", spec), cpu(), 1), a_seed2(make_section("a", spec), cpu(), 2);
  const size_t n = size_t(a.parameter_count());
  BOOST_CHECK(std::memcmp(a.params(), a2.params(), n * 4) == 0);
  BOOST_CHECK(std::memcmp(a.params(), b.params(), n * 4) != 0);
  BOOST_CHECK(std::memcmp(a.params(), a_seed2.params(), n * 4) != 0);
  // layers.0.weight [5, 3] normal(0, 0.02), layers.0.bias zeros
  double sq = 0;
  for (int i = 0; i < 15; ++i) sq += a.params()[i] * a.params()[i];
  BOOST_CHECK(std::sqrt(sq / 15) > 0.005 && std::sqrt(sq / 15) < 0.05);
  for (int i = 15; i < 20; ++i) BOOST_CHECK_EQUAL(a.params()[i], 0.0f);
  // A big tensor's moments.
  TensorShape t{"w", {100000}};
  t.shape = {1000, 100};
  std::vector<float> v(100000);
  init_tensor(v.data(), t, "s.w", 3);
  double mean = 0, var = 0;
  for (float x : v) mean += x;
  mean /= v.size();
  for (float x : v) var += (x - mean) * (x - mean);
  BOOST_CHECK_SMALL(mean, 3e-4);
  BOOST_CHECK_CLOSE(std::sqrt(var / v.size()), 0.02, 1.0);
  // A tensor big enough to fill on several threads gets the same values on any number of them.
  const TensorShape big{"big", {3, (1 << 20) + 7}};
  std::vector<float> one(size_t(big.numel())), seven(one.size());
  init_tensor(one.data(), big, "s.big", 3, 1);
  init_tensor(seven.data(), big, "s.big", 3, 7);
  BOOST_CHECK(one == seven);
  // Norm weights are ones.
  SectionModel llm(make_section("llm", {"transformer", TransformerSpec{.layers = 1, .hidden = 8, .heads = 2, .kv_heads = 2,
                                                                        .ffn = 8, .vocab = 5}}),
                   cpu(), 1);
  BOOST_CHECK_EQUAL(llm.tensors()[1].name, "model.layers.0.input_layernorm.weight");
  BOOST_CHECK_EQUAL(llm.params()[5 * 8], 1.0f);
}

BOOST_AUTO_TEST_SUITE_END()
