// Runs the front end over every file of the invalid-input corpus
// (tests/invalid/NNN_name.sect) and checks its first diagnostic against the
// file's own first line, `// expect: LINE:COL: MESSAGE`.
#include <algorithm>
#include <regex>
#include <vector>

#include "sect_test_util.h"

namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(invalid_corpus) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator("tests/invalid"))
    if (entry.is_regular_file() && entry.path().extension() == ".sect") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  BOOST_TEST(files.size() >= 70u);
  const std::regex expect_line(R"(^// expect: (\d+):(\d+): (.*)$)");
  for (const fs::path& path : files) {
    BOOST_TEST_CONTEXT(path.string()) {
      std::ifstream in(path);
      std::string first;
      std::getline(in, first);
      std::smatch m;
      BOOST_REQUIRE(std::regex_match(first, m, expect_line));
      maestro::Diagnostics diags;
      auto program = maestro::load_program(path.string(), diags);
      BOOST_TEST(!program.has_value());
      BOOST_REQUIRE(!diags.errors().empty());
      const maestro::Diagnostic& d = diags.errors()[0];
      BOOST_TEST(d.loc.file == path.string());
      BOOST_TEST(d.loc.line == std::stoi(m[1]));
      BOOST_TEST(d.loc.col == std::stoi(m[2]));
      BOOST_TEST(d.message == m[3].str());
    }
  }
}
