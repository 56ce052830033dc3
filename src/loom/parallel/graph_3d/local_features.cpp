#include "loom/parallel/graph_3d/local_features.hpp"

#include <algorithm>
#include <exception>
#include <vector>

#include "loom/parallel/graph_3d/read_agreement.hpp"

namespace loom::parallel::graph3d {

Tensor read_input_shard(const GraphConv3D& first, data::GraphSource& source,
                        const std::function<void(float*, int64_t)>& prepare) {
  const int64_t F = source.nodes().num_features;
  std::vector<float> row(static_cast<size_t>(F));
  Tensor shard;
  std::exception_ptr failed;
  try {
    shard = first.input_shard([&](const std::function<bool(int64_t)>& wanted,
                                  const std::function<void(int64_t, const float*)>& keep) {
      source.for_each_feature_row(wanted, [&](int64_t node, const float* values) {
        std::copy_n(values, F, row.data());
        prepare(row.data(), F);
        keep(node, row.data());
      });
    });
  } catch (...) {
    failed = std::current_exception();
  }
  agree_on_read(first.grid(), failed, "the features of " + source.nodes().name);
  return shard;
}

}  // namespace loom::parallel::graph3d
