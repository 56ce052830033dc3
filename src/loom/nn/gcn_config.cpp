// GcnConfig: the GCN's sizes and their validation. Apart from the model so the config readers
// need nothing else.
#include "loom/nn/gcn.hpp"

#include "loom/error.hpp"

namespace loom::nn {

void GcnConfig::validate() const {
  check(layers >= 1 && layers <= 64, "gcn_layers must be in 1..64, got ", layers);
  check(hidden >= 1, "gcn_hidden must be >= 1, got ", hidden);
  check(dropout >= 0.0 && dropout < 1.0, "gcn_dropout must be in [0, 1), got ", dropout);
}

int64_t GcnConfig::num_parameters(int64_t F, int64_t K) const {
  int64_t n = 0, in = F;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t out = l + 1 == layers ? K : hidden;
    n += in * out + out;
    in = out;
  }
  return n;
}

}  // namespace loom::nn
