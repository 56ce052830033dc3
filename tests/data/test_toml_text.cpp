// TOML text: non-ASCII characters are kept inside strings and comments, and anywhere else
// (between tokens, in a key, after a broken value where toml++ looks ahead along the line)
// they are errors naming line and column, never undefined behaviour in the parser: each
// hostile row below reached __builtin_unreachable() in Debian's toml++ before (libFuzzer
// found the broken-value row). The run config and the planner's spec files read TOML
// through the same function.
#include <gtest/gtest.h>

#include <string>

#include "loom/data/toml_text.hpp"
#include "loom/error.hpp"
#include "loom/plan/spec_files.hpp"
#include "loom/train/config.hpp"
#include "test_util.hpp"

namespace loom::data {
namespace {

using loom::testing::error_of;

std::string error_parsing(const std::string& text) {
  return error_of([&] { parse_toml(text, "run.toml"); });
}

const std::string kOutside =
    ": invalid TOML: a non-ASCII character outside a quoted string or comment (keys and values other than strings are ASCII)";

TEST(TomlText, NonAsciiInStringsAndCommentsIsKept) {
  const toml::table t = parse_toml(
      "# r\xC3\xA9sum\xC3\xA9 \xCF\x9A\n"
      "basic = \"caf\xC3\xA9 \xCF\x9A \xE3\x80\x80\"  # \xEF\xBB\xBF trailing\n"
      "literal = 'na\xC3\xAFve'\n"
      "multi = \"\"\"\n\xC2\xA1\n\"\"\"\n"
      "multi_literal = '''\xEF\xB0\x98'''\n"
      "n = 3\n",
      "run.toml");
  EXPECT_EQ(t["basic"].value<std::string>(), "caf\xC3\xA9 \xCF\x9A \xE3\x80\x80");
  EXPECT_EQ(t["literal"].value<std::string>(), "na\xC3\xAFve");
  EXPECT_EQ(t["multi"].value<std::string>(), "\xC2\xA1\n");
  EXPECT_EQ(t["multi_literal"].value<std::string>(), "\xEF\xB0\x98");
  EXPECT_EQ(t["n"].value<int64_t>(), 3);
  // A byte-order mark is skipped, as toml++ does.
  EXPECT_EQ(parse_toml("\xEF\xBB\xBFn = 1\n", "run.toml")["n"].value<int64_t>(), 1);
}

TEST(TomlText, NonAsciiOutsideStringsIsAnErrorNamingLineAndColumn) {
  struct Row {
    std::string text, error;
  };
  const Row rows[] = {
      {"dp = 2\xC3\xA9\n", "run.toml:1:7" + kOutside},                        // after a value (U+00E9)
      {"\xC3\xA9" "a = 1\n", "run.toml:1:1" + kOutside},                       // a key
      {"a = 1 \xE3\x80\x80\n", "run.toml:1:7" + kOutside},                      // ideographic space
      {"a = [1,\n \xC2\xA0 2]\n", "run.toml:2:2" + kOutside},                   // no-break space in an array
      {"x = '''\xCF\x9A\n'''\nb = 2 \xCF\x9A\n", "run.toml:3:7" + kOutside},   // after a string that held one
      {"x = \"\xEF\xB0\x98\" \xEF\xB0\x98\n", "run.toml:1:9" + kOutside},      // U+FC18, past a string
  };
  for (const Row& r : rows) EXPECT_EQ(error_parsing(r.text), r.error) << r.text;

  // The fuzzer's input: a broken value, then what looks like a string opening, then U+03DA;
  // toml++ reads the value's rest of line. The error is the value's, never a crash.
  const std::string fuzzed("[parallel]\ndp =-e[=\"\"\"|a\xCF\x9A\0\0\0\0\0\0\0\x01 1\n", 38);
  EXPECT_EQ(error_parsing(fuzzed).rfind("run.toml:2:", 0), 0u) << error_parsing(fuzzed);
  EXPECT_NE(error_parsing(fuzzed).find("invalid TOML"), std::string::npos);
}

TEST(TomlText, TextThatIsNotUtf8IsAnError) {
  // A stray byte, an overlong '/', a surrogate, a truncated sequence, a code point past U+10FFFF.
  for (const std::string bad : {"a = \"\xFF\"\n", "a = \"\xC0\xAF\"\n", "a = \"\xED\xA0\x80\"\n", "a = \"\xE2\x82\"\n",
                                "a = \"\xF4\x90\x80\x80\"\n"})
    EXPECT_EQ(error_parsing(bad), "run.toml:1:6: invalid TOML: not UTF-8 (a TOML file is UTF-8 text)") << bad;
}

TEST(TomlText, ParserErrorsKeepTheirPosition) {
  // A missing value on line 2, and a string with a non-ASCII character on line 3: the error
  // is the parser's own, at line 2, whether or not the text holds one.
  for (const std::string text : {"a = 1\nb = \n", "a = 1\nb = \nc = \"\xC3\xA9\"\n"}) {
    const std::string e = error_parsing(text);
    EXPECT_EQ(e.rfind("run.toml:2:", 0), 0u) << e;
    EXPECT_NE(e.find(": invalid TOML: "), std::string::npos) << e;
    EXPECT_EQ(e.find("non-ASCII"), std::string::npos) << e;
  }
}

TEST(TomlText, RunConfigAndSpecFilesReadThroughIt) {
  train::TrainConfig config;
  EXPECT_EQ(error_of([&] { train::apply_toml_string(config, "[parallel]\ndp = 2\xC3\xA9\n", "run.toml"); }),
            "run.toml:2:7" + kOutside);
  EXPECT_EQ(error_of([&] { plan::cluster_from_toml("gpus_per_node = 8\xC2\xA0\n", "cluster.toml"); }),
            "cluster.toml:1:18" + kOutside);
  EXPECT_EQ(error_of([&] { plan::model_from_toml("\xCF\x9A = 1\n", "model.toml"); }), "model.toml:1:1" + kOutside);
}

}  // namespace
}  // namespace loom::data
