// The tensor allocator's cache of freed large blocks: a request takes the smallest cached block
// that holds it with at most an eighth of that block to spare (a mixture of experts' routed
// rows change size every step), never one that would waste more, and a block lent for fewer
// bytes goes back into the cache at its own size.
#include <gtest/gtest.h>

#include "loom/tensor/allocator.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// A tensor of `bytes` (a multiple of 4).
Tensor of_bytes(int64_t bytes) { return Tensor::empty({bytes / 4}); }

TEST(TensorAllocator, ReusesTheSmallestCachedBlockWithinAnEighthToSpare) {
  // The cache holds blocks up to the peak of live tensor bytes: raise the peak first.
  { const Tensor room = of_bytes(64 * kMiB); }
  release_cached_blocks();

  Tensor block = of_bytes(8 * kMiB);
  const void* eight = block.raw();
  block = Tensor();  // into the cache
  ASSERT_EQ(cached_block_bytes(), 8 * kMiB);

  // 7.5 MiB: an eighth of 8 MiB is 1 MiB, so the cached block serves it.
  Tensor smaller = of_bytes(7 * kMiB + kMiB / 2);
  EXPECT_EQ(smaller.raw(), eight) << "a block with 1/16 to spare is reused";
  EXPECT_EQ(cached_block_bytes(), 0);
  // Freed, it goes back at the block's size, not the request's.
  smaller = Tensor();
  EXPECT_EQ(cached_block_bytes(), 8 * kMiB);

  // 6 MiB would leave a quarter of the block unused: a block of its own.
  Tensor much_smaller = of_bytes(6 * kMiB);
  EXPECT_NE(much_smaller.raw(), eight);
  EXPECT_EQ(cached_block_bytes(), 8 * kMiB);
  // More than the block holds: never the cached block.
  Tensor larger = of_bytes(8 * kMiB + 64 * 1024);
  EXPECT_NE(larger.raw(), eight);
  EXPECT_EQ(cached_block_bytes(), 8 * kMiB);

  // With 7 and 8 MiB blocks cached, a 7 MiB request takes the 7 MiB one (the smallest that fits).
  much_smaller = Tensor();
  larger = Tensor();
  release_cached_blocks();
  Tensor seven = of_bytes(7 * kMiB), eight_again = of_bytes(8 * kMiB);
  const void* seven_block = seven.raw();
  seven = Tensor();
  eight_again = Tensor();
  ASSERT_EQ(cached_block_bytes(), 15 * kMiB);
  const Tensor again = of_bytes(7 * kMiB - 4096);
  EXPECT_EQ(again.raw(), seven_block);
  EXPECT_EQ(cached_block_bytes(), 8 * kMiB);
  release_cached_blocks();
}

}  // namespace
}  // namespace loom
