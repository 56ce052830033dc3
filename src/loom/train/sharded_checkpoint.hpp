// Distributed checkpoints: every rank writes only the pieces of the logical (serial-layout)
// state it alone holds into checkpoint-<step>.tmp/rank-NNNNN.safetensors; after every rank
// has reported its file's size and CRC-32, rank 0 writes manifest.json last, renames the
// directory to checkpoint-<step>/ and only then moves `latest` and prunes old checkpoints.
// Loading goes through one path for every layout pair (and for single-file checkpoints):
// each destination piece is filled from the checkpoint pieces it overlaps (reshard.hpp).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/train/checkpoint_manifest.hpp"
#include "loom/train/safetensors.hpp"
#include "loom/train/state_coverage.hpp"

namespace loom::train {

// A save split where this rank's file is laid out: prepare_*_checkpoint() builds it (and with a
// buffer copies the state into it, the only part that reads the model and optimizer, so training
// may step on once it returns: `--checkpoint-async`); write() puts it on disk and publishes it,
// collective over the world group given (another thread's duplicate of it will do). Without a
// buffer write() reads the state where it lies (a foreground save: no copy held, and nothing may
// change in between). Saving is the two back to back. An error while preparing is carried to
// write(), which agrees on it like any other.
class PreparedCheckpoint {
 public:
  PreparedCheckpoint(int64_t step, std::shared_ptr<const std::string> bytes,
                     std::function<std::string(comm::ProcessGroup&)> write);
  // Collective: the path written (a single file's on rank 0 only, "" elsewhere); loom::Error on
  // every rank when any rank failed, the previous checkpoint still `latest`.
  std::string write(comm::ProcessGroup& world) const { return write_(world); }
  int64_t step() const { return step_; }
  // The copy of its file this rank holds until the write ends (0 without a buffer, or for a rank
  // that writes nothing), counted by the memory tracker as MemoryCategory::Other meanwhile.
  int64_t bytes() const { return bytes_ ? static_cast<int64_t>(bytes_->size()) : 0; }
  ~PreparedCheckpoint();
  PreparedCheckpoint(PreparedCheckpoint&&) = default;  // the moved-from one counts nothing
  PreparedCheckpoint& operator=(PreparedCheckpoint&&) = delete;

 private:
  int64_t step_;
  std::shared_ptr<const std::string> bytes_;
  std::function<std::string(comm::ProcessGroup&)> write_;
};

// This rank's part of save_sharded_checkpoint (no collective). buffer: the file copied into it
// (reusing its allocation: a checkpoint written again is not allocated and page-faulted again),
// held by the result until its write ends; null: no copy, write() reads the state.
PreparedCheckpoint prepare_sharded_checkpoint(const std::string& run_dir, const std::vector<StatePiece>& pieces,
                                              const StateShapes& expected, const CheckpointInfo& info,
                                              const CheckpointLayout& layout, int64_t keep,
                                              std::shared_ptr<std::string> buffer = nullptr);
// save_single_checkpoint's file laid out on rank 0 (tensors: the gathered serial state there;
// ignored elsewhere), copied into buffer as above. No collective.
PreparedCheckpoint prepare_single_checkpoint(const std::string& run_dir, const std::map<std::string, Tensor>& tensors,
                                             const StateShapes& expected, const CheckpointInfo& info, int64_t keep,
                                             int rank, std::shared_ptr<std::string> buffer = nullptr);

// Collective over world. Writes <run_dir>/checkpoint-<step>/ as above;
// returns its path on every rank. A failure on any rank is a loom::Error on every rank,
// and leaves the previous checkpoint and `latest` untouched. expected: this rank's
// StateShapes; the union of every rank's pieces must hold the union of every rank's
// expected tensors (rank 0 checks it as it assembles the manifest), else nothing is written.
std::string save_sharded_checkpoint(const std::string& run_dir, const std::vector<StatePiece>& pieces,
                                    const StateShapes& expected, const CheckpointInfo& info,
                                    const CheckpointLayout& layout, int64_t keep, comm::ProcessGroup& world);

// Collective over world: rank 0 writes tensors (the whole serial state, gathered on it) as
// <run_dir>/checkpoint-<step>.safetensors and publishes it; returns its path there, "" on the
// other ranks. When tensors lack one of any rank's expected tensors, or rank 0 fails to
// write, every rank throws the loom::Error and the previous checkpoint stays `latest`.
std::string save_single_checkpoint(const std::string& run_dir, const std::map<std::string, Tensor>& tensors,
                                   const StateShapes& expected, const CheckpointInfo& info, int64_t keep,
                                   comm::ProcessGroup& world);

// A checkpoint to load from: a sharded directory (its manifest validated) or a single file
// (seen as a manifest of whole tensors, so loading has one code path). A name
// "checkpoint-<step>" must agree with the step the checkpoint records.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path);
  const std::string& path() const { return path_; }
  bool sharded() const { return sharded_; }
  const Manifest& manifest() const { return manifest_; }
  const CheckpointInfo& info() const { return manifest_.info; }
  // Fills every destination from the pieces it overlaps, reading only those (and verifying the
  // CRC-32 of every rank file it opens, whole); loom::Error
  // naming the tensor for a missing tensor or a shape mismatch, naming the file for a
  // missing, truncated or corrupted rank file.
  void load_into(const std::vector<StatePiece>& destinations);
  // Reads every rank file whole and checks its size and CRC-32 against the manifest (a
  // single file was checked whole on opening); loom::Error naming the file.
  void verify_files();

 private:
  void verify_file(const std::string& name);  // one rank file's size and CRC-32
  Tensor piece_data(const ManifestPiece& piece);

  std::string path_;
  bool sharded_ = false;
  Manifest manifest_;
  // A single-file checkpoint: its checksum verified on opening (one covers the whole data), each
  // tensor read when a destination needs it.
  std::unique_ptr<TensorFileReader> single_;
  std::map<std::string, std::unique_ptr<TensorFileReader>> files_;  // rank files opened so far
};

// Collective: every rank's string, on every rank.
std::vector<std::string> all_gather_strings(comm::ProcessGroup& world, const std::string& mine);

// Runs f on every rank of world; when it fails anywhere, every rank
// throws, naming the first rank that failed and its message, so no rank is left waiting
// in a collective for one that gave up.
void on_every_rank(comm::ProcessGroup& world, const std::function<void()>& f);

// Loads destinations from the checkpoint at path; with "optim." destinations the checkpoint's
// optimizer must be optimizer_name. The checkpoint must hold every tensor of expected (a
// resume's StateShapes) with its shape, whether or not a destination asks for it: a
// loom::Error naming the first it lacks (padded: those of expected a checkpoint may hold
// with other padding). Returns the checkpoint's metadata.
CheckpointInfo load_state(const std::string& path, const std::vector<StatePiece>& destinations,
                          const std::string& optimizer_name, const StateShapes& expected = {},
                          const PaddedRows& padded = {});

// loom::Error naming the first tensor of destinations the checkpoint lacks or holds in another
// shape (but for a token table's padding, which loading re-pads), or the first of expected
// (a resume's StateShapes, re-padded as padded allows) it lacks: what load_state checks before
// reading any tensor.
void check_checkpoint_fits(const CheckpointReader& reader, const std::vector<StatePiece>& destinations,
                           const StateShapes& expected, const PaddedRows& padded = {});

// Every tensor of the checkpoint in full, for one process (`loom convert`, `loom sample`).
std::map<std::string, Tensor> read_full_state(CheckpointReader& reader);

}  // namespace loom::train
