// A tokenized text corpus split into train and validation parts (first 90% / last 10%,
// the nanoGPT convention), read from a UTF-8 text file or from a token file (token_file.hpp:
// memory-mapped, the tokenizer it records; the same tokens give the same batches), and
// deterministic batches: row r of step s's global batch is a
// pure function of (seed, split, s, r), so a resumed run reads exactly the batches an
// uninterrupted one would, and any split of the global batch into micro-batches or
// data-parallel ranks sees the same rows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/data/token_file.hpp"
#include "loom/data/tokenizer.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::data {

enum class Split { Train, Val };

struct Batch {
  Tensor inputs;   // (B, T) i32
  Tensor targets;  // (B, T) i32, inputs shifted by one
  // The row of the step's whole batch that this batch's first row is (its rows follow it):
  // what a training step's dropout masks are drawn from (nn/hidden_dropout.hpp).
  int64_t first_row = 0;
};

class TextDataset {
 public:
  // Reads and tokenizes a UTF-8 text file, or maps a token file (then tokenizer_kind is
  // not used: the file names its tokenizer); throws loom::Error for a missing, unreadable or
  // too-short file (it must hold more than block_size + 1 tokens in each split).
  // tokenizer_files: the directory of the "gpt2" tokenizer's files.
  TextDataset(const std::string& path, const std::string& tokenizer_kind, int64_t block_size,
              double val_fraction = 0.1, const std::string& tokenizer_files = "");

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int64_t size(Split split) const { return split == Split::Train ? n_train_ : n_total_ - n_train_; }

  // Rows [row_begin, row_begin + B) of step's global batch; each row a window of T + 1
  // tokens at a position drawn from (seed, split, step, row).
  Batch batch(Split split, uint64_t seed, int64_t step, int64_t row_begin, int64_t B, int64_t T) const;

 private:
  // out[0, n) = the corpus's tokens [begin, begin + n).
  void copy_tokens(int64_t begin, int64_t n, int32_t* out) const;

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> text_tokens_;  // a text file's tokens; empty for a token file
  std::unique_ptr<TokenFile> token_file_;
  int64_t n_total_ = 0, n_train_ = 0;  // the train split is [0, n_train_), val the rest
};

std::string read_text_file(const std::string& path);

}  // namespace loom::data
