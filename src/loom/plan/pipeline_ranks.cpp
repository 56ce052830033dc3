#include "loom/plan/pipeline_ranks.hpp"

#include <algorithm>

#include "loom/parallel/pipeline/partition.hpp"
#include "loom/parallel/pipeline/schedule_builders.hpp"

namespace loom::plan {

int64_t moe_blocks(const ModelSpec& model, const nn::GPTStage& s) {
  return model.moe.experts > 0 ? s.end_block / model.moe.every - s.first_block / model.moe.every : 0;
}

std::vector<RankStages> rank_stages(const ModelSpec& model, const Layout& l) {
  std::vector<nn::GPTStage> stages = {nn::GPTStage{0, model.layers, true, true}};
  if (l.pp > 1) {
    nn::GPTConfig g;
    g.vocab_size = model.vocab;
    g.padded_vocab_size = model.vocab;
    g.block_size = model.seq;
    g.n_layer = model.layers;
    g.n_head = model.heads;
    g.n_embd = model.hidden;
    stages = parallel::pipeline::partition_stages(g, l.pp, l.chunks);
  }
  std::vector<RankStages> ranks(static_cast<size_t>(l.pp));
  for (size_t k = 0; k < stages.size(); ++k) {
    RankStages& r = ranks[k % ranks.size()];
    const nn::GPTStage& s = stages[k];
    r.chunks.push_back(s);
    r.blocks += s.end_block - s.first_block;
    r.moe_blocks += moe_blocks(model, s);
    r.embedding = r.embedding || s.embedding;
    r.head = r.head || s.head;
  }
  return ranks;
}

RankParameters rank_parameters_of(const ModelSpec& m, const Layout& l, const RankStages& s) {
  // What the counts read of a rank's shape: the tables, the width, the splits and the experts.
  const RankShape shape{.seq = m.seq, .hidden = m.hidden, .vocab = m.vocab, .tp = l.tp, .ep = l.ep,
                        .experts = m.moe.experts, .top_k = m.moe.top_k, .every = m.moe.every};
  return rank_parameters(shape, s.chunks, tensor_parallel_linears(m.hidden, l.tp));
}

std::optional<parallel::pipeline::Schedule> planned_schedule(const Layout& l, int64_t micro_batches) {
  if (l.pp == 1) return std::nullopt;
  namespace pl = parallel::pipeline;
  // GPipe: every rank holds every micro-batch, so the whole run. 1F1B: rank r holds min(m, pp - r)
  // micro-batches, all of its one chunk. Interleaved: after a warm-up of fewer than (v + 1) pp
  // forwards the held pairs repeat every pp v forwards, so 3 pp micro-batches (3 pp v forwards)
  // pass through every state a longer run does.
  if (l.gpipe && l.chunks == 1)
    return pl::build_schedule(pl::ScheduleKind::GPipe, static_cast<int>(l.pp), static_cast<int>(micro_batches), 1);
  const int64_t m = std::min(micro_batches, (l.chunks > 1 ? 3 : 1) * l.pp);
  return pl::build_schedule(l.chunks > 1 ? pl::ScheduleKind::Interleaved : pl::ScheduleKind::OneFOneB,
                            static_cast<int>(l.pp), static_cast<int>(m), static_cast<int>(l.chunks));
}

}  // namespace loom::plan
