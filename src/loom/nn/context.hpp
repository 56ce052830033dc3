// Context: what one micro-batch's forward saved for its backward, keyed by module.
// Modules hold parameters, never activations, so several micro-batches can be in flight
// (pipeline schedules) and dropping a context is how activation recompute frees memory.
#pragma once

#include <initializer_list>
#include <unordered_map>
#include <vector>

#include "loom/tensor/tensor.hpp"

namespace loom::kernels {
class PackedWeights;
}

namespace loom::nn {

class Module;

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

 private:
  bool inference_ = false;
  kernels::PackedWeights* packed_ = nullptr;
  std::unordered_map<const Module*, std::vector<Tensor>> saved_;
};

}  // namespace loom::nn
