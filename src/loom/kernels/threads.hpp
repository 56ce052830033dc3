// The thread count every kernel (OpenMP loops and oneDNN) uses.
#pragma once

namespace loom::kernels {

// n <= 0 means "all cores". Applies to this process.
void set_num_threads(int n);
int num_threads();

}  // namespace loom::kernels
