#include "loom/train/inference_model.hpp"

#include "loom/error.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/parallel/tensor_parallel/tensor_parallel_layers.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/sharded_checkpoint.hpp"

namespace loom::train {

InferenceModel load_inference_model(const std::string& checkpoint, comm::ProcessGroup* tp, int64_t batch,
                                    const MemoryCheckBy& by, InferenceUse use) {
  InferenceModel m;
  const std::string path = resolve_checkpoint_path(checkpoint);
  const CheckpointInfo info = read_checkpoint_info(path);
  apply_toml_string(m.config, info.config_toml, path + " (stored configuration)");
  // A GCN's checkpoint records its graph where a GPT's records its tokenizer: named as what it is.
  check(m.config.family != "gcn", "checkpoint '", path,
        "' is a GCN's (a graph model), not a GPT's: loom sample, eval and generate need a GPT checkpoint");
  m.tokenizer = data::Tokenizer::from_spec(info.tokenizer_spec);
  m.config.model.vocab_size = m.tokenizer->vocab_size();
  // Rows that do not split evenly over this tp are re-padded on loading (the padding is read by nothing).
  if (tp != nullptr && m.config.model.resolved_padded_vocab() % tp->size() != 0)
    m.config.model.padded_vocab_size = m.config.model.padded_vocab_for(tp->size());
  m.config.model.validate();
  // The stored configuration is input like any other: bounded before the model is built.
  const bool bf16 = kernels::compute_precision() == kernels::Precision::BF16;
  const MemoryNeed need = use == InferenceUse::Scoring ? scoring_memory(m.config.model, batch, bf16)
                                                       : inference_memory(m.config.model, batch, bf16);
  check_fits_in_memory(need, tp != nullptr ? tp->size() : 1,
                       "the model of checkpoint '" + path + "'", by);
  if (tp != nullptr && tp->size() > 1)
    m.layers = std::make_unique<parallel::tp::TensorParallelLayers>(*tp, /*sequence_parallel=*/false);
  m.model = std::make_unique<nn::GPT>(m.config.model, 0, m.layers ? *m.layers : nn::serial_layers());
  std::vector<StatePiece> pieces;
  for (nn::Parameter* p : m.model->parameters()) {
    const nn::ShardSpec& spec = p->shard_spec();
    pieces.push_back({"model." + p->name(), spec.full_shape(p->value().shape()), {spec, 0, p->value().numel()},
                      p->value(), true, p->padded_past_row()});
  }
  load_state(path, pieces, "");
  return m;
}

}  // namespace loom::train
