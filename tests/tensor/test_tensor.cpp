// Tensor views and the memory tracker's accounting by category.
#include <gtest/gtest.h>

#include "loom/error.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom {
namespace {

TEST(Tensor, ShapeNumelAndViews) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.nbytes(), 96);
  Tensor v = t.view({6, 4});
  v.f32()[5] = 7.0f;
  EXPECT_EQ(t.f32()[5], 7.0f);
  EXPECT_TRUE(v.shares_storage(t));
  Tensor rows = v.narrow(1, 2);  // rows 1..2 of (6, 4)
  EXPECT_EQ(rows.shape(), (Shape{2, 4}));
  EXPECT_EQ(rows.f32(), t.f32() + 4);
  EXPECT_THROW(t.view({5, 5}), Error);
  EXPECT_THROW(v.narrow(5, 2), Error);
  EXPECT_THROW(t.size(3), Error);
}

TEST(Tensor, DTypeIsChecked) {
  Tensor ids = Tensor::zeros({4}, DType::I32);
  EXPECT_EQ(ids.nbytes(), 16);
  EXPECT_THROW(ids.f32(), Error);
  EXPECT_NO_THROW(ids.i32());
  Tensor half = Tensor::empty({4}, DType::BF16);
  EXPECT_EQ(half.nbytes(), 8);
}

TEST(Tensor, CloneCopiesContents) {
  Tensor a = Tensor::empty({3});
  a.fill_(2.5f);
  Tensor b = a.clone();
  a.fill_(0.0f);
  EXPECT_EQ(b.f32()[2], 2.5f);
  EXPECT_FALSE(b.shares_storage(a));
  Tensor c = Tensor::empty({4});
  EXPECT_THROW(c.copy_from(a), Error);
}

TEST(MemoryTracker, CountsByCategoryWithPeaks) {
  MemoryTracker& m = MemoryTracker::instance();
  const int64_t params0 = m.current(MemoryCategory::Parameters);
  const int64_t acts0 = m.current(MemoryCategory::Activations);
  m.reset_peaks();
  {
    Tensor p = Tensor::empty({1000}, DType::F32, MemoryCategory::Parameters);
    EXPECT_EQ(m.current(MemoryCategory::Parameters), params0 + 4000);
    {
      MemoryScope scope(MemoryCategory::Activations);
      Tensor a = Tensor::empty({500});  // takes the scope's category
      EXPECT_EQ(a.category(), MemoryCategory::Activations);
      EXPECT_EQ(m.current(MemoryCategory::Activations), acts0 + 2000);
      Tensor view = a.view({10, 50});  // a view allocates nothing
      EXPECT_EQ(m.current(MemoryCategory::Activations), acts0 + 2000);
    }
    EXPECT_EQ(m.current(MemoryCategory::Activations), acts0);
    EXPECT_EQ(m.peak(MemoryCategory::Activations), acts0 + 2000);
    EXPECT_EQ(current_memory_category(), MemoryCategory::Other);
  }
  EXPECT_EQ(m.current(MemoryCategory::Parameters), params0);
  EXPECT_GE(m.total_peak(), m.total_current() + 6000);
  m.reset_peaks();
  EXPECT_EQ(m.peak(MemoryCategory::Activations), m.current(MemoryCategory::Activations));
}

TEST(MemoryTracker, FormatsBytes) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(3ll << 30), "3.0 GiB");
}

}  // namespace
}  // namespace loom
