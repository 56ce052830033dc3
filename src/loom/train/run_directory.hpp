// A run directory (out_dir) belongs to one run. Before a trainer writes anything there, a
// fresh run is refused when the directory already holds a run (checkpoints, `latest`, logged
// metrics), unless `overwrite` says to delete that run first; and a lock file,
// <out_dir>/.loom.lock naming its owner's host and pid (created with O_EXCL, so exactly one
// process gets it), keeps a second process out while the first lives. A lock left by a
// process of this host that no longer runs is taken over. Trainers in one process share its
// lock (tests and `loom verify` build several); under MPI rank 0 alone takes it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/train/config.hpp"

namespace loom::train {

inline constexpr const char* kLockName = ".loom.lock";

// <dir>/.loom.lock, held from construction to destruction. dir is created when missing (and
// removed again on release when the run left nothing in it).
class RunLock {
 public:
  // loom::Error naming the owner's host and pid when another live process holds the lock.
  // quiet: no notice when a stale lock is taken over.
  RunLock(const std::string& dir, bool quiet);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  std::string dir_, path_;
  bool created_dir_ = false;
};

// The names in dir that belong to a run: checkpoints (complete or not), `latest`, a
// metrics.jsonl with records.
std::vector<std::string> previous_run_files(const std::string& dir);

class RunDirectory {
 public:
  // Collective over world: rank 0 locks config.out_dir and checks that a
  // fresh run may start there; every rank throws the same loom::Error when not. Nothing to do
  // without an out_dir.
  RunDirectory(const TrainConfig& config, comm::ProcessGroup& world, bool quiet);
  // Collective: once a resume has succeeded, `overwrite` deletes the previous run (one line
  // says so).
  void start();

 private:
  std::string out_dir_;
  bool overwrite_ = false, quiet_ = true;
  comm::ProcessGroup& world_;
  std::unique_ptr<RunLock> lock_;  // rank 0
};

}  // namespace loom::train
