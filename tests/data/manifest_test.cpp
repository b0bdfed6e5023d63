// files(manifest): the metadata of image, video, audio and text lines is
// read at load; contents decode to the shapes the sections read; every bad
// line is refused naming manifest:line and the file, or skipped and counted.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "data/manifest.h"

namespace maestro {
namespace {

namespace fs = std::filesystem;

// A folder with the fixtures copied in and a manifest of the given lines.
struct DataDir {
  fs::path dir;
  explicit DataDir(const std::string& name) : dir(fs::temp_directory_path() / ("maestro_manifest_" + name)) {
    fs::remove_all(dir);
    fs::create_directories(dir / "media");
    for (const auto& e : fs::directory_iterator("tests/data/fixtures")) fs::copy(e.path(), dir / "media");
  }
  ~DataDir() { fs::remove_all(dir); }
  std::string write(const std::string& lines) const {
    std::ofstream(dir / "train.jsonl") << lines;
    return (dir / "train.jsonl").string();
  }
};

ManifestOptions options(bool skip = false) {
  ManifestOptions o;
  o.vocab = 256;
  o.vocab_section = "llm";
  o.audio_frames = 50;
  o.skip_bad = skip;
  return o;
}

std::string error_of(const std::string& path, const ManifestOptions& o = options()) {
  try {
    Manifest::load(path, o);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(manifest)

BOOST_AUTO_TEST_CASE(metadata_of_every_modality_is_read_at_load) {
  DataDir d("metadata");
  const std::string path = d.write(
      "{\"text\": \"a red square\", \"images\": [\"media/rgb_40x30.png\", \"media/photo_64x48.jpg\"]}\n"
      "\n"
      "{\"tokens\": [1, 2, 3], \"audio\": \"media/tone_s16.wav\"}\n"
      "{\"text\": \"frames\", \"video\": [\"media/rgb_9x7.png\", \"media/grey_37x29.png\", \"media/rgb_16x16.png\"]}\n"
      "{\"text\": \"just text\"}\n");
  const Manifest m = Manifest::load(path, options());
  BOOST_TEST(m.size() == 4);
  BOOST_TEST(m.skipped().empty());
  const Batch b = m.batch(1, 3);  // samples 3, 4, 5 -> lines 4, 1, 3 (position id % 4)
  BOOST_TEST(b.samples[0].text_tokens == 9);
  BOOST_TEST(b.samples[0].images == 0);
  BOOST_TEST(b.samples[1].images == 2);
  BOOST_TEST(b.samples[1].modalities.has(Modality::Image));
  BOOST_TEST(!b.samples[1].modalities.has(Modality::Video));
  BOOST_TEST(b.samples[2].audio_frames == 50);
  BOOST_TEST(b.samples[2].modalities.has(Modality::Audio));
  const Sample video = m.batch(2, 1).samples[0];  // line 3 (the 4th line of the file)
  BOOST_TEST(video.images == 3);
  BOOST_TEST(video.modalities.has(Modality::Video));
  BOOST_TEST(video.modalities.has(Modality::Image));
  BOOST_TEST(m.pixels(0, 16).size() == 2u * 3 * 16 * 16);
  BOOST_TEST(m.pixels(2, 8).size() == 3u * 3 * 8 * 8);
  BOOST_TEST(m.mel(1, 16).size() == 50u * 16);
  BOOST_TEST(m.mel(0, 16).empty());
}

BOOST_AUTO_TEST_CASE(every_bad_line_names_manifest_line_and_file) {
  DataDir d("errors");
  const std::string head = "{\"text\": \"ok\"}\n";
  auto check = [&](const std::string& line, const std::string& expect) {
    const std::string path = d.write(head + line + "\n");
    const std::string e = error_of(path);
    BOOST_TEST_INFO(line << " -> " << e);
    BOOST_TEST(e.find(path + ":2: ") == 0u);
    BOOST_TEST(e.find(expect) != std::string::npos);
  };
  const std::string media = (d.dir / "media").string();
  check("{\"text\": \"xy\", \"images\": [\"media/nope.png\"]}", media + "/nope.png: no such file");
  check("{\"text\": \"xy\", \"images\": [\"media/not_an_image.png\"]}", media + "/not_an_image.png: cannot read the image header");
  check("{\"text\": \"xy\", \"images\": [\"media/bitmap.bmp\"]}", media + "/bitmap.bmp: not a PNG or JPEG");
  check("{\"text\": \"xy\", \"audio\": \"media/tone_44k.wav\"}", media + "/tone_44k.wav: 44100 Hz with 1 channel(s)");
  check("{\"text\": \"xy\", \"audio\": \"media/rgb_9x7.png\"}", media + "/rgb_9x7.png: not a RIFF/WAVE file");
  check("{\"text\": \"xy\", \"video\": []}", "\"video\" must be a non-empty list");
  check("{\"tokens\": [1, 300]}", "token id 300 is outside the vocabulary of section 'llm' (256)");
  check("{\"text\": \"xy\"", "not a JSON object");
  check("{\"text\": \"xy\", \"images\": [\"../escape.png\"]}", "\"../escape.png\" is outside the manifest's folder");
  check("{\"text\": \"xy\", \"images\": [\"media/../../x.png\"]}", "is outside the manifest's folder");
  check("{\"text\": \"xy\", \"pictures\": []}", "unknown key \"pictures\"");
  check("{\"text\": \"xy\", \"audio\": \"/dev/zero\"}", "/dev/zero: not a regular file");
  check("{\"text\": \"xy\", \"images\": [\"media\"]}", media + ": not a regular file");
}

BOOST_AUTO_TEST_CASE(an_absolute_path_may_point_outside) {
  DataDir d("absolute");
  const std::string abs = fs::absolute("tests/data/fixtures/rgb_9x7.png").string();
  const Manifest m = Manifest::load(d.write("{\"text\": \"xy\", \"images\": [\"" + abs + "\"]}\n"), options());
  BOOST_TEST(m.batch(0, 1).samples[0].images == 1);
}

BOOST_AUTO_TEST_CASE(skip_leaves_bad_lines_out_and_counts_them) {
  DataDir d("skip");
  const std::string path = d.write(
      "{\"text\": \"ok one\"}\n"
      "{\"text\": \"xy\", \"images\": [\"media/nope.png\"]}\n"
      "not json\n"
      "{\"text\": \"ok two\", \"audio\": \"media/tone_u8.wav\"}\n"
      "{\"tokens\": [999, 1]}\n");
  const Manifest m = Manifest::load(path, options(true));
  BOOST_TEST(m.size() == 2);
  BOOST_REQUIRE(m.skipped().size() == 3u);
  BOOST_TEST(m.skipped()[0].find(path + ":2: ") == 0u);
  BOOST_TEST(m.skipped()[1].find(path + ":3: not a JSON object") == 0u);
  BOOST_TEST(m.skipped()[2].find(path + ":5: token id 999") == 0u);
  BOOST_TEST(m.batch(0, 2).samples[1].audio_frames == 50);
  // Every line bad: nothing left to train on.
  const std::string all_bad = d.write("nope\n{\"tokens\": [999, 1]}\n");
  BOOST_TEST(error_of(all_bad, options(true)) == all_bad + ": the manifest holds no samples (2 skipped)");
}

BOOST_AUTO_TEST_CASE(a_corrupt_image_body_fails_at_decode_naming_the_line) {
  DataDir d("body");
  {  // a PNG whose header is intact but whose data is cut
    std::ifstream in("tests/data/fixtures/rgb_40x30.png", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(d.dir / "media" / "cut.png", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  const std::string path = d.write("{\"text\": \"xy\", \"images\": [\"media/cut.png\"]}\n");
  const Manifest m = Manifest::load(path, options());
  try {
    m.pixels(0, 16);
    BOOST_FAIL("decoded a cut PNG");
  } catch (const DataError& e) {
    BOOST_TEST(std::string(e.what()).find(path + ":1: " + (d.dir / "media" / "cut.png").string() + ": cannot decode") == 0u);
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace maestro
