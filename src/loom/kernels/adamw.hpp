// AdamW update (Loshchilov & Hutter), one fused pass over a parameter: as PyTorch's
// torch.optim.AdamW with decoupled weight decay.
#pragma once

#include <cstdint>

#include "loom/tensor/dtype.hpp"

namespace loom::kernels {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;  // 1-based, for bias correction
};

// param, grad, m, v all (n); m and v updated in place. With param_bf16 (n), the updated param is
// also written there in bf16 (as convert_to_bf16 rounds) while it is in cache: mixed precision's
// weight copy refreshed in the update's pass instead of a pass of its own at the next step.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p,
                  bfloat16* param_bf16 = nullptr);

}  // namespace loom::kernels
