// The oracle harness (see oracle_harness.h).
#include "oracle_harness.h"

#include <fmt/format.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "support/checked_backend.h"
#include "nn/init.h"
#include "nn/safetensors.h"
#include "support/oracle_python.h"

namespace maestro::test {

Backend& cpu() {
  static test_support::CheckedBackend b(1);
  return b;
}

std::vector<float> host_of(const RowsView& v) {
  std::vector<float> out(size_t(v.rows * v.cols));
  if (!out.empty()) cpu().copy_to_host(out.data(), v.data, out.size() * sizeof(float));
  return out;
}

std::string temp_dir(const std::string& tag) {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path() /
             fmt::format("maestro-nn-{}-{}-{}", ::getpid(), tag, counter++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

ModelSpec llama(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn, int64_t vocab,
                int64_t max_seq) {
  TransformerSpec t;
  t.layers = layers;
  t.hidden = hidden;
  t.heads = heads;
  t.kv_heads = kv_heads;
  t.ffn = ffn;
  t.vocab = vocab;
  t.max_seq = max_seq;
  return {"transformer", t};
}

ModelSpec small_vit(int64_t layers) {
  VitSpec v;
  v.layers = layers;
  v.hidden = 24;
  v.heads = 3;
  v.ffn = 40;
  v.patch = 4;
  v.image = 12;
  v.channels = 3;
  return {"vit", v};
}

ModelSpec small_audio(int64_t layers) {
  AudioEncoderSpec a;
  a.layers = layers;
  a.hidden = 24;
  a.heads = 2;
  a.ffn = 32;
  a.mel_bins = 10;
  a.frames_per_token = 2;
  a.max_frames = 64;
  return {"audio_encoder", a};
}

Section make_section(const std::string& name, ModelSpec model, Mode mode, bool recompute, std::vector<LossTerm> loss) {
  Section s;
  s.name = name;
  s.model = std::move(model);
  s.mode = mode;
  s.recompute = recompute ? s.model.layers() : 0;  // every layer
  s.loss = std::move(loss);
  return s;
}

std::vector<float> random_floats(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = scale * float(2.0 * double(splitmix64(seed * 0x9e3779b97f4a7c15ull + i) >> 11) * 0x1.0p-53 - 1.0);
  return v;
}

std::vector<int32_t> random_tokens(size_t n, uint64_t seed, int32_t vocab) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = int32_t(splitmix64(seed * 0x2545f4914f6cdd1dull + i) % uint64_t(vocab));
  return v;
}

void randomize(SectionModel& m, uint64_t seed, float scale) {
  int64_t offset = 0, index = 0;
  for (const auto& t : m.tensors()) {
    const bool norm = t.shape.size() == 1 && t.name.ends_with(".weight");
    std::vector<float> v = random_floats(t.numel(), seed * 1000 + index++, norm ? 0.1f : scale);
    if (norm)
      for (float& x : v) x += 1.0f;
    cpu().copy_from_host(m.params() + offset, v.data(), v.size() * sizeof(float));
    offset += t.numel();
  }
}

namespace {

nlohmann::json spec_json(const ModelSpec& m) {
  nlohmann::json j;
  if (auto* t = std::get_if<TransformerSpec>(&m.spec))
    j = {{"layers", t->layers}, {"hidden", t->hidden}, {"heads", t->heads}, {"kv_heads", t->kv_heads},
         {"ffn", t->ffn}, {"vocab", t->vocab}, {"max_seq", t->max_seq}, {"causal", t->causal},
         {"rope_theta", t->rope_theta}, {"norm_eps", t->norm_eps}};
  else if (auto* v = std::get_if<VitSpec>(&m.spec))
    j = {{"layers", v->layers}, {"hidden", v->hidden}, {"heads", v->heads}, {"ffn", v->ffn}, {"patch", v->patch},
         {"image", v->image}, {"channels", v->channels}, {"norm_eps", v->norm_eps}, {"merge", v->merge}};
  else if (auto* a = std::get_if<AudioEncoderSpec>(&m.spec))
    j = {{"layers", a->layers}, {"hidden", a->hidden}, {"heads", a->heads}, {"ffn", a->ffn},
         {"mel_bins", a->mel_bins}, {"frames_per_token", a->frames_per_token}, {"max_frames", a->max_frames},
         {"norm_eps", a->norm_eps}};
  else {
    const auto& p = std::get<MlpSpec>(m.spec);
    const char* act = p.act == Activation::Gelu ? "gelu" : p.act == Activation::Relu ? "relu" : "silu";
    j = {{"in", p.in}, {"out", p.out}, {"hidden", p.hidden}, {"layers", p.layers}, {"act", act}};
  }
  return {{"kind", m.builtin()}, {"spec", j}};
}

}  // namespace

void OracleCase::add_model(SectionModel& m) {
  const std::string& name = m.section().name;
  json["models"][name] = spec_json(m.section().model);
  if (m.section().mode == Mode::Frozen) json["frozen"].push_back(name);
  int64_t offset = 0;
  for (const auto& t : m.tensors()) {
    Tensor host = Tensor::host(DType::F32, t.shape);
    cpu().copy_to_host(host.f32(), m.params() + offset, t.numel() * sizeof(float));
    weights.push_back({name + "." + t.name, host});
    offset += t.numel();
  }
}

void OracleCase::add_input(const std::string& key, const std::vector<float>& values) {
  Tensor t = Tensor::host(DType::F32, {int64_t(values.size())});
  std::copy(values.begin(), values.end(), t.f32());
  inputs.push_back({key, t});
}

Reference OracleCase::run(const std::string& tag) {
  const std::string dir = temp_dir(tag);
  std::ofstream(dir + "/case.json") << json.dump(1);
  write_safetensors(dir + "/weights.safetensors", weights);
  if (!inputs.empty()) write_safetensors(dir + "/inputs.safetensors", inputs);
  const std::string cmd = fmt::format("{} {}/tests/oracle/models_oracle.py {} > {}/oracle.log 2>&1",
                                      oracle_python(), MAESTRO_SOURCE_DIR, dir, dir);
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(dir + "/oracle.log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    BOOST_FAIL("oracle failed for " << dir << ":\n" << text);
  }
  SafetensorsReader reader(dir + "/reference.safetensors");
  Reference ref;
  for (const auto& name : reader.names()) {
    Tensor t = reader.read(name);
    ref[name].assign(t.f32(), t.f32() + t.numel());
  }
  std::filesystem::remove_all(dir);
  return ref;
}

double rel_error(const float* got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

void check_close(const std::string& what, const float* got, size_t n, const Reference& ref, const std::string& key,
                 double tol) {
  auto it = ref.find(key);
  BOOST_REQUIRE_MESSAGE(it != ref.end(), what << ": the oracle wrote no " << key);
  BOOST_REQUIRE_MESSAGE(it->second.size() == n, what << ": " << n << " values, the oracle has " << it->second.size());
  const double e = rel_error(got, it->second);
  BOOST_TEST_MESSAGE(what << ": relative error " << e);
  BOOST_CHECK_MESSAGE(e <= tol, what << " (" << key << "): relative error " << e << " > " << tol);
}

void check_grads(SectionModel& m, const Reference& ref, double tol) {
  BOOST_REQUIRE(m.grads());
  int64_t offset = 0;
  for (const auto& t : m.tensors()) {
    const std::string key = "grad." + m.section().name + "." + t.name;
    if (t.name.ends_with("k_proj.bias")) {
      // q·(k + b) shifts a query's scores by the same q·b: softmax ignores it,
      // so the true gradient is 0 and both sides hold only rounding noise.
      const std::vector<float> zeros(t.numel(), 0.0f);
      const double got = rel_error(m.grads() + offset, zeros), want = rel_error(ref.at(key).data(), zeros);
      BOOST_CHECK_MESSAGE(got < 1e-5 && want < 1e-5, t.name << ": |grad| " << got << ", torch " << want << ", expected ~0");
      offset += t.numel();
      continue;
    }
    check_close("gradient of " + t.name, m.grads() + offset, size_t(t.numel()), ref, key, tol);
    offset += t.numel();
  }
}

}  // namespace maestro::test
