// GPT-2's byte-level BPE: the pre-split and merges on hand-checked cases, round trips of any
// text (random code points, emoji, white-space runs, invalid UTF-8), agreement with a Python
// reference written from GPT-2's algorithm (tests/data/gpt2_bpe_reference.py: it learns up to
// 300 merges (155 on these texts), writes them in GPT-2's file layout and encodes the same texts), and malformed files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "loom/data/gpt2_tokenizer.hpp"
#include "loom/data/tokenizer.hpp"
#include "loom/error.hpp"
#include "test_util.hpp"

namespace loom::data {
namespace {

namespace fs = std::filesystem;

std::string u(char32_t c) { return utf8_encode({c}); }

// The 256 byte tokens in GPT-2's order (printable bytes first), then the merges' results.
std::vector<std::string> byte_vocab() {
  std::vector<std::string> v;
  std::vector<int> order;
  for (int b = 0; b < 256; ++b)
    if (gpt2_byte_to_unicode(static_cast<uint8_t>(b)) < 256) order.push_back(b);
  for (int b = 0; b < 256; ++b)
    if (gpt2_byte_to_unicode(static_cast<uint8_t>(b)) >= 256) order.push_back(b);
  for (int b : order) v.push_back(u(gpt2_byte_to_unicode(static_cast<uint8_t>(b))));
  return v;
}

const std::vector<std::string> kHandMerges = {"h e", "l l", "ll o", "Ġ w", "Ġw o", "r l", "Ġwo rl", "he llo", "t h"};

Gpt2Tokenizer hand_tokenizer() {
  std::vector<std::string> vocab = byte_vocab();
  for (const std::string& m : kHandMerges) vocab.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
  vocab.push_back("<|endoftext|>");
  return Gpt2Tokenizer(vocab, kHandMerges);
}

int32_t id_of(const Gpt2Tokenizer& tok, const std::string& token) {
  const std::vector<std::string> v = byte_vocab();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] == token) return static_cast<int32_t>(i);
  for (size_t i = 0; i < kHandMerges.size(); ++i) {
    const std::string& m = kHandMerges[i];
    if (m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1) == token) return static_cast<int32_t>(256 + i);
  }
  ADD_FAILURE() << "no token " << token << " (vocabulary " << tok.vocab_size() << ")";
  return -1;
}

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : gpt2_pre_split(text)) out.emplace_back(p);
  return out;
}

TEST(Gpt2Tokenizer, ByteTableIsGpt2s) {
  EXPECT_EQ(gpt2_byte_to_unicode('!'), U'!');
  EXPECT_EQ(gpt2_byte_to_unicode(' '), U'Ġ');    // 256 + 32: the 33rd non-printable byte
  EXPECT_EQ(gpt2_byte_to_unicode('\n'), U'Ċ');   // 256 + 10
  EXPECT_EQ(gpt2_byte_to_unicode(0), char32_t{256});
  EXPECT_EQ(gpt2_byte_to_unicode(0xAD), char32_t{323});  // soft hyphen, the last non-printable
  EXPECT_EQ(gpt2_byte_to_unicode(0xFF), U'ÿ');
}

TEST(Gpt2Tokenizer, PreSplitsAsGpt2sPattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("I'm  here!!\n\n"), (V{"I", "'m", " ", " here", "!!", "\n\n"}));
  EXPECT_EQ(split("abc123 456 x\u00b2"), (V{"abc", "123", " 456", " x", "\u00b2"}));
  EXPECT_EQ(split("you'll we're 'tis"), (V{"you", "'ll", " we", "'re", " '", "tis"}));
  EXPECT_EQ(split("a\n\n\tb   "), (V{"a", "\n\n", "\t", "b", "   "}));
  EXPECT_EQ(split(" caf\u00e9 \U0001F680\U0001F680"), (V{" caf\u00e9", " \U0001F680\U0001F680"}));
  EXPECT_EQ(split(""), V{});
}

TEST(Gpt2Tokenizer, MergesByRankAsWorkedByHand) {
  const Gpt2Tokenizer tok = hand_tokenizer();
  // "hello": h e l l o -> (he) l l o -> he (ll) o -> he (llo) -> (hello).
  // " world": Ġ w o r l d -> (Ġw) o r l d -> (Ġwo) r l d -> Ġwo (rl) d -> (Ġworl) d.
  EXPECT_EQ(tok.encode("hello world"),
            (std::vector<int32_t>{id_of(tok, "hello"), id_of(tok, "Ġworl"), id_of(tok, "d")}));
  // "the": "h e" (rank 0) beats "t h" (rank 8), and no merge joins t with he.
  EXPECT_EQ(tok.encode("the"), (std::vector<int32_t>{id_of(tok, "t"), id_of(tok, "he")}));
  // "thll": t h l l -> "l l" (rank 1) first, then "t h".
  EXPECT_EQ(tok.encode("thll"), (std::vector<int32_t>{id_of(tok, "th"), id_of(tok, "ll")}));
  EXPECT_EQ(tok.decode({static_cast<int32_t>(tok.vocab_size() - 1)}), "<|endoftext|>");
  EXPECT_EQ(tok.encode("<|endoftext|>").size(), 13u);  // plain text: "<|", "endoftext", "|>", no merge applies
}

TEST(Gpt2Tokenizer, RoundTripsAnyText) {
  const Gpt2Tokenizer tok = hand_tokenizer();
  std::mt19937_64 rng(7);
  const std::vector<char32_t> pool = {U'a', U'z', U'Q', U' ', U' ', U'\n', U'\t', U'\'', U's', U'1', U'9', U'\u00a0',
                                      U'\u2028', U'\u00e9', U'\u6771', U'\U0001F680', U'\U0001F468', U'\u200d',
                                      U'\u0663', U'!', U'.', U'\u0301'};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<char32_t> cps;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      // Half from the pool (runs of spaces, emoji, contractions), half any scalar value.
      char32_t c = rng() % 2 ? pool[rng() % pool.size()] : static_cast<char32_t>(rng() % 0x110000);
      if (c >= 0xD800 && c <= 0xDFFF) c = U'x';
      cps.push_back(c);
    }
    const std::string text = utf8_encode(cps);
    EXPECT_EQ(tok.decode(tok.encode(text)), text) << "trial " << trial;
    std::string bytes;  // arbitrary bytes, mostly invalid UTF-8
    for (int i = 0; i < n; ++i) bytes += static_cast<char>(rng() % 256);
    EXPECT_EQ(tok.decode(tok.encode(bytes)), bytes) << "trial " << trial;
  }
  const std::string spaces = "   \n\n  \t  x  \u3000\u3000y \U0001F600\U0001F600\U0001F600  ";
  EXPECT_EQ(tok.decode(tok.encode(spaces)), spaces);
}

TEST(Gpt2Tokenizer, MatchesPythonReference) {
  const fs::path dir = testing::fresh_temp_dir("loom_gpt2_bpe_reference");
  const std::vector<std::string> texts = {
      "Hello world! It's 2024, isn't it?  Yes\n\n\tNo", "na\u00efve caf\u00e9 \u2014 \u6771\u4eac \U0001F680\U0001F680 x\u00b2 \u0663\u0664\u0665",
      "   leading spaces", "trailing   ", "you'll we're they've I'd I'm 'tis",
      "3.14159 and 10,000 apples\u00a0nbsp\u2028line", "the the the then there; the dog's day, isn't it?"};
  std::ofstream(dir / "texts.json") << nlohmann::json(texts).dump();
  const std::string cmd = std::string(LOOM_PYTHON) + " " + LOOM_SOURCE_DIR + "/tests/data/gpt2_bpe_reference.py " + dir.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const nlohmann::json expected = nlohmann::json::parse(testing::read_file(dir / "expected.json"));
  ASSERT_GE(expected.at("merges").get<int>(), 100);
  const std::unique_ptr<Tokenizer> tok = Tokenizer::create("gpt2", "", dir.string());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(split(texts[i]), expected.at("pieces")[i].get<std::vector<std::string>>()) << texts[i];
    EXPECT_EQ(tok->encode(texts[i]), expected.at("ids")[i].get<std::vector<int32_t>>()) << texts[i];
    EXPECT_EQ(tok->decode(tok->encode(texts[i])), texts[i]);
  }
  // The spec is the whole tokenizer: it encodes alike without the files.
  const std::unique_ptr<Tokenizer> again = Tokenizer::from_spec(tok->spec());
  EXPECT_EQ(again->vocab_size(), tok->vocab_size());
  EXPECT_EQ(again->spec(), tok->spec());
  EXPECT_EQ(again->encode(texts[0]), tok->encode(texts[0]));
}

using testing::error_of;

TEST(Gpt2Tokenizer, MalformedFilesNameFileAndLine) {
  const fs::path dir = testing::fresh_temp_dir("loom_gpt2_bad_files");
  nlohmann::json vocab = nlohmann::json::object();
  const std::vector<std::string> bytes = byte_vocab();
  for (size_t i = 0; i < bytes.size(); ++i) vocab[bytes[i]] = i;
  vocab["he"] = 256;
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
  auto load = [&] { return error_of([&] { Gpt2Tokenizer::from_files(dir.string()); }); };
  write("vocab.json", vocab.dump(1));
  EXPECT_NE(load().find("merges.txt"), std::string::npos);  // missing
  write("merges.txt", "#version: 0.2\nh e\n");
  EXPECT_EQ(load(), "(no error)");
  write("merges.txt", "#version: 0.2\nh e\nhe\n");
  EXPECT_NE(load().find("merges.txt' line 3: expected two tokens"), std::string::npos) << load();
  write("merges.txt", "h e\nh  e\n");
  EXPECT_NE(load().find("merges.txt' line 2"), std::string::npos) << load();
  write("merges.txt", "h e\nhe l\n");
  EXPECT_NE(load().find("merge 2 'he l' makes 'hel'"), std::string::npos) << load();
  write("merges.txt", "h e\nq zz\n");
  EXPECT_NE(load().find("names a token ('zz')"), std::string::npos) << load();
  write("merges.txt", "h e\n");
  write("vocab.json", "{\n\"a\": 0,\n\"b\": }\n");
  EXPECT_NE(load().find("vocab.json' line 3: not valid JSON"), std::string::npos) << load();
  nlohmann::json bad = vocab;
  bad["he"] = 9999;
  write("vocab.json", bad.dump(1));
  EXPECT_NE(load().find("the id 9999 of 'he' is outside [0, 257)"), std::string::npos) << load();
  bad = vocab;
  bad["he"] = "x";
  write("vocab.json", bad.dump(1));
  EXPECT_NE(load().find("is not an integer"), std::string::npos) << load();
  bad = vocab;
  bad.erase(u(gpt2_byte_to_unicode('A')));
  bad["zz"] = 65 - 33;  // 'A' is id 32
  write("vocab.json", bad.dump(1));
  EXPECT_NE(load().find("no token for byte 65"), std::string::npos) << load();
  write("vocab.json", "[1, 2]");
  EXPECT_NE(load().find("must be a JSON object"), std::string::npos) << load();
  EXPECT_NE(error_of([] { Tokenizer::create("gpt2", "text", ""); }).find("tokenizer_dir"), std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_spec("gpt2:{\"vocab\": 3}"); }).find("malformed GPT-2 tokenizer spec"),
            std::string::npos);
}

}  // namespace
}  // namespace loom::data
