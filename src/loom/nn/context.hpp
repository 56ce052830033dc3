// Context: what one micro-batch's forward saved for its backward, keyed by module.
// Modules hold parameters, never activations, so several micro-batches can be in flight
// (pipeline schedules) and dropping a context is how activation recompute frees memory.
#pragma once

#include <initializer_list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "loom/tensor/tensor.hpp"

namespace loom::kernels {
class PackedWeights;
}

namespace loom::nn {

class Module;

// What a training micro-batch's hidden dropout draws its masks from: the run's seed, the step,
// and the global row (sequence) of the step's batch that this micro-batch's first row is. The
// mask of an element is a function of (seed, step, site, global row, position, feature), so
// every layout drops what the serial run drops.
struct DropoutRows {
  uint64_t seed = 0;
  uint64_t step = 0;
  int64_t first_row = 0;
};

class Context {
 public:
  // Replaces what `owner` saved before in this context.
  void save(const Module* owner, std::initializer_list<Tensor> tensors);
  // The i-th tensor `owner` saved; throws if forward did not run in this context.
  const Tensor& saved(const Module* owner, size_t i) const;
  bool has(const Module* owner) const { return saved_.count(owner) != 0; }
  void release(const Module* owner) { saved_.erase(owner); }
  void clear() { saved_.clear(); }
  // Bytes of distinct storages held (views of one buffer count once).
  int64_t bytes() const;
  // An inference context (generation): no backward follows, and layers may pick kernels
  // shaped for a few rows (a decode step's one token per sequence).
  void set_inference(bool on) { inference_ = on; }
  bool inference() const { return inference_; }
  // Where a generator keeps the decode step's packed weights (kernels/packed_weights.hpp);
  // null (training, or generation without them): the plain matmul.
  void set_packed_weights(kernels::PackedWeights* packed) { packed_ = packed; }
  kernels::PackedWeights* packed_weights() const { return packed_; }
  // A training step's micro-batch sets it; evaluation and generation leave it unset, and a
  // context without it runs no dropout.
  void set_dropout_rows(const DropoutRows& rows) { dropout_rows_ = rows; }
  const std::optional<DropoutRows>& dropout_rows() const { return dropout_rows_; }
  // A context for re-running part of this one's forward (activation recompute): the same
  // dropout rows and mode, nothing saved.
  Context replay() const;

 private:
  std::optional<DropoutRows> dropout_rows_;
  bool inference_ = false;
  kernels::PackedWeights* packed_ = nullptr;
  std::unordered_map<const Module*, std::vector<Tensor>> saved_;
};

}  // namespace loom::nn
