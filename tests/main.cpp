// Test main: kernels run single-threaded unless a test asks otherwise, so results do not
// depend on how many tests CTest runs side by side; each process has its own TMPDIR.
#include <gtest/gtest.h>

#include "loom/kernels/threads.hpp"
#include "private_temp_dir.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  loom::kernels::set_num_threads(1);
  const loom::testing::PrivateTempDir temp(loom::testing::PrivateTempDir::path_for("loom-tests", ::getpid()), true);
  return RUN_ALL_TESTS();
}
