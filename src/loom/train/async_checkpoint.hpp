// Checkpoints written behind training (`--checkpoint-async`; torchtitan's async checkpointing,
// Megatron's --async-save): the trainer encodes what this rank writes (PreparedCheckpoint: its
// pieces copied into the file's bytes, the only pause), and a writer thread puts it on disk and
// publishes it through the same collective save, on its own duplicate of the world group, while
// the next steps run. One write is in flight at a time: the next checkpoint, a stop and the
// run's end wait for it first (finish()); a failed write is raised there, on every rank alike
// (the save agrees on errors), and leaves the previous checkpoint `latest`.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "loom/comm/process_group.hpp"
#include "loom/train/sharded_checkpoint.hpp"

namespace loom::train {

class AsyncCheckpointWriter {
 public:
  // Collective over world: the writer's group is split from it.
  explicit AsyncCheckpointWriter(comm::ProcessGroup& world);
  // Waits for a write in flight (its error, if any, is dropped: the run is ending on another).
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // Starts writing prepared on the writer thread; none may be in flight (finish() first).
  void start(PreparedCheckpoint prepared);
  bool in_flight() const { return write_.valid(); }
  // Whether this rank's part of the write in flight has ended (no wait, no collective).
  bool done_here() const;

  struct Written {
    int64_t step = 0;
    std::string path;       // "" on a rank that wrote no file of its own (a single file's other ranks)
    double seconds = 0.0;   // from start() to the write's end on this rank
  };
  // Waits for the write in flight and returns it (nullopt when none was); its loom::Error, on
  // every rank, names the step that was being written.
  std::optional<Written> finish();

 private:
  std::unique_ptr<comm::ProcessGroup> group_;
  std::shared_ptr<PreparedCheckpoint> prepared_;  // held until the write ends
  int64_t step_ = 0;
  std::future<Written> write_;
};

}  // namespace loom::train
