// Test main: kernels run single-threaded unless a test asks otherwise, so results do not
// depend on how many tests CTest runs side by side.
#include <gtest/gtest.h>

#include "loom/kernels/threads.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  loom::kernels::set_num_threads(1);
  return RUN_ALL_TESTS();
}
