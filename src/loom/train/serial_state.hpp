// The serial layout of a parallel run's state: what checkpoints, `loom verify` and
// state_dict() see whatever the layout. Two views of the same state:
//  - gather(): full tensors, each rank's tensor-parallel slices and pipeline stages gathered
//    (collective), as a single-file checkpoint holds them;
//  - pieces(): this rank's pieces of the logical tensors, as views of its storage, for
//    sharded checkpoints and re-sharding on load. Each element is marked owner on exactly one
//    rank: data-parallel replicas defer to dp rank 0 (ZeRO: to the first replica group, whose
//    ranks hold disjoint shards), ranks holding a tensor whole across tp defer to tp rank 0
//    (under 3D, grid rank 0; a slice several grid ranks hold, a bias, to its replica 0),
//    and the last pipeline stage's copy of the tied token table defers to the first. A
//    mixture of experts' expert weights are split over the `ep` ranks (gathered there; on a 3D
//    grid over its plane as well, gathered then as a tensor-parallel piece) and replicated on
//    the dp / ep ranks holding the same experts (the first of them owns them).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/nn/module.hpp"
#include "loom/optim/optimizer.hpp"
#include "loom/parallel/zero.hpp"
#include "loom/train/sharded_checkpoint.hpp"

namespace loom::train {

class SerialState {
 public:
  // model: this rank's part; sharded: ZeRO's state when the run shards it, else null;
  // token_table_copy: the last stage's copy of the tied table when the first stage is
  // another rank (it owns nothing), else null; cp: the context-parallel group, whose ranks
  // hold replicas (its first rank owns them).
  SerialState(nn::Module& model, optim::Optimizer& optimizer, parallel::ShardedDataParallel* sharded,
              comm::ProcessGroup& dp, comm::ProcessGroup& tp, comm::ProcessGroup& pp, comm::ProcessGroup& ep,
              int64_t shard_size, const nn::Parameter* token_table_copy, const comm::ProcessGroup* cp = nullptr);

  // Collective: full copies of every parameter ("model.<name>") and optimizer state tensor
  // ("optim.<kind>.<name>"), gathered from the shards in sharded modes.
  std::map<std::string, Tensor> state_dict();
  // Collective: the averaged gradient of every parameter ("grad.<name>") in the serial layout.
  std::map<std::string, Tensor> gradient_dict();
  std::vector<StatePiece> pieces();
  // The tensors this rank's part of the model contributes to the serial state, with their
  // full shapes: every parameter and each of its optimizer state kinds, whichever rank owns
  // their elements. Derived from the parameters alone, never from pieces(), so a checkpoint
  // (saved or loaded) is checked against it.
  StateShapes shapes() const;
  // Those of shapes() with padding rows (the token table and its moments).
  PaddedRows padded_rows() const;

 private:
  // The tensor-parallel split of a state tensor ("model.<param>", "optim.<kind>.<param>").
  nn::ShardSpec spec_of(const std::string& key) const;
  // Collective: tp slices gathered into full tensors, then every stage's onto all pp ranks.
  std::map<std::string, Tensor> gather(std::map<std::string, Tensor> local);
  std::map<std::string, Tensor> gather_pipeline(std::map<std::string, Tensor> local);
  // Collective over group: every rank's piece `slice` placed into the full tensor by `spec`,
  // rank r's at index r, or where place_of (r, spec) puts it.
  static Tensor gather_pieces(comm::ProcessGroup& group, const Tensor& slice, nn::ShardSpec spec,
                              const std::function<void(int, nn::ShardSpec&)>& place_of = {});
  // The parameters a ZeRO run leaves whole (expert parallelism's experts); empty without ZeRO.
  std::vector<nn::Parameter*> unsharded() const;

  nn::Module& model_;
  optim::Optimizer& optimizer_;
  parallel::ShardedDataParallel* sharded_;
  comm::ProcessGroup &dp_, &tp_, &pp_, &ep_;
  int64_t shard_size_;
  const nn::Parameter* token_table_copy_;
  int cp_rank_;
  std::map<std::string, nn::ShardSpec> param_specs_;
};

}  // namespace loom::train
