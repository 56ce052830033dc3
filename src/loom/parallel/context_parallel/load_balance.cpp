#include "loom/parallel/context_parallel/load_balance.hpp"

#include <cstring>

#include "loom/error.hpp"

namespace loom::parallel::cp {

Split parse_split(const std::string& name) {
  if (name == "zigzag") return Split::ZigZag;
  if (name == "contiguous") return Split::Contiguous;
  throw Error("cp_split must be 'zigzag' or 'contiguous', got '" + name + "'");
}

std::array<int64_t, 2> chunks_of(int rank, int cp, Split split) {
  check(cp >= 1 && rank >= 0 && rank < cp, "context-parallel rank ", rank, " outside a group of ", cp);
  if (split == Split::Contiguous) return {2 * rank, 2 * rank + 1};
  return {rank, 2 * cp - 1 - rank};
}

std::vector<int64_t> positions_of(int64_t T, int rank, int cp, Split split) {
  check(T % (2 * cp) == 0, "context parallelism cuts the sequence into 2 x cp = ", 2 * cp,
        " chunks: the sequence length (block_size ", T, ") must be divisible by ", 2 * cp);
  const int64_t Tc = T / (2 * cp);
  std::vector<int64_t> out;
  for (int64_t chunk : chunks_of(rank, cp, split))
    for (int64_t t = 0; t < Tc; ++t) out.push_back(chunk * Tc + t);
  return out;
}

Tensor take_chunks(const Tensor& sequence, int rank, int cp, Split split) {
  check(sequence.ndim() >= 2, "take_chunks expects (B, T, ...), got ", shape_str(sequence.shape()));
  const int64_t B = sequence.size(0), T = sequence.size(1);
  const std::vector<int64_t> positions = positions_of(T, rank, cp, split);
  Shape shape = sequence.shape();
  shape[1] = T / cp;
  Tensor out = Tensor::empty(shape, sequence.dtype());
  const int64_t row_bytes = sequence.nbytes() / (B * T), Tc = T / (2 * cp);
  const auto* in = static_cast<const char*>(sequence.raw());
  auto* dst = static_cast<char*>(out.raw());
  // Each chunk is Tc consecutive rows: one copy per (sequence, chunk).
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < 2; ++a)
      std::memcpy(dst + (b * (T / cp) + a * Tc) * row_bytes, in + (b * T + positions[a * Tc]) * row_bytes,
                  Tc * row_bytes);
  return out;
}

int64_t causal_pairs(int64_t T, int rank, int cp, Split split) {
  int64_t pairs = 0;
  for (int64_t p : positions_of(T, rank, cp, split)) pairs += p + 1;  // query p sees keys 0..p
  return pairs;
}

}  // namespace loom::parallel::cp
