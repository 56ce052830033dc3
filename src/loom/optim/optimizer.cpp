#include "loom/optim/optimizer.hpp"

namespace loom::optim {

void Optimizer::zero_grad() {
  for (nn::Parameter* p : params_) p->grad().zero_();
}

}  // namespace loom::optim
