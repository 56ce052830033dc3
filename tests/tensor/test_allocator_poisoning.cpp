// Under AddressSanitizer (LOOM_SANITIZE=ON, the CTest case sanitize.asan_ubsan) the tensor
// allocator marks what no tensor owns: the rounding slack after a tensor's bytes, and a
// freed block kept in the cache. A kernel that reads there is reported like an overrun of
// a malloc'ed buffer. Other builds have nothing to check and skip.
#include <gtest/gtest.h>

#include "loom/tensor/allocator.hpp"
#include "loom/tensor/tensor.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace loom {
namespace {

TEST(AllocatorUnderAsan, SlackAndCachedBlocksArePoisoned) {
#if !defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "checked in the AddressSanitizer build (sanitize.asan_ubsan)";
#else
  // The cache keeps blocks up to the peak of live tensor bytes: raise it first.
  Tensor::empty({int64_t{1} << 21});
  release_cached_blocks();
  // 1 MiB and more is cached, in 64 KiB steps: 12 bytes past a whole step leave slack.
  const int64_t n = (int64_t{1} << 18) + 3;  // floats
  Tensor t = Tensor::empty({n});
  const char* first = static_cast<const char*>(t.raw());
  const char* end = first + t.nbytes();
  EXPECT_FALSE(__asan_address_is_poisoned(first));
  EXPECT_FALSE(__asan_address_is_poisoned(end - 1));
  EXPECT_TRUE(__asan_address_is_poisoned(end)) << "the byte after the tensor";
  EXPECT_EQ(__asan_region_is_poisoned(const_cast<char*>(first), static_cast<size_t>(t.nbytes())), nullptr);
  t = Tensor();  // freed into the cache (its size is within the peak of live tensor bytes)
  ASSERT_GT(cached_block_bytes(), 0);
  EXPECT_TRUE(__asan_address_is_poisoned(first)) << "a cached block is nobody's tensor";
  // Handed out again: the new tensor's bytes are addressable, the slack is not.
  Tensor u = Tensor::empty({n - 1});
  ASSERT_EQ(static_cast<const char*>(u.raw()), first) << "the cached block is reused";
  EXPECT_FALSE(__asan_address_is_poisoned(first + u.nbytes() - 1));
  EXPECT_TRUE(__asan_address_is_poisoned(first + u.nbytes()));
#endif
}

}  // namespace
}  // namespace loom
