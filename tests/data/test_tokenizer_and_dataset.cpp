// Tokenizers (char, byte, UTF-8) and the deterministic batch sampler.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "loom/data/text_dataset.hpp"
#include "loom/error.hpp"

namespace loom::data {
namespace {

std::string temp_file(const std::string& name, const std::string& contents) {
  const auto path = std::filesystem::temp_directory_path() / ("loom_test_" + name);
  std::ofstream(path, std::ios::binary) << contents;
  return path.string();
}

TEST(CharTokenizer, RoundTripsUtf8) {
  const std::string text = "héllo wörld — ☃ 𝄞!";
  CharTokenizer tok = CharTokenizer::from_text(text);
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_EQ(tok.encode("l"), std::vector<int32_t>{tok.encode("l")[0]});
  std::unique_ptr<Tokenizer> again = Tokenizer::from_spec(tok.spec());
  EXPECT_EQ(again->vocab_size(), tok.vocab_size());
  EXPECT_EQ(again->encode(text), tok.encode(text));
  EXPECT_THROW(tok.encode("z"), Error);  // not in the vocabulary
}

TEST(CharTokenizer, ShakespeareHas65Characters) {
  TextDataset ds(LOOM_SOURCE_DIR "/data/tinyshakespeare.txt", "char", 64);
  EXPECT_EQ(ds.tokenizer().vocab_size(), 65);
  EXPECT_EQ(ds.size(Split::Train) + ds.size(Split::Val), 1115394);
  EXPECT_EQ(ds.size(Split::Train), 1003854);  // first 90%
}

TEST(ByteTokenizer, AnyBytes) {
  ByteTokenizer tok;
  const std::string bytes("\x00\xff\x80 ok", 6);
  EXPECT_EQ(tok.decode(tok.encode(bytes)), bytes);
  EXPECT_EQ(tok.vocab_size(), 256);
}

TEST(Utf8, InvalidInputNamesTheOffset) {
  try {
    utf8_decode(std::string("ab\xff", 3));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "invalid UTF-8 at byte offset 2");
  }
  EXPECT_THROW(utf8_decode(std::string("a\xe2\x82", 3)), Error);  // truncated sequence
}

// Found by the fuzzer: an overlong form decoded to a character that encodes differently.
TEST(Utf8, OverlongFormsSurrogatesAndValuesPastTheRangeAreInvalid) {
  for (const std::string bad : {"\xc0\xaf", "\xe0\x80\xaf", "\xf0\x8f\xa6\x8a", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    try {
      utf8_decode("x" + bad);
      ADD_FAILURE() << "accepted " << ::testing::PrintToString(bad);
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "invalid UTF-8 at byte offset 1 (an overlong form, a surrogate or a value past U+10FFFF)");
    }
  }
  const std::string edges = "\x7f\xc2\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf";  // smallest/largest of each length
  EXPECT_EQ(utf8_encode(utf8_decode(edges)), edges);
}

TEST(TextDataset, BatchesAreDeterministicShiftedWindows) {
  TextDataset ds(LOOM_SOURCE_DIR "/data/tinyshakespeare.txt", "char", 32);
  Batch a = ds.batch(Split::Train, 1, 5, 0, 4, 32);
  Batch b = ds.batch(Split::Train, 1, 5, 0, 4, 32);
  Batch c = ds.batch(Split::Train, 1, 6, 0, 4, 32);
  EXPECT_EQ(0, std::memcmp(a.inputs.raw(), b.inputs.raw(), a.inputs.nbytes()));
  EXPECT_NE(0, std::memcmp(a.inputs.raw(), c.inputs.raw(), a.inputs.nbytes()));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t t = 0; t + 1 < 32; ++t) EXPECT_EQ(a.targets.i32()[r * 32 + t], a.inputs.i32()[r * 32 + t + 1]);
  // Rows are addressable: rows 2..3 of the global batch equal rows 2..3 drawn alone, so
  // micro-batches and data-parallel ranks read slices of the same global batch.
  Batch tail = ds.batch(Split::Train, 1, 5, 2, 2, 32);
  EXPECT_EQ(0, std::memcmp(tail.inputs.raw(), a.inputs.i32() + 64, tail.inputs.nbytes()));
}

TEST(TextDataset, BadFilesAreClearErrors) {
  try {
    TextDataset("/nonexistent/loom.txt", "char", 8);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open data file '/nonexistent/loom.txt'"), std::string::npos);
  }
  EXPECT_THROW(TextDataset(temp_file("empty.txt", ""), "char", 8), Error);
  try {
    TextDataset(temp_file("short.txt", "just a few words here"), "char", 8);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too short"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TextDataset(temp_file("bad.txt", std::string(100, 'a') + "\xff"), "char", 8), Error);
  EXPECT_NO_THROW(TextDataset(temp_file("bytes.txt", std::string(100, 'a') + "\xff"), "byte", 8));
  EXPECT_THROW(TextDataset(temp_file("x.txt", std::string(100, 'a')), "word", 8), Error);
}

}  // namespace
}  // namespace loom::data
