#include "loom/tensor/allocator.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "loom/tensor/memory_tracker.hpp"

// Under AddressSanitizer (LOOM_SANITIZE=ON) the rounding slack after a tensor's bytes and
// every cached block are poisoned: a kernel reading past its tensor or into a freed one is
// reported like an overrun of a malloc'ed buffer. Without ASan both marks are no-ops.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

namespace loom {

namespace {

constexpr int64_t kAlignment = 64;            // a cache line and an AVX-512 vector
constexpr int64_t kCachedMin = 1 << 20;       // smaller blocks come from malloc's own bins
constexpr int64_t kGranule = 64 << 10;        // sizes rounded up to this for reuse

struct Cache {
  std::mutex mutex;
  std::map<int64_t, std::vector<void*>> free_blocks;  // block size -> blocks (none empty)
  std::unordered_map<void*, int64_t> lent_larger;     // a block handed out for fewer bytes -> its size
  int64_t bytes = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may be freed during static teardown
  return *c;
}

int64_t rounded(int64_t bytes) {
  if (bytes < kCachedMin) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return (bytes + kGranule - 1) / kGranule * kGranule;
}

// The block of `size` bytes now holds a tensor of `bytes`: only those are addressable.
void* hand_out(void* p, int64_t bytes, int64_t size) {
  if (p == nullptr) return p;
  ASAN_UNPOISON_MEMORY_REGION(p, static_cast<size_t>(bytes));
  ASAN_POISON_MEMORY_REGION(static_cast<char*>(p) + bytes, static_cast<size_t>(size - bytes));
  return p;
}

}  // namespace

void* allocate_block(int64_t bytes) {
  const int64_t size = rounded(bytes > 0 ? bytes : 1);
  if (size >= kCachedMin) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    // The smallest block that fits, if no more than an eighth of it goes unused.
    auto it = c.free_blocks.lower_bound(size);
    if (it != c.free_blocks.end() && it->first - size <= it->first / 8) {
      const int64_t block = it->first;
      void* p = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) c.free_blocks.erase(it);
      c.bytes -= block;
      if (block != size) c.lent_larger.emplace(p, block);
      return hand_out(p, bytes, block);
    }
  }
  return hand_out(std::aligned_alloc(kAlignment, static_cast<size_t>(size)), bytes, size);
}

void free_block(void* ptr, int64_t bytes) {
  if (ptr == nullptr) return;
  int64_t size = rounded(bytes > 0 ? bytes : 1);
  if (size >= kCachedMin) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    if (const auto lent = c.lent_larger.find(ptr); lent != c.lent_larger.end()) {
      size = lent->second;
      c.lent_larger.erase(lent);
    }
    if (c.bytes + size <= MemoryTracker::instance().total_peak()) {
      ASAN_POISON_MEMORY_REGION(ptr, static_cast<size_t>(size));  // cached: nobody's tensor
      c.free_blocks[size].push_back(ptr);
      c.bytes += size;
      return;
    }
  }
  std::free(ptr);
}

int64_t cached_block_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.bytes;
}

void release_cached_blocks() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [size, blocks] : c.free_blocks)
    for (void* p : blocks) std::free(p);
  c.free_blocks.clear();
  c.bytes = 0;
}

}  // namespace loom
