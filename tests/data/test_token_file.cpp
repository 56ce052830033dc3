// Token files: `tokenize_text_file` writes the ids the tokenizer gives the whole text (also
// when the text is read in small pieces), a dataset over the token file yields the text's
// batches exactly, and damaged files (truncated, mis-headed, random header bytes, ids
// outside the vocabulary) are errors naming the file, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "loom/data/gpt2_tokenizer.hpp"
#include "loom/data/text_dataset.hpp"
#include "loom/data/token_file.hpp"
#include "loom/error.hpp"
#include "test_util.hpp"

namespace loom::data {
namespace {

namespace fs = std::filesystem;

using testing::error_of;

// A text with long lines, blank-line runs, spaces before newlines and non-ASCII characters,
// so small pieces end at many kinds of places.
std::string sample_text() {
  std::string text;
  std::mt19937_64 rng(3);
  const std::vector<std::string> words = {"the", "caf\u00e9", "don't", "  ", "\n", "\n\n", "x\u00b2", "12", "!!", " \n",
                                          "\U0001F680", "we're", "\t"};
  for (int i = 0; i < 3000; ++i) text += words[rng() % words.size()] + (rng() % 3 ? " " : "");
  return text;
}

std::vector<int32_t> read_all(const TokenFile& f, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(f.size()));
  f.copy(0, f.size(), ids.data(), vocab);
  return ids;
}

void write_gpt2_files(const fs::path& dir) {
  // GPT-2's byte alphabet as 256 tokens, plus three merges.
  std::ofstream vocab(dir / "vocab.json");
  vocab << "{";
  for (int b = 0; b < 256; ++b) {
    std::string token = utf8_encode({gpt2_byte_to_unicode(static_cast<uint8_t>(b))});
    if (token == "\"" || token == "\\") token = "\\" + token;
    vocab << "\"" << token << "\": " << b << ",";
  }
  vocab << "\"th\": 256, \"the\": 257, \"\xc4\xa0the\": 258}";
  std::ofstream(dir / "merges.txt") << "#version: 0.2\nt h\nth e\n\xc4\xa0 the\n";
}

TEST(TokenFile, HoldsTheIdsOfTheWholeTextReadInPieces) {
  const fs::path dir = testing::fresh_temp_dir("loom_token_file_ids");
  const std::string text = sample_text();
  std::ofstream(dir / "text.txt", std::ios::binary) << text;
  write_gpt2_files(dir);
  for (const std::string kind : {"char", "byte", "gpt2"}) {
    const std::unique_ptr<Tokenizer> tok = Tokenizer::create(kind, text, dir.string());
    for (int64_t piece : {int64_t{16} << 20, int64_t{37}}) {
      const std::string out = (dir / (kind + ".tok")).string();
      EXPECT_EQ(tokenize_text_file((dir / "text.txt").string(), out, kind, dir.string(), piece),
                static_cast<int64_t>(tok->encode(text).size()));
      const TokenFile f(out);
      EXPECT_EQ(f.tokenizer_spec(), tok->spec()) << kind;
      EXPECT_EQ(f.id_bytes(), 2);
      EXPECT_EQ(read_all(f, tok->vocab_size()), tok->encode(text)) << kind << " in pieces of " << piece;
      EXPECT_FALSE(fs::exists(out + ".tmp"));
    }
  }
}

TEST(TokenFile, DatasetGivesTheTextsBatches) {
  const fs::path dir = testing::fresh_temp_dir("loom_token_file_batches");
  const std::string text = sample_text();
  std::ofstream(dir / "text.txt", std::ios::binary) << text;
  tokenize_text_file((dir / "text.txt").string(), (dir / "text.tok").string(), "char");
  const TextDataset from_text((dir / "text.txt").string(), "char", 16);
  const TextDataset from_file((dir / "text.tok").string(), "byte", 16);  // the file names its own tokenizer
  EXPECT_EQ(from_file.tokenizer().spec(), from_text.tokenizer().spec());
  for (Split s : {Split::Train, Split::Val}) {
    EXPECT_EQ(from_file.size(s), from_text.size(s));
    for (int64_t step : {0, 1, 57}) {
      const Batch a = from_text.batch(s, 5, step, 3, 4, 16), b = from_file.batch(s, 5, step, 3, 4, 16);
      EXPECT_EQ(0, std::memcmp(a.inputs.raw(), b.inputs.raw(), a.inputs.nbytes()));
      EXPECT_EQ(0, std::memcmp(a.targets.raw(), b.targets.raw(), a.targets.nbytes()));
    }
  }
}

TEST(TokenFile, DamagedFilesAreErrorsNamingTheFile) {
  const fs::path dir = testing::fresh_temp_dir("loom_token_file_damaged");
  std::ofstream(dir / "text.txt", std::ios::binary) << sample_text();
  const std::string good = (dir / "good.tok").string(), bad = (dir / "bad.tok").string();
  tokenize_text_file((dir / "text.txt").string(), good, "char");
  const std::string bytes = testing::read_file(good);
  auto with = [&](const std::string& contents) {
    std::ofstream(bad, std::ios::binary | std::ios::trunc) << contents;
    return error_of([&] { TokenFile f(bad); });
  };
  EXPECT_NE(with(bytes.substr(0, bytes.size() - 3)).find("is truncated: its header counts"), std::string::npos)
      << with(bytes.substr(0, bytes.size() - 3));
  EXPECT_NE(with(bytes + "xy").find("bytes after its"), std::string::npos);
  EXPECT_NE(with(bytes.substr(0, 20)).find("truncated inside its header"), std::string::npos) << with(bytes.substr(0, 20));
  EXPECT_NE(with("").find("not a Loom token file"), std::string::npos);
  std::string h = bytes;
  h[0] = 'X';
  EXPECT_NE(with(h).find("not a Loom token file"), std::string::npos);
  h = bytes;
  h[8] = 7;
  EXPECT_NE(with(h).find("has format version 7"), std::string::npos);
  h = bytes;
  h[12] = 3;
  EXPECT_NE(with(h).find("3 bytes per token id"), std::string::npos);
  h = bytes;
  h[31] = 1;  // a spec of 2^56 bytes
  EXPECT_NE(with(h).find("tokenizer spec of"), std::string::npos);
  EXPECT_NE(with(h).find(bad), std::string::npos);
  // An id outside the vocabulary is named when the file is opened, however far in it lies
  // (batches read at random: one found only when read could end a run hours in).
  h = bytes;
  h[h.size() - 2] = '\xff';
  h[h.size() - 1] = '\xff';
  const int64_t last = static_cast<int64_t>(h.size()) - 2;
  const std::string message = with(h);
  EXPECT_NE(message.find("(byte offset " + std::to_string(last) + ") is id 65535, outside its tokenizer's"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(bad), std::string::npos);
}

TEST(TokenFile, RandomHeaderBytesAreErrorsOrValidFiles) {
  const fs::path dir = testing::fresh_temp_dir("loom_token_file_fuzz");
  std::ofstream(dir / "text.txt", std::ios::binary) << "hello token file\nagain\n";
  const std::string good = (dir / "good.tok").string(), bad = (dir / "bad.tok").string();
  tokenize_text_file((dir / "text.txt").string(), good, "byte");
  const std::string bytes = testing::read_file(good);
  std::mt19937_64 rng(11);
  int errors = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::string m = bytes;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) m[rng() % 40] = static_cast<char>(rng());
    if (rng() % 4 == 0) m.resize(rng() % m.size());
    std::ofstream(bad, std::ios::binary | std::ios::trunc) << m;
    try {
      TokenFile f(bad);
      (void)read_all(f, 256);
    } catch (const Error& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 120);  // most damage is caught by the header's checks (some lands in padding)
}

}  // namespace
}  // namespace loom::data
