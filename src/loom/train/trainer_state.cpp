// The trainer's state as pieces of the logical (serial-layout) tensors, for distributed
// checkpoints and re-sharding on load. Each element of the state is marked owner on exactly
// one rank: data-parallel replicas defer to dp rank 0 (ZeRO: to the first replica group,
// whose ranks hold disjoint shards), ranks holding a tensor whole across tp defer to tp
// rank 0, and the last pipeline stage's copy of the tied token table defers to the first.
#include "loom/train/trainer.hpp"

namespace loom::train {

CheckpointLayout Trainer::layout() const {
  return {config_.dp, config_.pp, config_.tp, config_.zero, config_.chunks, config_.hsdp_shard, config_.sequence_parallel};
}

std::vector<StatePiece> Trainer::local_state() {
  const int tp_rank = tp_group_ != nullptr ? tp_group_->rank() : 0;
  const nn::Parameter* table_copy =
      chunks_.back()->has_head() && !chunks_.front()->has_embedding() ? &chunks_.back()->head_weight() : nullptr;
  std::vector<StatePiece> out;
  // key: "model.<param>" / "optim.<kind>.<param>"; local: the parameter's tp-local shape;
  // data: elements [begin, begin + numel) of it; dp_sharded: a ZeRO shard (else a replica).
  auto add = [&](const std::string& key, const nn::Parameter& param, const Shape& local, const Tensor& data,
                 int64_t begin, bool dp_sharded) {
    const nn::ShardSpec spec = tensor_parallel_spec(key);
    const bool first_replica = dp_sharded ? dp_rank_ < config_.shard_size() : dp_rank_ == 0;
    const bool owner = first_replica && (spec.sharded() || tp_rank == 0) && &param != table_copy;
    out.push_back({key, spec.full_shape(local), PieceLayout{spec, begin, begin + data.numel()}, data, owner});
  };
  if (!sharded_) {
    std::map<std::string, Tensor> state = optimizer_->state();
    for (nn::Parameter* p : model_->parameters()) {
      add("model." + p->name(), *p, p->shape(), p->value(), 0, false);
      for (const std::string& kind : optimizer_->state_kinds())
        add("optim." + kind + "." + p->name(), *p, p->shape(), state.at(kind + "." + p->name()), 0, false);
    }
    return out;
  }
  // Sharded data parallelism: stages 1-2 hold every parameter whole; the optimizer state
  // (and under stage 3 the parameters) exist only as this rank's pieces.
  if (sharded_->stage() < 3)
    for (nn::Parameter* p : model_->parameters()) add("model." + p->name(), *p, p->shape(), p->value(), 0, false);
  std::map<std::string, Tensor> state = optimizer_->state();
  for (const parallel::ShardedDataParallel::ShardPiece& piece : sharded_->shard_pieces()) {
    const nn::Parameter& p = *piece.param;
    if (sharded_->stage() == 3) add("model." + p.name(), p, p.shape(), piece.shard->value(), piece.param_offset, true);
    for (const std::string& kind : optimizer_->state_kinds())
      add("optim." + kind + "." + p.name(), p, p.shape(), state.at(kind + "." + p.name()), piece.param_offset, true);
  }
  return out;
}

}  // namespace loom::train
