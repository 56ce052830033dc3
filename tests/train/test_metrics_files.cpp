// The run's metrics files on a full disk: /dev/full accepts an open and fails every write
// with ENOSPC, so a write that is not checked leaves an empty file while training goes on.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loom/comm/process_group.hpp"
#include "loom/train/memory_file.hpp"
#include "loom/train/metrics_log.hpp"
#include "test_util.hpp"

namespace {

using loom::testing::error_of;

TEST(Metrics, AFullDiskFailsTheMetricsLogNamingTheFile) {
  loom::train::MetricsLog log("/dev/full");
  EXPECT_EQ(error_of([&] { log.write({{"kind", "train"}, {"step", 1}}); }),
            "cannot write metrics file '/dev/full': No space left on device");
  const std::filesystem::path dir = loom::testing::fresh_temp_dir("loom_metrics_log");
  loom::train::MetricsLog ok((dir / "metrics.jsonl").string());
  ok.write({{"step", 1}});
  EXPECT_EQ(loom::testing::read_file(dir / "metrics.jsonl"), "{\"step\":1}\n");
  EXPECT_EQ(error_of([] { loom::train::MetricsLog("/nonexistent/dir/metrics.jsonl"); }),
            "cannot open metrics file '/nonexistent/dir/metrics.jsonl': No such file or directory");
}

TEST(Metrics, ARecordCutByAKilledRunIsDroppedBeforeTheNextIsAppended) {
  // A run killed mid-write left `{"st`: the resumed run's first record must not be glued to it.
  const std::filesystem::path dir = loom::testing::fresh_temp_dir("loom_metrics_cut");
  std::ofstream(dir / "metrics.jsonl") << "{\"step\":1}\n{\"st";
  loom::train::MetricsLog((dir / "metrics.jsonl").string()).write({{"step", 2}});
  EXPECT_EQ(loom::testing::read_file(dir / "metrics.jsonl"), "{\"step\":1}\n{\"step\":2}\n");
  std::ofstream(dir / "cut.jsonl") << "{\"kind\":\"tr";  // nothing but the fragment
  loom::train::MetricsLog((dir / "cut.jsonl").string()).write({{"step", 1}});
  EXPECT_EQ(loom::testing::read_file(dir / "cut.jsonl"), "{\"step\":1}\n");
  // A whole record that lost only its '\n' is a record (loom report reads it): kept and ended.
  // A fragment longer than the 4 KiB the end is searched by at a time goes as a whole.
  std::ofstream(dir / "whole.jsonl") << "{\"step\":1}\n{\"step\":2}";
  loom::train::MetricsLog((dir / "whole.jsonl").string()).write({{"step", 3}});
  EXPECT_EQ(loom::testing::read_file(dir / "whole.jsonl"), "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
  std::ofstream(dir / "long.jsonl") << "{\"step\":1}\n{\"note\":\"" << std::string(10000, 'x');
  loom::train::MetricsLog((dir / "long.jsonl").string()).write({{"step", 2}});
  EXPECT_EQ(loom::testing::read_file(dir / "long.jsonl"), "{\"step\":1}\n{\"step\":2}\n");
}

TEST(Metrics, AFullDiskFailsTheMemoryFileNamingTheFile) {
  auto world = loom::comm::ProcessGroup::single_process();
  const nlohmann::json record = loom::train::memory_record(0, "rank 0", {}, 0);
  EXPECT_EQ(error_of([&] { loom::train::write_memory_file("/dev/full", *world, record); }),
            "cannot write '/dev/full': No space left on device");
  const std::filesystem::path dir = loom::testing::fresh_temp_dir("loom_memory_file");
  loom::train::write_memory_file((dir / "memory.json").string(), *world, record);
  EXPECT_NE(loom::testing::read_file(dir / "memory.json").find("\"ranks\""), std::string::npos);
  // Written beside and renamed into place: no temporary file stays, and a second write
  // replaces the file whole.
  loom::train::write_memory_file((dir / "memory.json").string(), *world, record);
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1);
}

}  // namespace
