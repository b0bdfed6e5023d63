// Test harness for the engine against the PyTorch oracle
// (tests/oracle/models_oracle.py): builds a case (models, samples, loss),
// writes its weights and inputs as safetensors into a fresh temp folder,
// runs the oracle (support/oracle_python.h) and reads the reference back; plus
// the CPU backend every test runs on and norm-wise error checks. Cases that
// run the oracle carry kOracle, so ctest runs them as oracle.nn (Skipped when
// the oracle cannot run, cmake/MaestroTest.cmake).
#pragma once

#include <boost/test/unit_test.hpp>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "nn/backend.h"
#include "nn/section_model.h"
#include "nn/safetensors.h"

namespace maestro::test {

// The Boost.Test label of the cases that run the oracle.
inline auto kOracle = boost::unit_test::label("oracle");

// One CPU backend, 1 thread, for the whole suite, behind the memory contract
// a GPU backend enforces (support/checked_backend.h).
Backend& cpu();

// A fresh empty folder under the system temp directory.
std::string temp_dir(const std::string& tag);

// Small models for the suite: a Llama transformer of these sizes; vit
// (hidden 24, 3 heads, 12×12 images of 4×4 patches); audio_encoder (hidden
// 24, 2 heads, 10 mel bins, 2 frames per token, max 64 frames).
ModelSpec llama(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn, int64_t vocab,
                int64_t max_seq = 64);
ModelSpec small_vit(int64_t layers = 2);
ModelSpec small_audio(int64_t layers = 2);

Section make_section(const std::string& name, ModelSpec model, Mode mode = Mode::Train, bool recompute = false,
                     std::vector<LossTerm> loss = {});

// Deterministic test data: uniform in [-scale, scale] / token ids in [0, vocab).
std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f);
std::vector<int32_t> random_tokens(size_t n, uint64_t seed, int32_t vocab);

// Overwrites m's parameters with test values that exercise every path:
// norm weights 1 + U(±0.1), everything else U(±scale) (biases included).
void randomize(SectionModel& m, uint64_t seed, float scale = 0.3f);

// Spans over vectors, for SampleInput and gradient lists.
inline std::span<const float> span_of(const std::vector<float>& v) { return {v.data(), v.size()}; }
// A view of cpu()'s memory copied to the host: how the runtime hands one
// model's outputs (and input gradients) to another, since the engine takes
// host spans (cpu() refuses backend memory there).
std::vector<float> host_of(const RowsView& v);

using Reference = std::map<std::string, std::vector<float>>;

struct OracleCase {
  nlohmann::json json = nlohmann::json::object();  // models, order, samples, loss, out_grads, frozen, train
  std::vector<NamedTensor> weights, inputs;

  // Registers a model (spec in json, current parameters as weights).
  void add_model(SectionModel& m);
  void add_input(const std::string& key, const std::vector<float>& values);
  // Writes the case, runs the oracle; the reference tensors by name.
  Reference run(const std::string& tag);
};

// ‖got − want‖ / ‖want‖ (absolute when want is 0).
double rel_error(const float* got, const std::vector<float>& want);
// BOOST_CHECKs rel_error ≤ tol with the name in the message.
void check_close(const std::string& what, const float* got, size_t n, const Reference& ref, const std::string& key,
                 double tol = 1e-4);
// Every parameter gradient of m against ref["grad.<section>.<tensor>"].
void check_grads(SectionModel& m, const Reference& ref, double tol = 1e-4);

}  // namespace maestro::test
