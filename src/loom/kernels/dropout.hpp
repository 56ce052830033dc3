// Inverted dropout with a counter-based mask, and the ReLU the GCN applies before it: element i of the tensor drawn under `key` is
// kept when hash(key, i) falls above p, and kept values are scaled by 1 / (1 - p). The
// mask is a pure function of (key, i), so it needs no state to save: the same key gives the
// same mask for any thread count and after a resume (the GCN keys it by seed, step and layer).
#pragma once

#include <cstdint>

namespace loom::kernels {

// out (n) = x * mask, mask (n) = 1 / (1 - p) where kept, 0 where dropped (what backward
// needs); 0 <= p < 1; out may alias x.
void dropout_forward(float* out, float* mask, const float* x, int64_t n, float p, uint64_t key);
// The same masks on a block (rows, cols) of a larger (?, width) tensor: local row r is row
// row_ids[r] of the whole, local column c its column col0 + c, so a rank holding a block draws
// the elements the whole tensor would. Columns at or past `width` (padding) get 0. mask may be
// null: the mask is then applied and not written, and a second call with the same arguments on
// the output's gradient is the backward (a transformer's hidden dropout keeps nothing).
void dropout_forward_block(float* out, float* mask, const float* x, int64_t rows, int64_t cols, const int64_t* row_ids,
                           int64_t col0, int64_t width, float p, uint64_t key);
// dx (n) = dout * mask; may run in place (dx == dout).
void dropout_backward(float* dx, const float* dout, const float* mask, int64_t n);
// ReLU in place, x (n); its backward from the output: dx = dout where out > 0, else 0 (in
// place on d). After dropout the output is still positive exactly where it was kept and x > 0.
void relu_forward(float* x, int64_t n);
void relu_backward(float* d, const float* out, int64_t n);
// A key from the parts that identify one use of dropout (seed, step, layer).
uint64_t dropout_key(uint64_t seed, uint64_t step, uint64_t layer);

}  // namespace loom::kernels
