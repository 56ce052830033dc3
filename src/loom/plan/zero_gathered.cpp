#include "loom/plan/zero_gathered.hpp"

#include <algorithm>
#include <deque>

#include "loom/parallel/zero.hpp"
#include "loom/plan/moe_cost.hpp"

namespace loom::plan {

int64_t root_unit_parameters(int64_t table, int64_t position_table, int64_t hidden, bool embedding, bool head) {
  return (embedding || head ? table : 0) + (embedding ? position_table : 0) + (head ? 2 * hidden : 0);
}

ZeroModules zero_modules(const RankShape& s, const std::vector<nn::GPTStage>& chunks, const BlockLinears& linears) {
  const int64_t C = s.hidden, table = s.vocab / s.tp * C;
  // Under bf16 gathers everything but a router's weight is gathered in bf16, in a unit apart.
  auto module = [&](int64_t gathered, int64_t kept) {
    ZeroModule m;
    if (!s.bf16) gathered += kept;
    if (gathered > 0) m.units.push_back({gathered, s.bf16});
    if (s.bf16 && kept > 0) m.units.push_back({kept, false});
    return m;
  };
  ZeroModules out;
  for (const nn::GPTStage& chunk : chunks) {
    ZeroChunkModules& here = out.chunks.emplace_back();
    for (int64_t b = chunk.first_block; b < chunk.end_block; ++b) {
      const bool moe = s.moe_blocks(nn::GPTStage{b, b + 1, false, false}) > 0;
      const int64_t attention = linears.attention_weights + linears.attention_biases + 4 * C;  // and both LayerNorms
      const int64_t mlp = moe ? (s.ep == 1 ? s.experts * expert_mlp_parameters(C) : 0)
                              : linears.mlp_weights + linears.mlp_biases;
      here.blocks.push_back(module(attention + mlp, moe ? s.experts * C : 0));
    }
    // Tied: one table in the root unit of a chunk holding both ends; a pipeline's end stages
    // each keep their copy in a unit of its own.
    const bool own_table = chunk.embedding != chunk.head;
    const int64_t root = root_unit_parameters(table, s.seq * C, C, chunk.embedding, chunk.head);
    here.root = module(own_table ? root - table : root, 0);
    if (own_table) here.root.units.push_back({table, s.bf16});
  }
  return out;
}

namespace {

// The trainer's hooks over one rank's step (ShardedDataParallel::install_hooks), keeping the
// bytes the gathered units and unit gradients hold and their peak. Modules are numbered chunk
// by chunk, each chunk's blocks and then its root.
class StepWalk {
 public:
  StepWalk(const ZeroModules& modules, int64_t shards) : shards_(shards) {
    for (const ZeroChunkModules& c : modules.chunks) {
      for (const ZeroModule& m : c.blocks) modules_.push_back({m});
      modules_.push_back({c.root});
    }
  }
  int64_t peak() const { return peak_; }

  void launch(size_t m) {
    Module& x = modules_[m];
    if (x.gather != Gather::Released) return;
    x.gather = Gather::InFlight;
    for (const ZeroUnit& u : x.module.units) hold((u.bf16 ? 2 : 4) * padded(u.elements));
  }
  void wait(size_t m) {
    launch(m);
    Module& x = modules_[m];
    if (x.gather == Gather::Ready) return;
    x.gather = Gather::Ready;
    for (const ZeroUnit& u : x.module.units)
      if (u.bf16) hold(4 * padded(u.elements));  // the fp32 values widened from the bf16 buffer
  }
  void release(size_t m) {
    Module& x = modules_[m];
    if (x.gather == Gather::Released) return;
    for (const ZeroUnit& u : x.module.units)
      held_ -= (!u.bf16 ? 4 : x.gather == Gather::Ready ? 6 : 2) * padded(u.elements);
    x.gather = Gather::Released;
  }
  void bind_fresh_grad(size_t m) {
    for (const ZeroUnit& u : modules_[m].module.units) hold(4 * padded(u.elements));
  }
  // Each unit's gradient joins the reductions in flight; past the limit the oldest completes.
  void reduce_scatter(size_t m) {
    for (const ZeroUnit& u : modules_[m].module.units) {
      in_flight_.push_back(4 * padded(u.elements));
      while (static_cast<int64_t>(in_flight_.size()) > parallel::ShardedDataParallel::kMaxReductionsInFlight) {
        held_ -= in_flight_.front();
        in_flight_.pop_front();
      }
    }
  }

 private:
  enum class Gather { Released, InFlight, Ready };
  struct Module {
    ZeroModule module;
    Gather gather = Gather::Released;
  };
  int64_t padded(int64_t elements) const { return (elements + shards_ - 1) / shards_ * shards_; }
  void hold(int64_t bytes) {
    held_ += bytes;
    peak_ = std::max(peak_, held_);
  }

  int64_t shards_;
  std::vector<Module> modules_;
  std::deque<int64_t> in_flight_;
  int64_t held_ = 0, peak_ = 0;
};

// One chunk's forward and backward through its hooks: blocks [first, end), root module `root`.
struct ChunkWalk {
  StepWalk& walk;
  bool gathers;                // stage 3
  bool each_micro_batch;       // stage 3 frees a unit after each forward and backward, else after its last backward

  void forward(size_t first, size_t end, size_t root) const {
    if (!gathers) return;
    walk.launch(root);
    if (end > first) walk.launch(first);
    walk.wait(root);
    for (size_t i = first; i < end; ++i) {
      walk.wait(i);
      if (i + 1 < end) walk.launch(i + 1);
      if (each_micro_batch) walk.release(i);
    }
  }
  // `last`: the chunk's last backward of the step.
  void backward(size_t first, size_t end, size_t root, bool last) const {
    const bool frees = gathers && (each_micro_batch || last);
    if (gathers) {
      walk.wait(root);
      if (end > first) walk.launch(end - 1);
    }
    walk.bind_fresh_grad(root);
    for (size_t i = end; i-- > first;) {
      if (gathers) {
        walk.wait(i);
        if (i > first) walk.launch(i - 1);
      }
      walk.bind_fresh_grad(i);
      walk.reduce_scatter(i);
      if (frees) walk.release(i);
    }
    walk.reduce_scatter(root);
    if (frees) walk.release(root);
  }
};

}  // namespace

int64_t zero_gathered_bytes(const ZeroModules& modules, int64_t shards, int stage, int64_t micro_batches,
                            const std::vector<parallel::pipeline::Action>* actions, bool reshard_each_micro_batch) {
  if (stage < 2) return 0;
  StepWalk walk(modules, shards);
  const ChunkWalk chunk{walk, stage == 3, reshard_each_micro_batch};
  // Each chunk's modules in the walk's numbering: blocks [first, end), then its root at end.
  std::vector<size_t> first;
  size_t next = 0;
  for (const ZeroChunkModules& c : modules.chunks) {
    first.push_back(next);
    next += c.blocks.size() + 1;
  }
  auto run = [&](bool forward, size_t c, bool last) {
    const size_t end = first.at(c) + modules.chunks.at(c).blocks.size();
    forward ? chunk.forward(first[c], end, end) : chunk.backward(first[c], end, end, last);
  };
  using parallel::pipeline::ActionKind;
  if (actions != nullptr) {
    std::vector<size_t> last_backward(modules.chunks.size(), 0);  // each chunk's, in the rank's actions
    for (size_t k = 0; k < actions->size(); ++k)
      if ((*actions)[k].kind == ActionKind::Backward) last_backward.at(static_cast<size_t>((*actions)[k].chunk)) = k;
    for (size_t k = 0; k < actions->size(); ++k) {
      const parallel::pipeline::Action& a = (*actions)[k];
      if (a.kind == ActionKind::Forward || a.kind == ActionKind::Backward)
        run(a.kind == ActionKind::Forward, static_cast<size_t>(a.chunk), k == last_backward[static_cast<size_t>(a.chunk)]);
    }
    return walk.peak();
  }
  // From the second micro-batch on each starts with the same reductions in flight (the last
  // two units of the one before): two walk every moment of the step. Units kept for the step
  // walk every micro-batch (the last frees them).
  const int64_t walked = reshard_each_micro_batch ? std::min<int64_t>(micro_batches, 2) : micro_batches;
  for (int64_t mb = 0; mb < walked; ++mb)
    for (size_t c = 0; c < modules.chunks.size(); ++c) {
      run(true, c, mb == micro_batches - 1);
      run(false, c, mb == micro_batches - 1);
    }
  return walk.peak();
}

}  // namespace loom::plan
