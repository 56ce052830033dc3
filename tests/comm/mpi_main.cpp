// Test main for multi-rank tests, run by CTest under mpirun with 1 to 8 ranks. Every rank
// runs every test; rank 0 prints the usual report and a summary naming every skipped test,
// other ranks print only their failures (prefixed with the rank); all ranks agree on the exit
// code. MPI missing or unusable is a failure, never a skip. The job has its own TMPDIR, named
// by rank 0.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "comm/mpi_test_env.hpp"
#include "loom/comm/mpi_runtime.hpp"
#include "loom/kernels/threads.hpp"
#include "private_temp_dir.hpp"

namespace {

loom::comm::ProcessGroup* g_world = nullptr;

// On ranks other than 0: failures only, each line naming the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

// Rank 0, after the run: the counts, and each skipped test with its reason, so a variant
// that finds no layout at this rank count shows in CTest's log instead of passing unseen.
// Only a run whose every test skipped says so (CTest's SKIP_REGULAR_EXPRESSION).
void print_summary(int size) {
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  std::printf("[mpi] %d passed, %d failed, %d skipped at %d ranks\n", u.successful_test_count(), u.failed_test_count(),
              u.skipped_test_count(), size);
  for (int s = 0; s < u.total_test_suite_count(); ++s) {
    const ::testing::TestSuite& suite = *u.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const ::testing::TestInfo& info = *suite.GetTestInfo(t);
      if (!info.should_run() || !info.result()->Skipped()) continue;
      std::string reason;
      for (int k = 0; k < info.result()->total_part_count(); ++k)
        if (info.result()->GetTestPartResult(k).skipped()) reason = info.result()->GetTestPartResult(k).message();
      std::printf("[mpi] skipped at %d ranks: %s.%s (%s)\n", size, suite.name(), info.name(), reason.c_str());
    }
  }
  if (u.test_to_run_count() > 0 && u.skipped_test_count() == u.test_to_run_count())
    std::printf("[mpi] every test skipped at %d ranks\n", size);
}

}  // namespace

namespace loom::testing {
comm::ProcessGroup& world() { return *g_world; }
}  // namespace loom::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  loom::comm::MpiRuntime mpi(&argc, &argv);
  g_world = &mpi.world();
  loom::kernels::set_num_threads(1);
  const int rank = mpi.world().rank(), size = mpi.world().size();
  long job = ::getpid();  // rank 0's pid names the job's directory
  MPI_Bcast(&job, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  auto temp = std::make_unique<loom::testing::PrivateTempDir>(
      loom::testing::PrivateTempDir::path_for("loom-mpi-tests", job), rank == 0);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int local = RUN_ALL_TESTS();
  int failed_ranks = 0;
  const int mine = local != 0 ? 1 : 0;
  MPI_Allreduce(&mine, &failed_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    print_summary(size);
    if (failed_ranks == 0) std::printf("[mpi] all %d ranks passed\n", size);
    else std::printf("[mpi] FAILED on %d of %d ranks\n", failed_ranks, size);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every rank is done with the directory before rank 0 removes it
  temp.reset();
  return failed_ranks == 0 ? 0 : 1;
}
