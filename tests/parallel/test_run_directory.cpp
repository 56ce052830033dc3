// A run directory under MPI: rank 0 alone takes the lock and checks the resume, and every
// rank learns the outcome, so a refused resume or a directory in use by another run stops
// every rank with the same message; none hangs in a collective or trains alone.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "comm/mpi_test_env.hpp"
#include "loom/train/run_directory.hpp"
#include "loom/train/trainer.hpp"
#include "parallel/equivalence.hpp"
#include "test_util.hpp"

namespace loom::parallel::run_directory_test {
namespace {

using loom::testing::error_of;
using loom::testing::world;
using namespace loom::testing::equivalence;

TEST(RunDirectoryMpi, AResumeOfAnotherModelFailsOnEveryRank) {
  const int p = world().size();
  const std::string dir = fresh_shared_dir("loom_run_dir_model", world());
  train::TrainConfig c = tiny(p, 2, 1);
  train_and_checkpoint(c, 2, dir, world());
  c.model.n_layer = 3;
  c.out_dir = dir;
  c.resume = "latest";
  const std::string error = error_of([&] { train::Trainer t(c, true, &world()); });
  EXPECT_NE(error.find("holds a different model: n_layer 2 (checkpoint) vs 3 (config)"), std::string::npos)
      << "rank " << world().rank() << ": " << error;
  remove_shared_dir(dir, world());
}

TEST(RunDirectoryMpi, ADirectoryInUseStopsEveryRank) {
  const std::string dir = fresh_shared_dir("loom_run_dir_lock", world());
  if (world().rank() == 0) {
    std::filesystem::create_directories(dir);
    std::ofstream(std::filesystem::path(dir) / train::kLockName) << "{\"host\": \"elsewhere.example\", \"pid\": 4242}\n";
  }
  world().barrier();
  train::TrainConfig c = tiny(world().size(), 2, 1);
  c.out_dir = dir;
  const std::string error = error_of([&] { train::Trainer t(c, true, &world()); });
  EXPECT_NE(error.find("is in use by pid 4242 on host elsewhere.example"), std::string::npos)
      << "rank " << world().rank() << ": " << error;
  remove_shared_dir(dir, world());
}

}  // namespace
}  // namespace loom::parallel::run_directory_test
