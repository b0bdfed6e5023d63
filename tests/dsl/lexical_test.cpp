// Lexing and values: comments, numbers, units, strings and escapes, lets.
#include "sect_test_util.h"

using namespace maestro;
using maestro::test::expect_error;
using maestro::test::kBase;
using maestro::test::load_text;
using maestro::test::must_load;
using maestro::test::with;

BOOST_AUTO_TEST_SUITE(lexical)

BOOST_AUTO_TEST_CASE(comments_of_three_kinds) {
  Program p = must_load("# hash\n/* block\n comment */ // line\n" + with("steps = 2;", "steps = /* inline */ 2; # end"));
  BOOST_TEST(p.train.steps == 2);
}

BOOST_AUTO_TEST_CASE(numbers_with_separators_exponents_and_signs) {
  Program p = must_load(with("steps = 2;", "steps = 1_000_000;", with("lr: 1e-3", "lr: 3.5e-4")));
  BOOST_TEST(p.train.steps == 1000000);
  BOOST_TEST(p.train.optimizer.lr == 3.5e-4);
  Program q = must_load(with("let d_model = 64;", "let d_model = -(-64);"));
  BOOST_TEST(std::get<MlpSpec>(q.find_section("proj")->model.spec).out == 64);
}

BOOST_AUTO_TEST_CASE(integral_floats_count_as_integers) {
  Program p = must_load(with("steps = 2;", "steps = 2.0e1;"));
  BOOST_TEST(p.train.steps == 20);
}

BOOST_AUTO_TEST_CASE(units_are_sizes_and_sizes_are_rejected_where_a_count_goes) {
  expect_error(with("micro_batch = 4;", "micro_batch = 8MiB;"), "'micro_batch' takes a plain number, not a size (8MiB)");
  // Unit arithmetic: powers of 1024 and of 1000.
  expect_error(with("micro_batch = 4;", "micro_batch = 2 * 1KiB;"), "(2 * 1KiB, which is 2048 bytes)");
  expect_error(with("micro_batch = 4;", "micro_batch = 1GB + 1MB;"), "which is 1001000000 bytes");
  expect_error(with("micro_batch = 4;", "micro_batch = 1.5GiB / 1;"), "which is 1610612736 bytes");
  expect_error(with("micro_batch = 4;", "micro_batch = 1TiB / 1;"), "which is 1099511627776 bytes");
  expect_error(with("micro_batch = 4;", "micro_batch = 4kb;"), "unknown unit 'kb' in '4kb'");
}

BOOST_AUTO_TEST_CASE(string_escapes) {
  Program p = must_load(with("section proj {", "section proj {\n  weights = \"a\\\"b\\\\c\\td\";"), "/x/y/t.sect");
  BOOST_TEST(p.find_section("proj")->weights == "/x/y/a\"b\\c\td");
  expect_error(with("section proj {", "section proj {\n  weights = \"a\\qb\";"), "unknown escape '\\q'");
  expect_error(with("section proj {", "section proj {\n  weights = \"open;"), "unterminated string");
}

BOOST_AUTO_TEST_CASE(stray_characters_and_open_comments) {
  expect_error(kBase + "$", "unexpected character '$'");
  expect_error(kBase + "/* open", "unterminated comment");
  expect_error(std::string("let x = 1;\xff\n") + kBase, "not UTF-8");
}

BOOST_AUTO_TEST_CASE(keywords_are_reserved_but_modalities_are_not) {
  expect_error(with("let d_model = 64;", "let auto = 64;"), "'auto' is a reserved word");
  // `text` and `image` are plain words: a let may use them as names.
  must_load(with("let d_model = 64;", "let image = 64;\nlet d_model = image;"));
}

BOOST_AUTO_TEST_CASE(overflow_and_depth_are_errors_not_crashes) {
  expect_error(with("steps = 2;", "steps = 9223372036854775808;"), "number too large");
  expect_error(with("steps = 2;", "steps = 4611686018427387904 * 4;"), "arithmetic overflows");
  expect_error(with("steps = 2;", "steps = " + std::string(300, '(') + "2" + std::string(300, ')') + ";"),
               "nested more than 200 levels");
  expect_error(with("steps = 2;", "steps = " + std::string(300, '-') + "2;"), "nested more than 200 levels");
  std::string sum = "1";
  for (int i = 0; i < 20000; ++i) sum += " + 1";  // long but flat: fine
  Program p = must_load(with("steps = 2;", "steps = " + sum + ";"));
  BOOST_TEST(p.train.steps == 20001);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(lets)

BOOST_AUTO_TEST_CASE(integer_arithmetic_stays_integer) {
  Program p = must_load(with("let d_model = 64;", "let d_model = (w + 4) * 2 - 8 / 2;\nlet w = 30;"));
  BOOST_TEST(std::get<MlpSpec>(p.find_section("proj")->model.spec).out == 64);
}

BOOST_AUTO_TEST_CASE(lets_may_be_used_before_their_definition) {
  Program p = must_load(with("let d_model = 64;", "let d_model = half * 2;\nlet half = 32;"));
  BOOST_TEST(std::get<TransformerSpec>(p.find_section("llm")->model.spec).hidden == 64);
}

BOOST_AUTO_TEST_CASE(division_to_a_fraction_is_an_error_where_an_integer_goes) {
  expect_error(with("ffn: 128,", "ffn: d_model / 3,"), "'ffn' must be a whole number, but d_model / 3 is 21.3333");
  Program p = must_load(with("ffn: 128,", "ffn: d_model / 2 * 4,"));
  BOOST_TEST(std::get<TransformerSpec>(p.find_section("llm")->model.spec).ffn == 128);
}

BOOST_AUTO_TEST_CASE(cycles_unknown_names_and_duplicates) {
  expect_error(with("let d_model = 64;", "let d_model = a;\nlet a = b;\nlet b = d_model;"), "depends on itself");
  expect_error(with("let d_model = 64;", "let d_model = widht;\nlet width = 64;"), "unknown name 'widht'; did you mean 'width'?");
  expect_error(with("let d_model = 64;", "let d_model = 64;\nlet d_model = 32;"), "'d_model' is already defined at line 1");
  expect_error(with("let d_model = 64;", "let d_model = [1];"), "must hold a number, a string or true/false");
}

BOOST_AUTO_TEST_CASE(string_and_bool_lets) {
  Program p = must_load(with("let d_model = 64;", "let d_model = 64;\nlet w = \"w.safetensors\";\nlet rc = true;",
                             with("section proj {", "section proj {\n  weights = w;\n  recompute = rc;")),
                        "/m/t.sect");
  BOOST_TEST(p.find_section("proj")->weights == "/m/w.safetensors");
  BOOST_TEST(p.find_section("proj")->recompute);
}

BOOST_AUTO_TEST_SUITE_END()
