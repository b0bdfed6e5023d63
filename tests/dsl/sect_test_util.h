// Helpers shared by the front-end tests: load source text, get the first
// error's message, and a small valid program to mutate one line at a time.
#pragma once

#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <unistd.h>

#include "dsl/frontend.h"

namespace maestro::test {

// A valid two-encoder-free program: a vit, a projector and a transformer.
inline const std::string kBase = R"(let d_model = 64;

section vision {
  model    = vit(layers: 1, hidden: 32, heads: 2, ffn: 64, patch: 4, image: 8);
  consumes = [image];
  micro_batch = 4;
}

section proj {
  model = mlp(in: 32, out: d_model);
}

section llm {
  model    = transformer(layers: 1, hidden: d_model, heads: 4, ffn: 128, vocab: 256);
  consumes = [text];
  parallel { tp = 1; dp = auto; }
  loss     = cross_entropy;
}

flow vision -> proj -> llm;

data {
  source = synthetic(seed: 7);
  mix { image_text = 0.5; text = 0.5; }
  text_tokens = lognormal(median: 32, sigma: 0.5, max: 128);
  images      = 1;
}

train {
  global_batch = 8;
  steps = 2;
  optimizer = adamw(lr: 1e-3);
  precision = fp32;
}
)";

// kBase with the first occurrence of `from` replaced by `to` (which must exist).
inline std::string with(const std::string& from, const std::string& to, std::string base = kBase) {
  size_t at = base.find(from);
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, "test program lacks: " + from);
  return base.replace(at, from.size(), to);
}

struct Loaded {
  std::optional<Program> program;
  Diagnostics diags;
  std::string first() const { return diags.errors().empty() ? "" : diags.errors()[0].message; }
  std::string rendered() const {
    std::ostringstream out;
    diags.render(out);
    return out.str();
  }
};

inline Loaded load_text(const std::string& text, const std::string& path = "test.sect") {
  Loaded l;
  l.program = load_program_text(text, path, l.diags);
  return l;
}

// The program must load; fails the test with the rendered errors otherwise.
inline Program must_load(const std::string& text, const std::string& path = "test.sect") {
  Loaded l = load_text(text, path);
  BOOST_REQUIRE_MESSAGE(l.program.has_value(), "unexpected errors:\n" + l.rendered());
  BOOST_REQUIRE(l.diags.ok());
  return *l.program;
}

// The first error must contain `expected`.
inline void expect_error(const std::string& text, const std::string& expected) {
  Loaded l = load_text(text);
  BOOST_CHECK(!l.program.has_value());
  BOOST_CHECK_MESSAGE(l.first().find(expected) != std::string::npos,
                      "expected an error containing \"" + expected + "\", got:\n" + l.rendered());
}

// A fresh folder under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("sect_test_" + std::to_string(reinterpret_cast<uintptr_t>(this)) + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::filesystem::path p = path / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
};

}  // namespace maestro::test
