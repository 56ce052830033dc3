// A run directory belongs to one run: the lock keeps a second live process out (naming its
// host and pid), a dead process's lock is taken over, trainers of one process share it; a
// fresh run into a directory holding a run is refused, and `overwrite` deletes that run.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/train/run_directory.hpp"
#include "loom/train/trainer.hpp"
#include "test_util.hpp"
#include "train/tiny_run.hpp"

namespace loom::train {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

std::string host() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

void write_lock(const fs::path& dir, const std::string& owner_host, int64_t pid) {
  fs::create_directories(dir);
  std::ofstream(dir / kLockName) << nlohmann::json{{"host", owner_host}, {"pid", pid}}.dump() << "\n";
}

int64_t lock_pid(const fs::path& dir) {
  return nlohmann::json::parse(testing::read_file(dir / kLockName)).at("pid").get<int64_t>();
}

// The pid of a process that has ended.
int64_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

TEST(RunLock, ALiveOwnerKeepsASecondProcessOutNamingHostAndPid) {
  const fs::path dir = testing::fresh_temp_dir("loom_lock_live");
  write_lock(dir, host(), getppid());  // a live process that is not this one
  EXPECT_EQ(error_of([&] { RunLock lock(dir.string(), true); }),
            "run directory '" + dir.string() + "' is in use by pid " + std::to_string(getppid()) + " on host " + host() +
                " (lock file '" + (dir / kLockName).string() +
                "'); wait for that run to end or use another out_dir (delete the lock file only if that process is gone)");
  EXPECT_EQ(lock_pid(dir), getppid()) << "the owner's lock must stay";
  // On another host liveness cannot be checked: never taken over.
  write_lock(dir, "elsewhere.example", dead_pid());
  EXPECT_NE(error_of([&] { RunLock lock(dir.string(), true); }).find(" on host elsewhere.example (lock file"),
            std::string::npos);
}

// A pid that is no process id names no owner, after the wait for a lock being written: 1e300
// (its conversion was undefined) and 2^32 + 1 (kill() truncated it to init's 1, so the
// directory was "in use by pid 4294967297" for good).
TEST(RunLock, ALockWhosePidIsNoProcessIdNamesNoOwner) {
  const fs::path dir = testing::fresh_temp_dir("loom_lock_no_pid");
  for (const char* pid : {"1e300", "4294967297"}) {
    std::ofstream(dir / kLockName) << R"({"host": ")" << host() << R"(", "pid": )" << pid << "}\n";
    EXPECT_EQ(error_of([&] { RunLock lock(dir.string(), true); }),
              "run directory '" + dir.string() + "' has a lock file '" + (dir / kLockName).string() +
                  "' that names no owner; delete it if no run uses the directory")
        << pid;
  }
}

TEST(RunLock, AStaleLockIsTakenOverWithANotice) {
  const fs::path dir = testing::fresh_temp_dir("loom_lock_stale");
  const int64_t gone = dead_pid();
  write_lock(dir, host(), gone);
  ::testing::internal::CaptureStdout();
  {
    RunLock lock(dir.string(), false);
    EXPECT_EQ(lock_pid(dir), getpid());
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(out, "taking over the lock of '" + dir.string() + "' from pid " + std::to_string(gone) + " on " + host() +
                     ", which no longer runs\n");
  EXPECT_FALSE(fs::exists(dir / kLockName)) << "released at the end";
}

TEST(RunLock, ALockHeldByALiveProcessIsNotTakenOverWhateverItsFileSays) {
  // Two processes that both found a dead owner's lock: the first took it over, the second then
  // read the dead pid too. The file still names the dead pid here (the first has not written
  // its own yet), but its holder lives: the second must stay out (it deleted the first's lock
  // and both trained in the directory).
  const fs::path dir = testing::fresh_temp_dir("loom_lock_race");
  write_lock(dir, host(), dead_pid());
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t holder = fork();
  if (holder == 0) {
    int code = 0;
    try {
      RunLock lock(dir.string(), true);
      write_lock(dir, host(), dead_pid());  // the state the second process saw
      char c = 'r';
      if (write(ready[1], &c, 1) != 1) code = 2;
      if (read(done[0], &c, 1) != 1) code = 3;
    } catch (...) {
      code = 1;
    }
    _exit(code);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the holder took the stale lock over";
  EXPECT_NE(error_of([&] { RunLock lock(dir.string(), true); }).find("is being taken over by another process"),
            std::string::npos);
  ASSERT_EQ(write(done[1], &c, 1), 1);
  int status = 0;
  waitpid(holder, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // Its holder gone, the lock naming a dead pid is free again.
  RunLock lock(dir.string(), true);
  EXPECT_EQ(lock_pid(dir), getpid());
}

TEST(RunLock, TrainersOfOneProcessShareTheLock) {
  const fs::path dir = fs::temp_directory_path() / "loom_lock_shared";
  fs::remove_all(dir);
  auto first = std::make_unique<RunLock>(dir.string(), true);
  {
    RunLock second(dir.string(), true);
  }
  EXPECT_TRUE(fs::exists(dir / kLockName)) << "the first holder still runs";
  first.reset();
  EXPECT_FALSE(fs::exists(dir)) << "a directory the lock created and nothing used is removed again";
}

TEST(RunDirectory, ATrainerHoldsTheLockWhileItLives) {
  TrainConfig c = tiny_run("lock_held");
  {
    Trainer t(c, true);
    EXPECT_EQ(lock_pid(c.out_dir), getpid());
  }
  EXPECT_FALSE(fs::exists(fs::path(c.out_dir) / kLockName));
  write_lock(c.out_dir, host(), getppid());
  c.resume = "auto";
  EXPECT_NE(error_of([&] { Trainer t(c, true); }).find("is in use by pid " + std::to_string(getppid())),
            std::string::npos);
}

// A metrics.jsonl is a run's only when it logged a step: start records (a run killed before its
// first step) and a last line a kill cut short (no '\n' and not whole: the next run drops it) are none.
TEST(RunDirectory, AMetricsFileIsARunOnlyWithAStepLogged) {
  const fs::path dir = testing::fresh_temp_dir("loom_run_dir_metrics");
  auto with = [&](const std::string& text) {
    std::ofstream(dir / "metrics.jsonl", std::ios::binary) << text;
    return previous_run_files(dir.string());
  };
  const std::string start = "{\"kind\":\"start\",\"step\":0}\n";
  EXPECT_EQ(with(start + start), std::vector<std::string>{});
  EXPECT_EQ(with(start + "{\"kind\":\"train\",\"loss\":4.1,\"st"), std::vector<std::string>{});
  EXPECT_EQ(with(start + "{\"kind\":\"train\",\"loss\":4.1,\"step\":1}\n"), std::vector<std::string>{"metrics.jsonl"});
  // A whole record without its '\n' is kept by the next run, so it is a step logged.
  EXPECT_EQ(with(start + "{\"kind\":\"train\",\"loss\":4.1,\"step\":1}"), std::vector<std::string>{"metrics.jsonl"});
  fs::remove_all(dir);
}

TEST(RunDirectory, AFreshRunIntoAnotherRunIsRefusedAndOverwriteDeletesIt) {
  TrainConfig c = tiny_run("fresh_into_run");
  c.steps = 2;
  Trainer(c, true).run();
  const std::string error = error_of([&] { Trainer t(c, true); });
  EXPECT_EQ(error, "out_dir '" + c.out_dir + "' already holds a run (checkpoint-00000002.safetensors, latest, "
                   "metrics.jsonl): continue it with --resume latest|auto, start over with --overwrite (which deletes "
                   "it), or choose another --out-dir");
  EXPECT_TRUE(fs::exists(fs::path(c.out_dir) / "checkpoint-00000002.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(c.out_dir) / kLockName));

  c.overwrite = true;
  ::testing::internal::CaptureStdout();
  Trainer t(c, false);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(),
            "overwrite: deleted the previous run in '" + c.out_dir +
                "' (checkpoint-00000002.safetensors, latest, metrics.jsonl)\n");
  EXPECT_FALSE(fs::exists(fs::path(c.out_dir) / "checkpoint-00000002.safetensors"));
  EXPECT_FALSE(fs::is_symlink(fs::path(c.out_dir) / "latest"));
  EXPECT_EQ(fs::file_size(fs::path(c.out_dir) / "metrics.jsonl"), 0u);
  EXPECT_EQ(t.step(), 0);

  c.resume = "latest";
  EXPECT_EQ(error_of([&] { c.validate(); }),
            "overwrite deletes the checkpoints resume = 'latest' would continue from: give one or the other");
}

// A mistyped --resume into a directory that holds a run named the run ("already holds a run:
// continue it with --resume latest|auto") instead of the path that is not there.
TEST(RunDirectory, AResumePathThatIsNotThereIsNamedBeforeTheRunOutDirHolds) {
  TrainConfig c = tiny_run("resume_typo");
  c.steps = 2;
  Trainer(c, true).run();
  c.resume = c.out_dir + "-typo";
  EXPECT_EQ(error_of([&] { Trainer t(c, true); }), "no checkpoint at '" + c.out_dir + "-typo'");
  EXPECT_TRUE(fs::exists(fs::path(c.out_dir) / "checkpoint-00000002.safetensors"));
}

// --resume latest where nothing was saved (a first run stopped before its end, without
// checkpoint_every) said "no complete checkpoint in" the directory, and not what to do.
TEST(RunDirectory, ResumeLatestWithoutACheckpointSaysWhyAndWhatStartsFresh) {
  TrainConfig c = tiny_run("latest_nothing_saved");
  c.resume = "latest";
  EXPECT_EQ(error_of([&] { Trainer t(c, true); }),
            "resume = 'latest', but out_dir '" + c.out_dir + "' holds no checkpoint (a run saves at its end and every "
            "checkpoint_every steps): --resume auto starts fresh where there is none");
  EXPECT_FALSE(fs::exists(fs::path(c.out_dir) / kLockName));
}

// The previous run's memory.json, trace.json and report.html went with it: a new run that
// traced nothing kept the old trace.json, and `loom report` drew it as the new run's.
TEST(RunDirectory, OverwriteDeletesThePreviousRunsTraceMemoryAndReport) {
  TrainConfig c = tiny_run("overwrite_outputs");
  c.steps = 2;
  Trainer(c, true).run();
  const fs::path dir(c.out_dir);
  ASSERT_TRUE(fs::exists(dir / "memory.json"));
  std::ofstream(dir / "trace.json") << "{\"traceEvents\": []}";
  std::ofstream(dir / "report.html") << "<html></html>";
  std::ofstream(dir / "notes.txt") << "the user's own file";

  c.overwrite = true;
  Trainer t(c, true);
  EXPECT_FALSE(fs::exists(dir / "memory.json"));
  EXPECT_FALSE(fs::exists(dir / "trace.json"));
  EXPECT_FALSE(fs::exists(dir / "report.html"));
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));  // what no run writes stays
}

}  // namespace
}  // namespace loom::train
