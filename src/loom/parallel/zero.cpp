#include "loom/parallel/zero.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "loom/comm/startup_watch.hpp"
#include "loom/error.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/residual.hpp"

namespace loom::parallel {

namespace {

void copy_elements(float* dst, const float* src, int64_t n) {
  std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
}

// A full-size copy of flat[offset, offset + numel(shape)) with the given shape.
Tensor slice_copy(const Tensor& flat, int64_t offset, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::F32, MemoryCategory::Other);
  copy_elements(t.f32(), flat.f32() + offset, t.numel());
  return t;
}

}  // namespace

ShardedDataParallel::ShardedDataParallel(nn::Module& root, comm::ProcessGroup& shard, comm::ProcessGroup* replicate,
                                         ZeroOptions options)
    : shard_(shard), replicate_(replicate), options_(std::move(options)) {
  check(options_.stage >= 1 && options_.stage <= 3, "ZeRO stage must be 1, 2 or 3, got ", options_.stage);
  check(options_.algorithm == comm::AllReduceAlgorithm::Mpi || options_.algorithm == comm::AllReduceAlgorithm::Ring,
        "sharded data parallelism reduce-scatters and all-gathers with 'mpi' or 'ring', not '",
        comm::algorithm_name(options_.algorithm), "'");
  const auto mine = [this](const nn::Parameter* p) { return !options_.only || options_.only(*p); };
  // All replicas start from rank 0's parameters.
  for (nn::Parameter* p : root.parameters()) {
    if (!mine(p)) continue;
    shard_.broadcast(p->value(), 0);
    if (replicate_ != nullptr) replicate_->broadcast(p->value(), 0);
  }

  check(options_.chunks.empty() || options_.units.empty(), "ZeRO: give its units or its chunks, not both");
  std::vector<ZeroChunk> chunks = options_.chunks;
  if (chunks.empty()) chunks.push_back({&root, options_.units});
  std::set<nn::Parameter*> in_units;
  auto claim = [&](const std::vector<nn::Parameter*>& params) {
    for (nn::Parameter* p : params)
      check(in_units.insert(p).second, "parameter '", p->name(), "' belongs to two sharding units");
  };
  for (const ZeroChunk& chunk : chunks) {
    ChunkModules span{chunk, static_cast<int>(module_units_.size()), 0, 0};
    std::set<nn::Parameter*> in_blocks;
    for (nn::Module* m : chunk.units) {
      std::vector<nn::Parameter*> params;
      for (nn::Parameter* p : m->parameters())
        if (mine(p)) params.push_back(p);
      claim(params);
      in_blocks.insert(params.begin(), params.end());
      add_units(m, /*root=*/false, params);
    }
    span.end_block = span.root = static_cast<int>(module_units_.size());
    std::vector<nn::Parameter*> rest;
    for (nn::Parameter* p : chunk.module->parameters())
      if (!in_blocks.count(p) && mine(p)) rest.push_back(p);
    claim(rest);
    add_units(chunk.module, /*root=*/true, rest);
    chunks_.push_back(span);
  }
  for (nn::Parameter* p : root.parameters())
    check(!mine(p) || in_units.count(p), "parameter '", p->name(), "' lies in none of ZeRO's chunks");
  for (Unit& u : units_) build_unit(u);
  if (options_.stage == 3) gather_group_ = shard_.split(0, shard_.rank(), shard_.name() + ".gather");
  for (const ChunkModules& chunk : chunks_) install_hooks(chunk);
}

// Under bf16 gathers a module's parameters kept in fp32 (a router's weight) form a unit of their
// own, gathered in fp32 beside the module's bf16 unit; otherwise a module is one unit, but for
// options.own_unit, always one of its own. A module without parameters has none.
void ShardedDataParallel::add_units(nn::Module* module, bool root, const std::vector<nn::Parameter*>& params) {
  Unit gathered_bf16, gathered_fp32, own;
  for (Unit* u : {&gathered_bf16, &gathered_fp32, &own}) {
    u->module = module;
    u->root = root;
  }
  gathered_bf16.bf16_gather = options_.gather_in_bf16;
  own.bf16_gather = options_.gather_in_bf16 && !(options_.own_unit != nullptr && options_.own_unit->kept_in_fp32());
  for (nn::Parameter* p : params) {
    Unit& u = p == options_.own_unit ? own : options_.gather_in_bf16 && p->kept_in_fp32() ? gathered_fp32 : gathered_bf16;
    u.params.push_back(p);
  }
  std::vector<int>& indices = module_units_.emplace_back();
  for (Unit* u : {&gathered_bf16, &gathered_fp32, &own}) {
    if (u->params.empty()) continue;
    indices.push_back(static_cast<int>(units_.size()));
    units_.push_back(std::move(*u));
  }
}

ShardedDataParallel::~ShardedDataParallel() {
  // Nothing may still write into buffers about to be freed.
  for (Reduction& r : reductions_) r.work.wait();
  for (Unit& u : units_)
    if (u.gather == Unit::Gather::InFlight) u.gather_work.wait();
}

Tensor ShardedDataParallel::shard_of(const Tensor& flat) const {
  const int64_t S = flat.numel() / shard_.size();
  return flat.narrow(shard_.rank() * S, S);
}

void ShardedDataParallel::build_unit(Unit& u) {
  const int N = shard_.size();
  const int unit_index = static_cast<int>(&u - units_.data());
  int64_t numel = 0;
  for (nn::Parameter* p : u.params) {
    u.offsets.push_back(numel);
    numel += p->numel();
  }
  u.shard_numel = (numel + N - 1) / N;
  const int64_t S = u.shard_numel, begin = shard_.rank() * S;

  // Parameters: stages 1-2 keep them whole in one flat buffer; stage 3 keeps this rank's chunk.
  if (options_.stage < 3 && u.bf16_gather) {
    // The full parameters in bf16 (the GEMMs' copy), the fp32 master as this rank's shard only.
    // A parameter read outside GEMMs keeps an fp32 value of its own, widened after each gather.
    Tensor flat = Tensor::zeros({N * S}, DType::F32, MemoryCategory::Other);
    for (size_t k = 0; k < u.params.size(); ++k) flat.narrow(u.offsets[k], u.params[k]->numel()).copy_from(u.params[k]->value().view({u.params[k]->numel()}));
    u.shard_value = shard_of(flat).clone(MemoryCategory::Parameters);
    u.flat_bf16 = Tensor::empty({N * S}, DType::BF16, MemoryCategory::Parameters);
    kernels::convert_to_bf16(flat.f32(), u.flat_bf16.bf16(), N * S);
    for (size_t k = 0; k < u.params.size(); ++k) {
      nn::Parameter& p = *u.params[k];
      Tensor view = u.flat_bf16.narrow(u.offsets[k], p.numel()).view(p.shape());
      if (p.read_only_by_gemms()) p.bind_bf16_only(view);
      else p.rebind_bf16_value(view);  // its GEMM copy, if any, converted in place
    }
  } else if (options_.stage < 3) {
    u.flat_value = Tensor::zeros({N * S}, DType::F32, MemoryCategory::Parameters);
    for (size_t k = 0; k < u.params.size(); ++k) {
      nn::Parameter& p = *u.params[k];
      Tensor view = u.flat_value.narrow(u.offsets[k], p.numel()).view(p.shape());
      view.copy_from(p.value());
      p.rebind_value(view);
    }
    u.shard_value = shard_of(u.flat_value);
  } else {
    u.shard_value = Tensor::zeros({S}, DType::F32, MemoryCategory::Parameters);
    if (u.bf16_gather) u.shard_bf16 = Tensor::zeros({S}, DType::BF16, MemoryCategory::Parameters);
  }
  // Gradients: stage 1 keeps the full gradient; stages 2-3 only this rank's chunk.
  if (options_.stage == 1) {
    u.flat_grad = Tensor::zeros({N * S}, DType::F32, MemoryCategory::Gradients);
    for (size_t k = 0; k < u.params.size(); ++k)
      u.params[k]->rebind_grad(u.flat_grad.narrow(u.offsets[k], u.params[k]->numel()).view(u.params[k]->shape()));
    u.shard_grad = shard_of(u.flat_grad);
  } else {
    u.shard_grad = Tensor::zeros({S}, DType::F32, MemoryCategory::Gradients);
  }

  for (size_t k = 0; k < u.params.size(); ++k) {
    nn::Parameter* p = u.params[k];
    const int64_t lo = std::max(u.offsets[k], begin), hi = std::min(u.offsets[k] + p->numel(), begin + S);
    if (lo < hi) {
      Piece piece{unit_index, p, lo - u.offsets[k], lo - begin, nullptr};
      if (options_.stage == 3) copy_elements(u.shard_value.f32() + piece.shard_offset, p->value().f32() + piece.param_offset, hi - lo);
      piece.shard_param = std::make_unique<nn::Parameter>(p->name(), u.shard_value.narrow(piece.shard_offset, hi - lo),
                                                          u.shard_grad.narrow(piece.shard_offset, hi - lo),
                                                          p->weight_decay());
      pieces_.push_back(std::move(piece));
    }
    if (options_.stage >= 2) p->release_grad();
    if (options_.stage == 3) p->release_value();
  }
}

void ShardedDataParallel::install_hooks(const ChunkModules& chunk) {
  // Hooks work on modules (a chunk's blocks, then the chunk): each gathers, frees and reduces
  // its units; stage 3 prefetches the next block of the same chunk (a pipeline's next action
  // may be another chunk's, or a backward).
  const int first = chunk.first_block, end = chunk.end_block, root_unit = chunk.root;
  const bool params_sharded = options_.stage == 3, grads_sharded = options_.stage >= 2;
  for (int i = first; i < end; ++i) {
    nn::Module& m = *chunk.modules.units.at(static_cast<size_t>(i - first));  // a block, with or without units
    if (params_sharded) {
      m.add_pre_forward_hook([this, i, end](nn::Module&, nn::Context&) {
        wait_gather(i);
        if (i + 1 < end) launch_gather(i + 1, /*prefetch=*/true);
      });
      if (options_.reshard_each_micro_batch) m.add_post_forward_hook([this, i](nn::Module&, nn::Context&) { release(i); });
      m.add_pre_backward_hook([this, i, first](nn::Module&, nn::Context&) {
        wait_gather(i);
        if (i > first) launch_gather(i - 1, true);
      });
    }
    if (grads_sharded) m.add_pre_backward_hook([this, i](nn::Module&, nn::Context&) { bind_fresh_grad(i); });
    m.add_post_backward_hook([this, i, params_sharded](nn::Module&, nn::Context&) {
      launch_reduce_scatter(i);
      if (params_sharded && releases_after_backward()) release(i);
    });
  }
  // The chunk's root unit stays gathered from the chunk's forward to the end of its backward.
  nn::Module& m = *chunk.modules.module;
  if (params_sharded) {
    m.add_pre_forward_hook([this, root_unit, first, end](nn::Module&, nn::Context&) {
      launch_gather(root_unit, false);
      if (end > first) launch_gather(first, true);
      wait_gather(root_unit);
    });
    m.add_pre_backward_hook([this, root_unit, first, end](nn::Module&, nn::Context&) {
      wait_gather(root_unit);
      if (end > first) launch_gather(end - 1, true);
    });
  }
  if (grads_sharded) m.add_pre_backward_hook([this, root_unit](nn::Module&, nn::Context&) { bind_fresh_grad(root_unit); });
  m.add_post_backward_hook([this, root_unit, params_sharded](nn::Module&, nn::Context&) {
    launch_reduce_scatter(root_unit);
    if (params_sharded && releases_after_backward()) release(root_unit);
  });
}

void ShardedDataParallel::launch_gather(int module, bool prefetch) {
  for (int i : module_units_[module]) {
    Unit& u = units_[i];
    if (u.gather != Unit::Gather::Released) continue;
    comm::stop_for_a_test("zero-gather");
    if (u.bf16_gather) {
      // The master shard may have changed since the last gather (a step, a checkpoint load).
      kernels::convert_to_bf16(u.shard_value.f32(), u.shard_bf16.bf16(), u.shard_numel);
      u.flat_bf16 = Tensor::empty({shard_.size() * u.shard_numel}, DType::BF16, MemoryCategory::Gathered);
      u.gather_work = gather_group_->all_gather_bf16_async(u.shard_bf16.bf16(), u.flat_bf16.bf16(), u.shard_numel);
    } else {
      u.flat_value = Tensor::empty({shard_.size() * u.shard_numel}, DType::F32, MemoryCategory::Gathered);
      u.gather_work = gather_group_->all_gather_async(u.shard_value.f32(), u.flat_value.f32(), u.shard_numel, options_.algorithm);
    }
    u.gather = Unit::Gather::InFlight;
    ++gathers_;
    if (prefetch) ++prefetched_;
  }
}

void ShardedDataParallel::wait_gather(int module) {
  launch_gather(module, false);
  for (int i : module_units_[module]) {
    Unit& u = units_[i];
    if (u.gather == Unit::Gather::Ready) continue;
    u.gather_work.wait();
    if (u.bf16_gather) {
      u.flat_value = Tensor::empty({u.flat_bf16.numel()}, DType::F32, MemoryCategory::Gathered);
      kernels::convert_to_f32(u.flat_bf16.bf16(), u.flat_value.f32(), u.flat_bf16.numel());
    }
    for (size_t k = 0; k < u.params.size(); ++k) {
      nn::Parameter& p = *u.params[k];
      p.rebind_value(u.flat_value.narrow(u.offsets[k], p.numel()).view(p.shape()));
      // The GEMMs read the gathered bf16 values themselves: no second conversion.
      if (u.bf16_gather) p.rebind_bf16_value(u.flat_bf16.narrow(u.offsets[k], p.numel()).view(p.shape()));
    }
    u.gather = Unit::Gather::Ready;
  }
}

void ShardedDataParallel::release(int module) {
  for (int i : module_units_[module]) {
    Unit& u = units_[i];
    if (u.gather == Unit::Gather::InFlight) u.gather_work.wait();
    for (nn::Parameter* p : u.params) p->release_value();
    u.flat_value = Tensor();
    u.flat_bf16 = Tensor();
    u.gather = Unit::Gather::Released;
  }
}

void ShardedDataParallel::bind_fresh_grad(int module) {
  for (int i : module_units_[module]) {
    Unit& u = units_[i];
    u.flat_grad = Tensor::zeros({shard_.size() * u.shard_numel}, DType::F32, MemoryCategory::Gathered);
    for (size_t k = 0; k < u.params.size(); ++k)
      u.params[k]->rebind_grad_storage(u.flat_grad.narrow(u.offsets[k], u.params[k]->numel()).view(u.params[k]->shape()));
  }
}

void ShardedDataParallel::launch_reduce_scatter(int module) {
  if (options_.before_reduce && (options_.stage >= 2 || sync_)) options_.before_reduce();
  for (int i : module_units_[module]) launch_unit_reduce_scatter(i);
}

void ShardedDataParallel::launch_unit_reduce_scatter(int i) {
  Unit& u = units_[i];
  if (options_.stage == 1 && !sync_) return;  // gradients accumulate in the full buffer
  // In place: this rank's chunk of the full gradient becomes the group's average.
  float* flat = u.flat_grad.f32();
  float* chunk = flat + shard_.rank() * u.shard_numel;
  Reduction r{i,
              options_.reduce_in_bf16
                  ? shard_.reduce_scatter_bf16_async(flat, chunk, u.shard_numel, comm::ReduceOp::Avg)
                  : shard_.reduce_scatter_async(flat, chunk, u.shard_numel, comm::ReduceOp::Avg, options_.algorithm),
              Tensor()};
  if (options_.stage >= 2) {
    // The buffer now belongs to the reduction; the parameters hold no full gradient.
    r.buffer = std::move(u.flat_grad);
    u.flat_grad = Tensor();
    for (nn::Parameter* p : u.params) p->release_grad();
  }
  reductions_.push_back(std::move(r));
  while (options_.stage >= 2 && static_cast<int64_t>(reductions_.size()) > kMaxReductionsInFlight) {
    complete_reduction(reductions_.front());
    reductions_.pop_front();
  }
}

void ShardedDataParallel::complete_reduction(const Reduction& r) {
  r.work.wait();
  step_comm_seconds_ += r.work.busy_seconds();
  if (!r.buffer.defined()) return;  // stage 1 reduced into the shard itself
  Unit& u = units_[r.unit];
  kernels::add_inplace(u.shard_grad.f32(), shard_of(r.buffer).f32(), u.shard_numel);  // accumulate micro-batches
}

void ShardedDataParallel::sync_now() {
  check(options_.stage == 1, "ZeRO-", options_.stage, " reduces in every backward; only stage 1 can defer to sync_now()");
  sync_ = true;
  for (int m = 0; m < static_cast<int>(module_units_.size()); ++m) launch_reduce_scatter(m);
}

void ShardedDataParallel::zero_grad() {
  for (Unit& u : units_) (options_.stage == 1 ? u.flat_grad : u.shard_grad).zero_();
  gathers_ = prefetched_ = 0;
}

void ShardedDataParallel::finish_gradient_sync() {
  const auto wait_start = std::chrono::steady_clock::now();
  for (const Reduction& r : reductions_) complete_reduction(r);
  reductions_.clear();
  if (!sync_) return;
  if (replicate_ != nullptr && replicate_->size() > 1) {
    // HSDP: ranks holding the same chunk in different replicas average it.
    std::vector<comm::Work> works;
    for (Unit& u : units_)
      works.push_back(options_.reduce_in_bf16
                          ? replicate_->all_reduce_bf16_async(u.shard_grad.f32(), u.shard_numel, comm::ReduceOp::Avg)
                          : replicate_->all_reduce_async(u.shard_grad.f32(), u.shard_numel, comm::ReduceOp::Avg));
    for (comm::Work& w : works) {
      w.wait();
      step_comm_seconds_ += w.busy_seconds();
    }
  }
  exposed_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  comm_seconds_ = step_comm_seconds_;
  step_comm_seconds_ = 0.0;
}

std::vector<nn::Parameter*> ShardedDataParallel::shard_parameters() const {
  std::vector<nn::Parameter*> out;
  for (const Piece& p : pieces_) out.push_back(p.shard_param.get());
  return out;
}

std::vector<ShardedDataParallel::ShardPiece> ShardedDataParallel::shard_pieces() const {
  std::vector<ShardPiece> out;
  for (const Piece& p : pieces_) out.push_back({p.param, p.param_offset, p.shard_param.get()});
  return out;
}

double ShardedDataParallel::grad_sum_squares(const ParameterFilter& counted) {
  float sum = 0.0f;
  for (const Piece& p : pieces_)
    if (!counted || counted(*p.param)) sum += static_cast<float>(kernels::sum_squares(p.shard_param->grad().f32(), p.shard_param->numel()));
  shard_.all_reduce(&sum, 1, comm::ReduceOp::Sum);
  return sum;
}

void ShardedDataParallel::after_evaluation() {
  if (options_.stage != 3) return;
  for (int m = 0; m < static_cast<int>(module_units_.size()); ++m) release(m);
}

void ShardedDataParallel::after_optimizer_step() {
  if (options_.stage == 3) {
    after_evaluation();  // every gathered copy is stale now
    return;
  }
  std::vector<comm::Work> works;
  for (Unit& u : units_) {
    if (u.bf16_gather) {
      // Each rank sends its updated master shard as bf16; every rank widens the same bf16 values.
      bfloat16* own = u.flat_bf16.bf16() + shard_.rank() * u.shard_numel;
      kernels::convert_to_bf16(u.shard_value.f32(), own, u.shard_numel);
      works.push_back(shard_.all_gather_bf16_async(own, u.flat_bf16.bf16(), u.shard_numel));
      continue;
    }
    float* flat = u.flat_value.f32();
    works.push_back(shard_.all_gather_async(flat + shard_.rank() * u.shard_numel, flat, u.shard_numel, options_.algorithm));
  }
  for (comm::Work& w : works) w.wait();
  for (Unit& u : units_) {
    if (!u.bf16_gather) continue;
    for (size_t k = 0; k < u.params.size(); ++k) {
      nn::Parameter& p = *u.params[k];
      if (p.read_only_by_gemms()) continue;
      kernels::convert_to_f32(u.flat_bf16.bf16() + u.offsets[k], p.value().f32(), p.numel());
      p.rebind_bf16_value(u.flat_bf16.narrow(u.offsets[k], p.numel()).view(p.shape()));
    }
  }
}

Tensor ShardedDataParallel::gradient_held(nn::Parameter& p) {
  if (options_.stage == 1) return p.grad();
  for (Unit& u : units_)
    if (u.params.size() == 1 && u.params.front() == &p) return u.shard_grad;
  throw Error("ZeRO-" + std::to_string(options_.stage) + " holds '" + p.name() +
              "''s gradient only in shards of a unit it shares: give it a unit of its own (ZeroOptions::own_unit)");
}

std::vector<ShardedDataParallel::UnitLayout> ShardedDataParallel::unit_layouts() const {
  std::vector<UnitLayout> out;
  for (const Unit& u : units_)
    out.push_back({.numel = u.offsets.empty() ? 0 : u.offsets.back() + u.params.back()->numel(),
                   .padded_numel = shard_.size() * u.shard_numel,
                   .root = u.root,
                   .gathered_in_bf16 = u.bf16_gather});
  return out;
}

comm::CommStats ShardedDataParallel::comm_stats() const {
  comm::CommStats s = shard_.stats();
  if (gather_group_) {
    const comm::CommStats g = gather_group_->stats();
    s.calls += g.calls;
    s.bytes += g.bytes;
    s.seconds += g.seconds;
  }
  return s;
}

void ShardedDataParallel::reset_comm_stats() {
  shard_.reset_stats();
  if (gather_group_) gather_group_->reset_stats();
}

bool ShardedDataParallel::holds(const nn::Parameter& p) const {
  for (const Unit& u : units_)
    if (std::find(u.params.begin(), u.params.end(), &p) != u.params.end()) return true;
  return false;
}

std::map<std::string, Tensor> ShardedDataParallel::full_state_dict(const std::map<std::string, Tensor>& optimizer_state,
                                                                   const std::vector<std::string>& kinds) {
  MemoryScope scope(MemoryCategory::Other);
  std::map<std::string, Tensor> out;
  const int64_t N = shard_.size();
  // Gathers a unit's shard-shaped tensor and cuts it into full per-parameter tensors.
  auto gather_into = [&](const Unit& u, const Tensor& shard, const std::string& prefix) {
    Tensor flat = Tensor::empty({N * u.shard_numel});
    shard_.all_gather(shard, flat, options_.algorithm);
    for (size_t k = 0; k < u.params.size(); ++k)
      out[prefix + u.params[k]->name()] = slice_copy(flat, u.offsets[k], u.params[k]->shape());
  };
  for (int i = 0; i < static_cast<int>(units_.size()); ++i) {
    const Unit& u = units_[i];
    if (!parameters_in_shards()) {
      for (size_t k = 0; k < u.params.size(); ++k)
        out["model." + u.params[k]->name()] = slice_copy(u.flat_value, u.offsets[k], u.params[k]->shape());
    } else {
      gather_into(u, u.shard_value, "model.");
    }
    for (const std::string& kind : kinds) {
      Tensor shard = Tensor::zeros({u.shard_numel});
      for (const Piece& p : pieces_) {
        if (p.unit != i) continue;
        const Tensor& state = optimizer_state.at(kind + "." + p.param->name());
        copy_elements(shard.f32() + p.shard_offset, state.f32(), state.numel());
      }
      gather_into(u, shard, "optim." + kind + ".");
    }
  }
  return out;
}

}  // namespace loom::parallel
