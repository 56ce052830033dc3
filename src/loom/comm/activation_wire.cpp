#include "loom/comm/activation_wire.hpp"

#include <numeric>

#include "loom/comm/bf16_wire.hpp"
#include "loom/error.hpp"

namespace loom::comm {

namespace {

bool in_bf16(const ProcessGroup& g) { return g.activation_dtype() == DType::BF16; }

// n fp32 values rounded to bf16 in a buffer of their own (counted as communication memory).
Tensor packed(const float* src, int64_t n) {
  Tensor wire = Tensor::empty({n}, DType::BF16, MemoryCategory::CommBuffers);
  pack_bf16(src, wire.bf16(), n);
  return wire;
}

}  // namespace

int64_t activation_wire_bytes(const ProcessGroup& g, int64_t n) { return (in_bf16(g) ? 2 : 4) * n; }

Work sum_activations_async(ProcessGroup& g, float* data, int64_t n) {
  return in_bf16(g) ? g.all_reduce_bf16_async(data, n, ReduceOp::Sum) : g.all_reduce_async(data, n, ReduceOp::Sum);
}

void sum_activations(ProcessGroup& g, Tensor& t) { sum_activations_async(g, t.f32(), t.numel()).wait(); }

namespace {
// The bf16 gather of n values a rank: `wire` (size x n) holds this rank's packed slot by the
// time g's thread reaches the gather; out gets everyone's values widened.
Work gather_bf16_wire(ProcessGroup& g, const Tensor& wire, float* out, int64_t n) {
  Work work = g.all_gather_bf16_async(wire.bf16() + g.rank() * n, wire.bf16(), n);
  work.then([wire, out, total = n * g.size()] { widen_bf16(wire.bf16(), out, total); });
  return work;
}
}  // namespace

Work gather_activations_async(ProcessGroup& g, const float* in, float* out, int64_t n) {
  if (!in_bf16(g)) return g.all_gather_async(in, out, n);
  Tensor wire = Tensor::empty({n * g.size()}, DType::BF16, MemoryCategory::CommBuffers);
  pack_bf16(in, wire.bf16() + g.rank() * n, n);
  return gather_bf16_wire(g, wire, out, n);
}

Work gather_activations_after(ProcessGroup& g, const Work& before, const float* in, float* out, int64_t n) {
  if (!in_bf16(g)) {
    g.queue_after(before);
    return g.all_gather_async(in, out, n);  // reads in on the group's thread, after before
  }
  Tensor wire = Tensor::empty({n * g.size()}, DType::BF16, MemoryCategory::CommBuffers);
  g.queue_after(before, [in, mine = wire.bf16() + g.rank() * n, n] { pack_bf16(in, mine, n); });
  return gather_bf16_wire(g, wire, out, n);
}

Work gather_activations_async(ProcessGroup& g, const bfloat16* in, bfloat16* out, int64_t n) {
  return g.all_gather_bf16_async(in, out, n);
}

void gather_activations(ProcessGroup& g, const Tensor& in, Tensor& out) {
  const int64_t n = in.numel();
  check(out.numel() == n * g.size(), "all_gather: output of ", out.numel(), " elements must be ", g.size(), " x input (",
        n, ")");
  gather_activations_async(g, in.f32(), out.f32(), n).wait();
}

Work reduce_scatter_activations_async(ProcessGroup& g, const float* in, float* out, int64_t n) {
  return in_bf16(g) ? g.reduce_scatter_bf16_async(in, out, n, ReduceOp::Sum) : g.reduce_scatter_async(in, out, n, ReduceOp::Sum);
}

void reduce_scatter_activations(ProcessGroup& g, const Tensor& in, Tensor& out) {
  check(in.numel() == out.numel() * g.size(), "reduce_scatter: input of ", in.numel(), " elements must be ", g.size(),
        " x output (", out.numel(), ")");
  reduce_scatter_activations_async(g, in.f32(), out.f32(), out.numel()).wait();
}

void all_to_all_v_activations(ProcessGroup& g, const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                              const std::vector<int64_t>& recv_counts) {
  if (!in_bf16(g)) return g.all_to_all_v(in, send_counts, out, recv_counts);
  const int64_t sent = std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0});
  const int64_t received = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  check(sent == in.numel() && received == out.numel(), "all_to_all_v: counts (", sent, " sent, ", received,
        " received) do not match the tensors (", in.numel(), ", ", out.numel(), ")");
  const Tensor wire_in = packed(in.f32(), sent);
  Tensor wire_out = Tensor::empty({received}, DType::BF16, MemoryCategory::CommBuffers);
  g.all_to_all_v_bf16_async(wire_in.bf16(), send_counts, wire_out.bf16(), recv_counts).wait();
  widen_bf16(wire_out.bf16(), out.f32(), received);
}

void all_gather_v_activations(ProcessGroup& g, const Tensor& in, const std::vector<int64_t>& counts, Tensor& out) {
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  check(static_cast<int>(counts.size()) == g.size() && in.numel() == counts[static_cast<size_t>(g.rank())] &&
            out.numel() == total,
        "all_gather_v: ", counts.size(), " counts over ", g.size(), " ranks, ", in.numel(), " values given and ",
        out.numel(), " to receive for a total of ", total);
  const bool bf16 = in_bf16(g);
  std::vector<int64_t> bytes = counts;
  for (int64_t& b : bytes) b *= bf16 ? 2 : 4;
  if (!bf16) return g.gather_v_bytes_async(in.f32(), bytes, out.f32(), std::nullopt).wait();
  const Tensor wire_in = packed(in.f32(), in.numel());
  Tensor wire_out = Tensor::empty({total}, DType::BF16, MemoryCategory::CommBuffers);
  g.gather_v_bytes_async(wire_in.bf16(), bytes, wire_out.bf16(), std::nullopt).wait();
  widen_bf16(wire_out.bf16(), out.f32(), total);
}

Work send_activations_async(ProcessGroup& g, const float* data, int64_t n, int dst, int tag) {
  if (!in_bf16(g)) return g.send_async(data, n, dst, tag);
  const Tensor wire = packed(data, n);
  Work work = g.send_bf16_async(wire.bf16(), n, dst, tag);
  work.then([wire] {});  // the packed values live until the send is waited
  return work;
}

Work recv_activations_async(ProcessGroup& g, float* data, int64_t n, int src, int tag) {
  if (!in_bf16(g)) return g.recv_async(data, n, src, tag);
  const Tensor wire = Tensor::empty({n}, DType::BF16, MemoryCategory::CommBuffers);
  Work work = g.recv_bf16_async(wire.bf16(), n, src, tag);
  work.then([wire, data, n] { widen_bf16(wire.bf16(), data, n); });
  return work;
}

}  // namespace loom::comm
