#include "loom/plan/zero_gathered.hpp"

#include <algorithm>
#include <deque>

#include "loom/parallel/zero.hpp"
#include "loom/plan/moe_cost.hpp"

namespace loom::plan {

ZeroModules zero_modules(const RankShape& s, const std::vector<nn::GPTStage>& chunks, const BlockLinears& linears) {
  const int64_t C = s.hidden, table = s.vocab / s.tp * C;
  // Under bf16 gathers everything but a router's weight is gathered in bf16.
  auto module = [&](int64_t gathered, int64_t kept) {
    return s.bf16 ? ZeroModule{gathered, kept} : ZeroModule{0, gathered + kept};
  };
  ZeroModules out;
  int64_t root = 0;
  for (const nn::GPTStage& chunk : chunks) {
    for (int64_t b = chunk.first_block; b < chunk.end_block; ++b) {
      const bool moe = s.moe_blocks(nn::GPTStage{b, b + 1, false, false}) > 0;
      const int64_t attention = linears.attention_weights + linears.attention_biases + 4 * C;  // and both LayerNorms
      const int64_t mlp = moe ? (s.ep == 1 ? s.experts * expert_mlp_parameters(C) : 0)
                              : linears.mlp_weights + linears.mlp_biases;
      out.blocks.push_back(module(attention + mlp, moe ? s.experts * C : 0));
    }
    if (chunk.embedding || chunk.head) root += table;  // tied: one table on a rank holding both ends
    if (chunk.embedding) root += s.seq * C;
    if (chunk.head) root += 2 * C;
  }
  out.root = module(root, 0);
  return out;
}

namespace {

// The trainer's hooks over one rank's step (ShardedDataParallel::install_hooks), keeping the
// bytes the gathered units and unit gradients hold and their peak.
class StepWalk {
 public:
  StepWalk(const ZeroModules& modules, int64_t shards) : shards_(shards) {
    for (const ZeroModule& m : modules.blocks) modules_.push_back({m});
    modules_.push_back({modules.root});
  }
  int64_t peak() const { return peak_; }

  void launch(size_t m) {
    Module& x = modules_[m];
    if (x.gather != Gather::Released) return;
    x.gather = Gather::InFlight;
    hold(2 * padded(x.units.bf16) + 4 * padded(x.units.fp32));
  }
  void wait(size_t m) {
    launch(m);
    Module& x = modules_[m];
    if (x.gather == Gather::Ready) return;
    x.gather = Gather::Ready;
    hold(4 * padded(x.units.bf16));  // the fp32 values widened from the bf16 buffer
  }
  void release(size_t m) {
    Module& x = modules_[m];
    if (x.gather == Gather::Released) return;
    held_ -= (x.gather == Gather::Ready ? 6 : 2) * padded(x.units.bf16) + 4 * padded(x.units.fp32);
    x.gather = Gather::Released;
  }
  void bind_fresh_grad(size_t m) { hold(4 * (padded(modules_[m].units.bf16) + padded(modules_[m].units.fp32))); }
  // Each unit's gradient joins the reductions in flight; past the limit the oldest completes.
  void reduce_scatter(size_t m) {
    const ZeroModule& u = modules_[m].units;
    // A module without parameters kept in fp32 is one unit; under bf16 gathers, the bf16 one first.
    const bool two_units = u.bf16 > 0 && u.fp32 > 0;
    for (const int64_t elements : two_units ? std::vector<int64_t>{u.bf16, u.fp32} : std::vector<int64_t>{u.bf16 + u.fp32}) {
      in_flight_.push_back(4 * padded(elements));
      while (static_cast<int64_t>(in_flight_.size()) > parallel::ShardedDataParallel::kMaxReductionsInFlight) {
        held_ -= in_flight_.front();
        in_flight_.pop_front();
      }
    }
  }

 private:
  enum class Gather { Released, InFlight, Ready };
  struct Module {
    ZeroModule units;
    Gather gather = Gather::Released;
  };
  int64_t padded(int64_t elements) const { return (elements + shards_ - 1) / shards_ * shards_; }
  void hold(int64_t bytes) {
    held_ += bytes;
    peak_ = std::max(peak_, held_);
  }

  int64_t shards_;
  std::vector<Module> modules_;  // the blocks, then the root
  std::deque<int64_t> in_flight_;
  int64_t held_ = 0, peak_ = 0;
};

}  // namespace

int64_t zero_gathered_bytes(const ZeroModules& modules, int64_t shards, int stage, int64_t micro_batches) {
  if (stage < 2) return 0;
  StepWalk walk(modules, shards);
  const size_t blocks = modules.blocks.size(), root = blocks;
  const bool gathers = stage == 3;
  // From the second micro-batch on each starts with the same reductions in flight (the last
  // two units of the one before): two walk every moment of the step.
  for (int64_t mb = 0; mb < std::min<int64_t>(micro_batches, 2); ++mb) {
    if (gathers) {
      walk.launch(root);
      if (blocks > 0) walk.launch(0);
      walk.wait(root);
      for (size_t i = 0; i < blocks; ++i) {
        walk.wait(i);
        if (i + 1 < blocks) walk.launch(i + 1);
        walk.release(i);
      }
      if (blocks > 0) walk.launch(blocks - 1);
    }
    walk.bind_fresh_grad(root);
    for (size_t i = blocks; i-- > 0;) {
      if (gathers) {
        walk.wait(i);
        if (i > 0) walk.launch(i - 1);
      }
      walk.bind_fresh_grad(i);
      walk.reduce_scatter(i);
      if (gathers) walk.release(i);
    }
    walk.reduce_scatter(root);
    if (gathers) walk.release(root);
  }
  return walk.peak();
}

}  // namespace loom::plan
