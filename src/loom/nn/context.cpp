#include "loom/nn/context.hpp"

#include <set>

#include "loom/error.hpp"
#include "loom/nn/module.hpp"

namespace loom::nn {

void Context::save(const Module* owner, std::initializer_list<Tensor> tensors) {
  saved_[owner] = std::vector<Tensor>(tensors);
}

const Tensor& Context::saved(const Module* owner, size_t i) const {
  auto it = saved_.find(owner);
  check(it != saved_.end() && i < it->second.size(), "backward of '", owner->name(),
        "' without a matching forward in this context");
  return it->second[i];
}

Context Context::replay() const {
  Context c;
  c.dropout_rows_ = dropout_rows_;
  c.inference_ = inference_;
  c.packed_ = packed_;
  return c;
}

int64_t Context::bytes() const {
  std::set<const void*> seen;
  int64_t total = 0;
  for (const auto& [owner, tensors] : saved_)
    for (const Tensor& t : tensors)
      if (t.defined() && seen.insert(t.raw()).second) total += t.nbytes();
  return total;
}

}  // namespace loom::nn
