// Sharded data parallelism: ZeRO stages 1-3 (Rajbhandari et al. 2020), FSDP (Zhao et al.
// 2023) and hybrid sharding. Every rank of the shard group keeps 1/N of the model state:
//   stage 1: optimizer state; the full gradient is reduce-scattered once per step, each rank
//            updates its shard of the parameters, and the shards are all-gathered back;
//   stage 2: + gradients: each unit's full gradient lives only while its backward runs and
//            is reduce-scattered (and freed) right after, every micro-batch;
//   stage 3: + parameters (FSDP): a unit's parameters are all-gathered just before its
//            forward and again before its backward and freed after each; the next unit's
//            gather is prefetched while the current one computes.
// A unit is a module (one transformer block by default); the root's other parameters
// (embeddings, final LayerNorm) form the root unit, gathered from the root's forward to the
// end of its backward. Under a pipeline the model is this rank's chunks, each run on its own
// per micro-batch: each chunk's other parameters form its own root unit, hooked on the chunk,
// and stages 2-3 reduce-scatter every micro-batch's backward as without one. Each unit's parameters are laid out in one flat buffer padded to a
// multiple of N; rank r owns the r-th chunk. The optimizer steps shard_parameters(): one
// parameter per piece of a model parameter that falls into this rank's chunk.
// Hybrid sharding (HSDP): with a replicate group, shards are also averaged across replicas
// (ranks holding the same chunk) once per step. Everything hangs off module hooks; the
// model's code does not change.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/nn/module.hpp"
#include "loom/parallel/gradient_sync.hpp"

namespace loom::parallel {

// One module run as a whole (the model, or a pipeline rank's chunk) and the modules in it whose
// parameters form one unit each, in forward order (its blocks); its other parameters form its
// root unit.
struct ZeroChunk {
  nn::Module* module = nullptr;
  std::vector<nn::Module*> units;
};

struct ZeroOptions {
  int stage = 1;  // 1, 2 or 3
  // Modules whose parameters form one unit each, in forward order (a GPT's blocks), under the
  // root; without `chunks` only.
  std::vector<nn::Module*> units;
  // A pipeline rank's chunks, in its order; they hold every parameter of the root. Set either
  // this or `units`.
  std::vector<ZeroChunk> chunks{};
  // A parameter sharded in a unit of its own (a pipeline's tied token table: both end stages
  // then shard it alike, so after the reductions the two copies' shards can be summed over the
  // embedding group, gradient_held()).
  const nn::Parameter* own_unit = nullptr;
  // Reduce-scatter and all-gather algorithm: Mpi or Ring.
  comm::AllReduceAlgorithm algorithm = comm::AllReduceAlgorithm::Mpi;
  // When set, only the parameters it accepts are sharded; the others are left whole to
  // another sync (expert parallelism's experts, averaged over their own replicas).
  ParameterFilter only{};
  // When set, called before a unit's gradients are reduce-scattered: lands what another
  // layer still reduces into them (3D tensor parallelism's overlapped depth reduce-scatters
  // finish after their layer's backward, past the unit's post-backward hook).
  std::function<void()> before_reduce{};
  // Mixed precision: the gradients are reduce-scattered (and HSDP's replicas averaged) as bf16
  // on the wire, MPI's algorithm only.
  bool reduce_in_bf16 = false;
  // Mixed precision: parameters are all-gathered as bf16 (the copy the GEMMs read), half the
  // bytes; the fp32 master then lives only as this rank's shard, in every stage. Stages 1-2
  // gather after each step, stage 3 before each unit. Each rank widens the gathered bf16
  // values to fp32 for what reads parameters outside GEMMs (LayerNorm, biases, embeddings), as
  // FSDP's MixedPrecision(param_dtype=bf16) computes with them. A parameter kept in fp32
  // (nn::Parameter::kept_in_fp32: a router's weight) is gathered in fp32 instead, in a unit of
  // its own beside its module's bf16 one, so it stays bit-equal to its fp32 master.
  bool gather_in_bf16 = false;
  // Stage 3: whether a unit's gathered parameters are freed after each forward and each
  // backward (gathered again for the next: two gathers a micro-batch, the least memory) or kept
  // from the unit's first forward of a step to its last backward (sync on: one gather a step,
  // every unit whole meanwhile, as FSDP's reshard_after_forward=False under a pipeline, whose
  // micro-batches' forwards run before their backwards).
  bool reshard_each_micro_batch = true;
};

class ShardedDataParallel : public GradientSync {
 public:
  // Collective over shard (and replicate): rank 0's parameters are broadcast, then sharded.
  ShardedDataParallel(nn::Module& root, comm::ProcessGroup& shard, comm::ProcessGroup* replicate, ZeroOptions options);
  ~ShardedDataParallel();
  ShardedDataParallel(const ShardedDataParallel&) = delete;
  ShardedDataParallel& operator=(const ShardedDataParallel&) = delete;

  int stage() const { return options_.stage; }
  // What the optimizer steps: this rank's pieces of the parameters, 1-D, named after them.
  std::vector<nn::Parameter*> shard_parameters() const;
  std::vector<nn::Parameter*> optimizer_parameters() const override { return shard_parameters(); }
  bool shards_gradients() const override { return true; }
  bool reduces_every_backward() const override { return options_.stage >= 2; }
  // Stage 1: p's full gradient; stages 2-3: the shard of p's own unit (options.own_unit).
  Tensor gradient_held(nn::Parameter& p) override;
  // Gradient accumulation: stage 1 reduces only after a backward with sync on; stages 2-3
  // reduce every micro-batch (no full gradient is kept) and average replicas only on sync.
  void set_sync(bool on) override { sync_ = on; }
  // Zeroes the gradient shards (and stage 1's full gradients) before a step.
  void zero_grad() override;
  // Waits for every reduction; afterwards each gradient shard is the average over the whole
  // data-parallel group (shard x replicate).
  void finish_gradient_sync() override;
  // Stage 1: reduce-scatters every unit now (a pipeline reduces once, after its last
  // backward, with sync off until then); finish_gradient_sync() then waits.
  void sync_now() override;
  // Collective: the squared norm of the whole averaged gradient, summed over the shards;
  // counted (when given) picks the model parameters to include.
  double grad_sum_squares(const ParameterFilter& counted) override;
  // After the optimizer stepped the shards: stages 1-2 all-gather the updated parameters;
  // stage 3 drops any gathered copy (now stale).
  void after_optimizer_step() override;
  void after_evaluation() override;
  // Whether the fp32 parameters exist only as this rank's pieces (stage 3, or mixed precision's
  // bf16 gathers): checkpoints read and write them there, and after writing
  // after_optimizer_step() spreads them to the model again.
  bool parameters_in_shards() const { return options_.stage == 3 || options_.gather_in_bf16; }

  // This rank's pieces for distributed checkpoints: the model parameter, the first element
  // of it the piece holds, and the optimizer's 1-D parameter over the piece (under stage 3
  // its value is the only copy of those elements).
  struct ShardPiece {
    const nn::Parameter* param;
    int64_t param_offset;
    nn::Parameter* shard;
  };
  std::vector<ShardPiece> shard_pieces() const;

  // Checkpoints in the serial layout. Collective: full copies of every parameter
  // ("model.<name>") and of every optimizer state tensor ("optim.<kind>.<name>") from the
  // shards, given the optimizer's state() and state_kinds().
  std::map<std::string, Tensor> full_state_dict(const std::map<std::string, Tensor>& optimizer_state,
                                                const std::vector<std::string>& kinds);

  // Sharding units: one per module (each chunk's root unit after its blocks'), two for a module
  // whose parameters kept in fp32 are gathered apart from its bf16 ones, one more for own_unit;
  // none for a module without parameters.
  int64_t unit_count() const { return static_cast<int64_t>(units_.size()); }
  // Whether p is sharded here (false for a parameter options.only left out).
  bool holds(const nn::Parameter& p) const;
  // Each unit (a chunk's after its blocks'), for what its collectives move: its elements before
  // and after padding to a multiple of N, whether it is a chunk's root unit (stage 3 gathers it
  // once a micro-batch, a block's twice) and whether it is all-gathered in bf16 (2 bytes an element) or fp32 (4).
  struct UnitLayout {
    int64_t numel;
    int64_t padded_numel;
    bool root;
    bool gathered_in_bf16;
  };
  std::vector<UnitLayout> unit_layouts() const;
  // What the shard group and stage 3's gather group moved since the last reset (stats()).
  comm::CommStats comm_stats() const;
  void reset_comm_stats();
  // Reductions in flight at once in stages 2-3: each holds a unit's full gradient, so this
  // bounds the extra memory while still overlapping communication with backward. What the
  // units hold whole at once (MemoryCategory::Gathered) is counted by plan/zero_gathered.hpp.
  static constexpr int64_t kMaxReductionsInFlight = 2;
  // In the last synced step: seconds the gradient reductions took on the communication
  // thread, and seconds finish_gradient_sync() waited for them.
  double comm_seconds() const override { return comm_seconds_; }
  double exposed_comm_seconds() const override { return exposed_seconds_; }
  // Stage 3: all-gathers in the last step, and how many of them were prefetched (launched
  // before the unit needed them).
  int64_t gathers() const { return gathers_; }
  int64_t prefetched_gathers() const { return prefetched_; }

 private:
  struct Unit {
    nn::Module* module = nullptr;  // the chunk for a chunk's root unit
    bool root = false;             // a chunk's root unit
    bool bf16_gather = false;      // all-gathered in bf16 (gather_in_bf16, no parameter kept in fp32)
    std::vector<nn::Parameter*> params;
    std::vector<int64_t> offsets;  // of each parameter in the flat buffer
    int64_t shard_numel = 0;       // S; the flat buffer is N * S (padded)
    Tensor flat_value;             // stages 1-2: always; stage 3: while gathered
    Tensor shard_value;            // stage 3 and bf16 gathers: this rank's S values (else a view of flat_value)
    Tensor shard_bf16;             // stage 3 with bf16 gathers: shard_value in bf16, what is sent
    Tensor flat_bf16;              // bf16 gathers: the gathered bf16 values, while gathered
    Tensor flat_grad;              // stage 1: always; stages 2-3: during the unit's backward
    Tensor shard_grad;             // this rank's S gradient values (stage 1: a view of flat_grad)
    enum class Gather { Released, InFlight, Ready } gather = Gather::Released;
    bool prefetched = false;
    comm::Work gather_work;
  };
  struct Reduction {
    int unit;
    comm::Work work;
    Tensor buffer;  // stages 2-3: the unit's full gradient, freed once its chunk is added to the shard
  };
  struct Piece {  // the part of a model parameter inside this rank's shard
    int unit;
    nn::Parameter* param;
    int64_t param_offset;  // first element of param in the piece
    int64_t shard_offset;  // where it sits in the unit's shard
    std::unique_ptr<nn::Parameter> shard_param;
  };

  // A chunk's modules in module_units_: its blocks [first_block, end_block), then its own.
  struct ChunkModules {
    ZeroChunk modules;  // the chunk and its blocks
    int first_block, end_block, root;
  };

  void add_units(nn::Module* module, bool root, const std::vector<nn::Parameter*>& params);
  void build_unit(Unit& u);
  void install_hooks(const ChunkModules& chunk);
  // Per module (its index in module_units_), for each of its units. Stage 3: starts the
  // all-gather (if not under way) / waits for it and binds the parameters to the gathered
  // buffer / frees it.
  void launch_gather(int module, bool prefetch);
  // Stage 3, after a unit's backward: per micro-batch always, per step at its last (sync on).
  bool releases_after_backward() const { return options_.reshard_each_micro_batch || sync_; }
  void wait_gather(int module);
  void release(int module);
  // Stages 2-3: a fresh zeroed full gradient for the module's backward.
  void bind_fresh_grad(int module);
  void launch_reduce_scatter(int module);
  void launch_unit_reduce_scatter(int unit);
  void complete_reduction(const Reduction& r);
  Tensor shard_of(const Tensor& flat) const;

  comm::ProcessGroup& shard_;
  comm::ProcessGroup* replicate_;
  std::unique_ptr<comm::ProcessGroup> gather_group_;  // all-gathers on their own thread
  ZeroOptions options_;
  std::vector<Unit> units_;  // each chunk's blocks', then its root units
  std::vector<std::vector<int>> module_units_;  // each module's units, in the same order
  std::vector<ChunkModules> chunks_;
  std::vector<Piece> pieces_;
  std::deque<Reduction> reductions_;  // in flight, oldest first
  bool sync_ = true;
  double comm_seconds_ = 0.0, exposed_seconds_ = 0.0, step_comm_seconds_ = 0.0;
  int64_t gathers_ = 0, prefetched_ = 0;
};

}  // namespace loom::parallel
