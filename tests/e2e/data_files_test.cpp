// files(manifest) end to end (label "demo_data", run as e2e.data_files under
// tests/data/require_pil.sh since scripts/make-demo-data needs python3-pil):
// models/tiny_mllm_files.sect trains from images, clips and frames with
// falling loss; every bad input exits 2 naming manifest:line and the file;
// on_bad_sample = "skip" skips, counts and reports.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run_process.h"

namespace maestro::e2e {
namespace {

namespace fs = std::filesystem;

std::string last_json_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1);
}

// The demo data, written once per test run by the real script.
const fs::path& demo_data() {
  static const fs::path dir = [] {
    const ProcessResult r = run_process({"scripts/make-demo-data"});
    BOOST_REQUIRE_MESSAGE(r.status == 0, r.err);
    return fs::absolute("models/demo-data");
  }();
  return dir;
}

// tiny_mllm_files.sect with its data block replaced, in a temp folder.
std::string model_with_data(const std::string& name, const std::string& data_block) {
  std::ifstream in("models/tiny_mllm_files.sect");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const size_t begin = text.find("data {"), end = text.find("}\n", begin) + 2;
  text.replace(begin, end - begin, data_block);
  const fs::path path = fs::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

// A manifest in the demo folder (relative paths resolve there) with `lines`.
std::string manifest(const std::string& name, const std::string& lines) {
  const fs::path path = demo_data() / name;
  std::ofstream(path) << lines;
  return path.string();
}

std::string files_block(const std::string& manifest_path, const std::string& on_bad) {
  return "data {\n  source = files(manifest: \"" + manifest_path + "\");\n  on_bad_sample = \"" + on_bad + "\";\n}\n";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(data_files, *boost::unit_test::label("demo_data"))

BOOST_AUTO_TEST_CASE(tiny_mllm_files_trains_below_what_text_alone_allows) {
  demo_data();
  const ProcessResult r = maestro_run({"models/tiny_mllm_files.sect", "--json", "--quiet"});
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.err);
  const auto j = nlohmann::json::parse(last_json_line(r.out));
  const std::vector<double> losses = j["losses"];
  BOOST_TEST(j["skipped_samples"] == 0);
  // The same captions without their media: the colour, shape, pitch and
  // direction words cannot be predicted, so the loss stays above a floor.
  std::ifstream in(demo_data() / "train.jsonl");
  std::string text_only, line;
  while (std::getline(in, line))
    text_only += nlohmann::json{{"text", nlohmann::json::parse(line)["text"]}}.dump() + "\n";
  const std::string m = manifest("text_only.jsonl", text_only);
  const ProcessResult t =
      maestro_run({model_with_data("maestro_e2e_text_only.sect", files_block(m, "error")), "--json", "--quiet"});
  BOOST_REQUIRE_MESSAGE(t.status == 0, t.err);
  const std::vector<double> text_losses = nlohmann::json::parse(last_json_line(t.out))["losses"];
  auto tail_mean = [](const std::vector<double>& l) {
    double sum = 0;
    for (size_t i = l.size() - 10; i < l.size(); ++i) sum += l[i];
    return sum / 10;
  };
  BOOST_TEST_INFO("loss " << losses.front() << " -> " << tail_mean(losses) << ", text alone -> "
                          << tail_mean(text_losses));
  BOOST_TEST(losses.front() > 4.5);  // about ln(256) at random init
  BOOST_TEST(tail_mean(losses) < 0.6 * tail_mean(text_losses));
}

BOOST_AUTO_TEST_CASE(every_bad_input_exits_2_naming_the_line_and_the_file) {
  const std::string dir = demo_data().string();
  struct Case {
    std::string line, expect;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"ab\", \"images\": [\"img/none.png\"]}", dir + "/img/none.png: no such file"},
      {"{\"text\": \"ab\", \"images\": [\"train.jsonl\"]}", dir + "/train.jsonl: not a PNG or JPEG file"},
      {"{\"text\": \"ab\", \"audio\": \"img/000.png\"}", dir + "/img/000.png: not a RIFF/WAVE file"},
      {"{\"text\": \"ab\", \"audio\": \"none.wav\"}", dir + "/none.wav: no such file"},
      {"{\"tokens\": [1, 256]}", "token id 256 is outside the vocabulary of section 'llm' (256)"},
      {"{\"text\": \"ab\",", "not a JSON object"},
      {"{\"text\": \"ab\", \"video\": [\"../tiny_mllm.sect\"]}", "\"../tiny_mllm.sect\" is outside the manifest's folder"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string m = manifest("bad.jsonl", "{\"text\": \"fine\"}\n" + cases[i].line + "\n");
    const std::string model = model_with_data("maestro_e2e_bad_data.sect", files_block(m, "error"));
    const ProcessResult r = maestro_run({model, "--steps", "1"});
    BOOST_TEST_INFO(cases[i].line << " -> " << r.err);
    BOOST_TEST(r.status == 2);
    BOOST_TEST(r.first_err_line().find("maestro-run: error: " + m + ":2: ") == 0u);  // one error format (docs/cli.md)
    BOOST_TEST(r.err.find(cases[i].expect) != std::string::npos);
  }
  // A WAV at another rate is refused naming its rate and channels.
  {
    std::ifstream in("tests/data/fixtures/tone_44k.wav", std::ios::binary);
    std::ofstream(demo_data() / "tone_44k.wav", std::ios::binary) << in.rdbuf();
  }
  const std::string m = manifest("bad.jsonl", "{\"text\": \"ab\", \"audio\": \"tone_44k.wav\"}\n");
  const ProcessResult r = maestro_run({model_with_data("maestro_e2e_bad_data.sect", files_block(m, "error")), "--steps", "1"});
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.first_err_line().find(m + ":1: " + dir + "/tone_44k.wav: 44100 Hz with 1 channel(s); only 16000 Hz mono") !=
             std::string::npos, r.err);
}

// A file whose header reads well but whose body is corrupt is found only
// when the loader decodes it, after training started (here in step 1): still
// bad input, exit 2, naming manifest:line and the file.
BOOST_AUTO_TEST_CASE(a_corrupt_body_found_mid_run_exits_2) {
  const std::string dir = demo_data().string();
  {
    std::ifstream in(demo_data() / "img/000.png", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(demo_data() / "truncated.png", std::ios::binary) << bytes.substr(0, 64);  // signature + IHDR only
  }
  std::string lines;
  for (int i = 0; i < 32; ++i) lines += "{\"text\": \"fine\"}\n";  // step 0 (global_batch 32)
  lines += "{\"text\": \"ab\", \"images\": [\"truncated.png\"]}\n";  // line 33: step 1
  const std::string m = manifest("late.jsonl", lines);
  const ProcessResult r = maestro_run({model_with_data("maestro_e2e_late_data.sect", files_block(m, "error")), "--steps", "2"});
  BOOST_TEST(r.status == 2, r.err);
  BOOST_TEST(r.err.find(m + ":33: " + dir + "/truncated.png") != std::string::npos, r.err);
}

BOOST_AUTO_TEST_CASE(skip_skips_counts_and_reports) {
  const std::string m = manifest("skip.jsonl",
                                 "{\"text\": \"a red disc.\", \"images\": [\"img/000.png\"]}\n"
                                 "{\"text\": \"ab\", \"images\": [\"img/none.png\"]}\n"
                                 "{\"text\": \"a tone.\", \"audio\": \"audio/000.wav\"}\n"
                                 "not json\n");
  const std::string model = model_with_data("maestro_e2e_skip_data.sect", files_block(m, "skip"));
  ProcessResult r = maestro_run({model, "--steps", "2", "--json"});
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.err);
  BOOST_TEST(r.out.find("data  skipped 2 bad manifest line(s), the first: " + m + ":2: ") != std::string::npos, r.out);
  BOOST_TEST(nlohmann::json::parse(last_json_line(r.out))["skipped_samples"] == 2);
  r = maestro_run({model_with_data("maestro_e2e_skip_data.sect", files_block(m, "error")), "--steps", "2"});
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.first_err_line().find(m + ":2: ") != std::string::npos, r.err);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace maestro::e2e
