#include "loom/train/model_spec.hpp"

#include "loom/error.hpp"
#include "loom/train/gcn_spec.hpp"
#include "loom/train/gpt_spec.hpp"

namespace loom::train {

data::Batch ModelSpec::test_batch(int64_t, int) { fail("this model family has no test split"); }

std::unique_ptr<ModelSpec> make_model_spec(TrainConfig& config) {
  if (config.family == "gcn") return std::make_unique<GcnSpec>(config);
  return std::make_unique<GptSpec>(config);
}

}  // namespace loom::train
