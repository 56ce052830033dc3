#include "loom/parallel/pipeline/model_chunks.hpp"

#include "loom/error.hpp"

namespace loom::parallel::pipeline {

ModelChunks::ModelChunks(std::vector<std::unique_ptr<nn::Module>> chunks) {
  // An empty local name keeps every parameter's model name.
  for (auto& chunk : chunks) chunks_.push_back(&register_module("", std::move(chunk)));
}

Tensor ModelChunks::forward_impl(const Tensor&, nn::Context&) {
  fail("pipeline model chunks run through the pipeline executor, not as one module");
}

Tensor ModelChunks::backward_impl(const Tensor&, nn::Context&) {
  fail("pipeline model chunks run through the pipeline executor, not as one module");
}

}  // namespace loom::parallel::pipeline
