#include "loom/train/serial_state.hpp"

#include <nlohmann/json.hpp>

#include "loom/comm/byte_transport.hpp"
#include "loom/error.hpp"
#include "loom/train/checkpoint.hpp"

namespace loom::train {

SerialState::SerialState(nn::Module& model, optim::Optimizer& optimizer, parallel::ShardedDataParallel* sharded,
                         comm::ProcessGroup& dp, comm::ProcessGroup& tp, comm::ProcessGroup& pp, comm::ProcessGroup& ep,
                         int64_t shard_size, const nn::Parameter* token_table_copy, const comm::ProcessGroup* cp)
    : model_(model), optimizer_(optimizer), sharded_(sharded), dp_(dp), tp_(tp), pp_(pp), ep_(ep), shard_size_(shard_size),
      token_table_copy_(token_table_copy), cp_rank_(cp != nullptr ? cp->rank() : 0) {
  for (nn::Parameter* p : model_.parameters()) param_specs_[p->name()] = p->shard_spec();
}

nn::ShardSpec SerialState::spec_of(const std::string& key) const {
  // "model.<param>" or "optim.<kind>.<param>": the parameter's spec.
  std::string name = key.substr(key.find('.') + 1);
  if (key.rfind("optim.", 0) == 0) name = name.substr(name.find('.') + 1);
  auto it = param_specs_.find(name);
  check(it != param_specs_.end(), "state tensor '", key, "' belongs to no parameter");
  return it->second;
}

std::map<std::string, Tensor> SerialState::state_dict() {
  if (!sharded_) return gather(checkpoint_tensors(model_, &optimizer_));
  std::map<std::string, Tensor> state = optimizer_.state(), local = sharded_->full_state_dict(state, optimizer_.state_kinds());
  for (nn::Parameter* p : unsharded()) {  // whole on this rank: its own values
    local.emplace("model." + p->name(), p->value());
    for (const std::string& kind : optimizer_.state_kinds())
      local.emplace("optim." + kind + "." + p->name(), state.at(kind + "." + p->name()));
  }
  return gather(std::move(local));
}

std::vector<nn::Parameter*> SerialState::unsharded() const {
  std::vector<nn::Parameter*> out;
  if (sharded_)
    for (nn::Parameter* p : model_.parameters())
      if (!sharded_->holds(*p)) out.push_back(p);
  return out;
}

std::map<std::string, Tensor> SerialState::gradient_dict() {
  // Named like optimizer state ("optim.grad.<param>") so the data-parallel shards, the
  // tensor-parallel slices and the pipeline stages are gathered by the same code.
  std::map<std::string, Tensor> grads;
  for (nn::Parameter* p : optimizer_.params()) grads["grad." + p->name()] = p->grad();
  std::map<std::string, Tensor> local;
  if (sharded_) {
    for (auto& [key, t] : sharded_->full_state_dict(grads, {"grad"}))
      if (key.rfind("optim.", 0) == 0) local.emplace(key, t);
    for (nn::Parameter* p : unsharded()) local.emplace("optim.grad." + p->name(), p->grad());
  } else {
    for (auto& [key, t] : grads) local.emplace("optim." + key, t);
  }
  std::map<std::string, Tensor> out;
  for (auto& [key, t] : gather(std::move(local))) out.emplace(key.substr(std::string("optim.").size()), t);
  return out;
}

std::map<std::string, Tensor> SerialState::gather(std::map<std::string, Tensor> local) {
  // Experts' stacked weights first: each rank's block gathered over ep, at its ep rank. That is
  // the whole tensor, or on a 3D grid whose plane shares the experts out too, the plane
  // rank's block: from here on a tensor-parallel piece.
  std::map<std::string, nn::ShardSpec> specs;
  for (auto& [key, slice] : local) {
    nn::ShardSpec spec = spec_of(key);
    if (spec.sharded() && spec.axis == nn::ShardSpec::kExpertAxis) {
      const int64_t ep = ep_.size(), plane = spec.parts / ep;
      slice = gather_pieces(ep_, slice, nn::ShardSpec{.dim = 0, .parts = ep, .index = 0});
      spec = plane == 1 ? nn::ShardSpec{} : nn::ShardSpec{.dim = 0, .parts = plane, .index = spec.index / ep, .replica = spec.replica};
    }
    specs.emplace(key, spec);
  }
  // Tensor parallel: gather every split tensor's slices (in key order on every rank). Each
  // rank's piece is placed by its own spec: its tp rank under 1D tensor parallelism, its row,
  // col and depth position under 3D (where several ranks may hold the same piece).
  std::map<std::string, Tensor> full;
  nlohmann::json mine = nlohmann::json::array();
  for (auto& [key, slice] : local)
    if (const nn::ShardSpec& spec = specs.at(key); spec.sharded()) mine.push_back({spec.index, spec.index2});
  const std::vector<std::string> places =
      tp_.size() > 1 ? comm::all_gather_bytes(tp_, mine.dump()) : std::vector<std::string>{mine.dump()};
  std::vector<nlohmann::json> place;
  for (const std::string& s : places) place.push_back(nlohmann::json::parse(s));
  size_t k = 0;
  for (auto& [key, slice] : local) {
    const nn::ShardSpec& spec = specs.at(key);
    if (!spec.sharded()) {
      full[key] = slice;
      continue;
    }
    full[key] = gather_pieces(tp_, slice, spec, [&](int r, nn::ShardSpec& at) {
      at.index = place[static_cast<size_t>(r)].at(k).at(0).get<int64_t>();
      at.index2 = place[static_cast<size_t>(r)].at(k).at(1).get<int64_t>();
    });
    ++k;
  }
  return pp_.size() > 1 ? gather_pipeline(std::move(full)) : full;
}

Tensor SerialState::gather_pieces(comm::ProcessGroup& group, const Tensor& slice, nn::ShardSpec spec,
                                  const std::function<void(int, nn::ShardSpec&)>& place_of) {
  const int t = group.size();
  const int64_t n = slice.numel();
  Tensor gathered = Tensor::empty({t * n}, DType::F32, MemoryCategory::Other);
  group.all_gather(slice.view({n}), gathered);
  Tensor whole = Tensor::empty(spec.full_shape(slice.shape()), DType::F32, MemoryCategory::Other);
  for (int r = 0; r < t; ++r) {
    if (place_of) place_of(r, spec);
    else spec.index = r;
    place_shard(gathered.narrow(r * n, n).view(slice.shape()), whole, spec);
  }
  return whole;
}

std::map<std::string, Tensor> SerialState::gather_pipeline(std::map<std::string, Tensor> local) {
  // Every stage learns every stage's tensor names and shapes in one gather; then each stage in
  // turn broadcasts its values, in key order. The first and last stage both hold the tied
  // token table; the first stage's copy is kept.
  nlohmann::json mine = nlohmann::json::array();
  for (const auto& [key, t] : local) mine.push_back(nlohmann::json::array({key, t.shape()}));
  const std::vector<std::string> stages = comm::all_gather_bytes(pp_, mine.dump());
  std::map<std::string, Tensor> all;
  for (int owner = 0; owner < pp_.size(); ++owner)
    for (const nlohmann::json& entry : nlohmann::json::parse(stages[static_cast<size_t>(owner)])) {
      const std::string key = entry[0].get<std::string>();
      Tensor t = owner == pp_.rank() ? local.at(key)
                                     : Tensor::empty(entry[1].get<Shape>(), DType::F32, MemoryCategory::Other);
      pp_.broadcast(t, owner);
      all.emplace(key, t);
    }
  return all;
}

StateShapes SerialState::shapes() const {
  StateShapes out;
  for (const nn::Parameter* p : model_.parameters()) {
    const Shape full = p->shard_spec().full_shape(p->shape());
    out.emplace("model." + p->name(), full);
    for (const std::string& kind : optimizer_.state_kinds()) out.emplace("optim." + kind + "." + p->name(), full);
  }
  return out;
}

PaddedRows SerialState::padded_rows() const {
  PaddedRows out;
  for (const nn::Parameter* p : model_.parameters()) {
    if (p->padded_past_row() == 0) continue;
    out.emplace("model." + p->name(), p->padded_past_row());
    for (const std::string& kind : optimizer_.state_kinds()) out.emplace("optim." + kind + "." + p->name(), p->padded_past_row());
  }
  return out;
}

std::vector<StatePiece> SerialState::pieces() {
  const int tp_rank = tp_.rank(), dp_rank = dp_.rank();
  std::vector<StatePiece> out;
  // key: "model.<param>" / "optim.<kind>.<param>"; local: the parameter's tp-local shape;
  // data: elements [begin, begin + numel) of it; dp_sharded: a ZeRO shard (else a replica).
  auto add = [&](const std::string& key, const nn::Parameter& param, const Shape& local, const Tensor& data,
                 int64_t begin, bool dp_sharded) {
    const nn::ShardSpec spec = spec_of(key);
    // Experts: replicas on the ranks of expert_dp (dp ranks ep apart); the first ep ranks hold
    // one copy. Context parallelism: every cp rank holds a replica; the first owns it.
    const bool expert = spec.axis == nn::ShardSpec::kExpertAxis;
    const bool first_replica =
        cp_rank_ == 0 && (dp_sharded ? dp_rank < shard_size_ : (expert ? dp_rank < ep_.size() : dp_rank == 0));
    // A split piece is owned by its replica 0 (under 3D several grid ranks hold a piece; the
    // tp ranks, or a grid's depth ranks, hold the same experts), a whole one by tp rank 0.
    const bool tp_owner = spec.sharded() ? spec.replica == 0 : tp_rank == 0;
    const bool owner = first_replica && tp_owner && &param != token_table_copy_;
    out.push_back({key, spec.full_shape(local), PieceLayout{spec, begin, begin + data.numel()}, data, owner,
                   param.padded_past_row()});
  };
  if (!sharded_) {
    std::map<std::string, Tensor> state = optimizer_.state();
    for (nn::Parameter* p : model_.parameters()) {
      add("model." + p->name(), *p, p->shape(), p->value(), 0, false);
      for (const std::string& kind : optimizer_.state_kinds())
        add("optim." + kind + "." + p->name(), *p, p->shape(), state.at(kind + "." + p->name()), 0, false);
    }
    return out;
  }
  // Sharded data parallelism: stages 1-2 hold every parameter whole; the optimizer state
  // (and under stage 3 or bf16 gathers the fp32 parameters) exist only as this rank's pieces.
  if (!sharded_->parameters_in_shards())
    for (nn::Parameter* p : model_.parameters()) add("model." + p->name(), *p, p->shape(), p->value(), 0, false);
  std::map<std::string, Tensor> state = optimizer_.state();
  for (const parallel::ShardedDataParallel::ShardPiece& piece : sharded_->shard_pieces()) {
    const nn::Parameter& p = *piece.param;
    if (sharded_->parameters_in_shards()) add("model." + p.name(), p, p.shape(), piece.shard->value(), piece.param_offset, true);
    for (const std::string& kind : optimizer_.state_kinds())
      add("optim." + kind + "." + p.name(), p, p.shape(), state.at(kind + "." + p.name()), piece.param_offset, true);
  }
  // Left whole by ZeRO (experts): replicas as without it. Their values were not added above
  // wherever ZeRO keeps its own parameters only as shards (stage 3, or bf16 gathers at 1-2).
  for (nn::Parameter* p : unsharded()) {
    if (sharded_->parameters_in_shards()) add("model." + p->name(), *p, p->shape(), p->value(), 0, false);
    for (const std::string& kind : optimizer_.state_kinds())
      add("optim." + kind + "." + p->name(), *p, p->shape(), state.at(kind + "." + p->name()), 0, false);
  }
  return out;
}

}  // namespace loom::train
