// The diagnostic format (file:line:col: error: message, the line, a caret
// line under the span) and reporting every error of a file in source order.
#include "sect_test_util.h"

using namespace maestro;
using maestro::test::load_text;
using maestro::test::with;

BOOST_AUTO_TEST_CASE(render_format) {
  auto l = load_text(with("micro_batch = 4;", "micro_bach = 4;"), "models/x.sect");
  BOOST_TEST(l.rendered() ==
             "models/x.sect:6:3: error: unknown key 'micro_bach' in section 'vision'; did you mean 'micro_batch'?\n"
             "  micro_bach = 4;\n"
             "  ^~~~~~~~~~\n");
}

BOOST_AUTO_TEST_CASE(every_error_is_reported_in_source_order) {
  std::string text = with("micro_batch = 4;", "micro_bach = 4;",
                          with("steps = 2;", "steps = 0;", with("vocab: 256", "vocab: 0")));
  auto l = load_text(text);
  BOOST_REQUIRE(l.diags.errors().size() == 3u);
  BOOST_TEST(l.diags.errors()[0].loc.line == 6);
  BOOST_TEST(l.diags.errors()[1].message == "'vocab' must be at least 1, not 0");
  BOOST_TEST(l.diags.errors()[2].message == "'steps' must be at least 1, not 0");
  BOOST_TEST(l.diags.errors()[1].loc.line < l.diags.errors()[2].loc.line);
}

BOOST_AUTO_TEST_CASE(syntax_errors_are_worded) {
  auto l = load_text(with("micro_batch = 4;", "micro_batch = 4"));
  BOOST_REQUIRE(!l.diags.ok());
  BOOST_TEST(l.first() == "expected ';' after the value of 'micro_batch', found '}'");
  BOOST_TEST(l.diags.errors()[0].loc.line == 6);
  BOOST_TEST(l.diags.errors()[0].loc.col == 18);  // right after the value
  auto two = load_text("let a = ;\nlet b = 1\nlet c = 2;");
  BOOST_TEST(two.diags.errors().size() == 2u);  // recovery finds the second one too
}
