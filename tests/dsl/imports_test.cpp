// Imports: relative to the importing file, read once, cycles and missing
// files reported at the import statement, definitions joining the program.
#include "sect_test_util.h"

using namespace maestro;
using maestro::test::kBase;
using maestro::test::TempDir;
using maestro::test::with;

namespace {

struct Result {
  std::optional<Program> program;
  Diagnostics diags;
};

Result load(const std::string& path) {
  Result r;
  r.program = load_program(path, r.diags);
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(imports)

BOOST_AUTO_TEST_CASE(definitions_join_and_paths_are_relative_to_the_importer) {
  TempDir dir;
  dir.write("lib/models.sect", "import \"widths.sect\";\nmodel enc = vit(layers: 1, hidden: w, heads: 2, ffn: 64, patch: 4, image: 8);\n");
  dir.write("lib/widths.sect", "let w = 32;\n");
  std::string main = dir.write("main.sect", "import \"lib/models.sect\";\nimport \"lib/widths.sect\";\n" +
                                                with("vit(layers: 1, hidden: 32, heads: 2, ffn: 64, patch: 4, image: 8)", "enc"));
  Result r = load(main);
  BOOST_REQUIRE_MESSAGE(r.program.has_value(), (r.diags.errors().empty() ? std::string() : r.diags.errors()[0].message));
  BOOST_TEST(r.program->sources.size() == 3u);  // widths.sect read once
  BOOST_TEST(r.program->find_section("vision")->model.name == "enc");
}

BOOST_AUTO_TEST_CASE(data_and_train_may_live_in_an_imported_file) {
  TempDir dir;
  size_t data_at = kBase.find("data {");
  dir.write("run.sect", kBase.substr(data_at));
  std::string main = dir.write("main.sect", "import \"run.sect\";\n" + kBase.substr(0, data_at));
  Result r = load(main);
  BOOST_TEST(r.program.has_value());
}

BOOST_AUTO_TEST_CASE(missing_file_is_reported_at_the_import) {
  TempDir dir;
  std::string main = dir.write("main.sect", "\nimport \"nope.sect\";\n" + kBase);
  Result r = load(main);
  BOOST_REQUIRE(!r.diags.errors().empty());
  BOOST_TEST(r.diags.errors()[0].loc.line == 2);
  BOOST_TEST(r.diags.errors()[0].loc.col == 8);
  BOOST_TEST(r.diags.errors()[0].message.find("cannot read imported file \"nope.sect\"") == 0u);
}

BOOST_AUTO_TEST_CASE(cycles_name_the_chain) {
  TempDir dir;
  dir.write("a.sect", "import \"b.sect\";\n");
  dir.write("b.sect", "import \"a.sect\";\n");
  std::string main = dir.write("main.sect", "import \"a.sect\";\n" + kBase);
  Result r = load(main);
  BOOST_REQUIRE(!r.diags.errors().empty());
  BOOST_TEST(r.diags.errors()[0].message == "import cycle: a.sect -> b.sect -> a.sect");
  BOOST_TEST(r.diags.errors()[0].loc.file == (dir.path / "a.sect").string());
}

BOOST_AUTO_TEST_CASE(imported_file_paths_keep_the_users_form) {
  TempDir dir;
  dir.write("sub/bad.sect", "let x = ;\n");
  std::string main = dir.write("main.sect", "import \"sub/bad.sect\";\n" + kBase);
  Result r = load(main);
  BOOST_REQUIRE(!r.diags.errors().empty());
  BOOST_TEST(r.diags.errors()[0].loc.file == (dir.path / "sub/bad.sect").string());
  BOOST_TEST(r.diags.errors()[0].loc.line == 1);
}

BOOST_AUTO_TEST_CASE(a_missing_main_file_is_an_error) {
  Result r = load("/nonexistent/dir/main.sect");
  BOOST_TEST(!r.program.has_value());
  BOOST_REQUIRE(r.diags.errors().size() == 1u);
  BOOST_TEST(r.diags.errors()[0].message.find("cannot read") == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
