#include "loom/plan/gcn_cost.hpp"

#include "loom/plan/specs.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace loom::plan {

namespace {

enum Axis { kRow = 0, kCol = 1, kDepth = 2 };

// The roles (outer, inner, depth) of layer l, as graph_conv_3d.cpp rotates them.
std::array<int, 3> roles(int64_t l) {
  switch (l % 3) {
    case 0: return {kRow, kCol, kDepth};
    case 1: return {kDepth, kRow, kCol};
    default: return {kCol, kDepth, kRow};
  }
}

int64_t part(int64_t n, int64_t parts, int64_t k) { return n * (k + 1) / parts - n * k / parts; }

// Layer l's axes and the widths one rank holds of its input and output, and of its W block's
// columns (its shard over depth). Padded as graph_conv_3d.cpp pads them: the output to a
// multiple of outer x depth, a hidden layer's input (the previous output) likewise.
struct LayerSplit {
  int o, i, d;  // the outer, inner and depth axes
  int64_t Go, Gd, in_local, out_local, shard;
  int64_t parameter_piece() const { return (in_local + 1) * shard; }  // W and b, one buffer
};
LayerSplit split_of(const std::array<int64_t, 3>& size, int64_t l, int64_t in, int64_t out) {
  const auto [o, i, d] = roles(l);
  const int64_t Go = size[static_cast<size_t>(o)], Gi = size[static_cast<size_t>(i)], Gd = size[static_cast<size_t>(d)];
  const int64_t in_pad = l == 0 ? ceil_div(in, Gi) * Gi : ceil_div(in, Gi * Go) * Gi * Go;
  const int64_t out_pad = ceil_div(out, Go * Gd) * Go * Gd;
  return {.o = o, .i = i, .d = d, .Go = Go, .Gd = Gd, .in_local = in_pad / Gi, .out_local = out_pad / Go,
          .shard = out_pad / (Go * Gd)};
}

}  // namespace

Grid3DBytes gcn_3d_bytes_per_epoch(const GcnShape& s, int64_t R, int64_t C, int64_t D, std::array<int64_t, 3> at,
                                   int64_t labelled_rows) {
  const std::array<int64_t, 3> size{R, C, D};
  std::array<int64_t, 3> bytes{0, 0, 0};
  const auto add = [&](int axis, int64_t n) {  // n bytes
    if (size[static_cast<size_t>(axis)] > 1) bytes[static_cast<size_t>(axis)] += n;
  };
  const int64_t act = s.bf16 ? 2 : 4;  // an activation value's bytes on the wire, and a W value's in the gathers
  int64_t in = s.F;
  for (int64_t l = 0; l < s.L; ++l) {
    const int64_t out = l + 1 == s.L ? s.K : s.H;
    const LayerSplit p = split_of(size, l, in, out);
    const int64_t rows = part(s.N, p.Gd, at[static_cast<size_t>(p.d)]), cols = part(s.N, p.Go, at[static_cast<size_t>(p.o)]);
    const int64_t gathered = p.Gd * (act * p.in_local + 4) * p.shard;  // the W and b block
    const int64_t scattered = 4 * p.Gd * p.parameter_piece();          // its gradient, fp32
    add(p.d, gathered);                                                 // forward: W and b all-gathered
    if (l == 0 && cols > 0) add(p.d, 4 * p.Gd * ceil_div(cols, p.Gd) * p.in_local);  // the features' shards
    add(p.o, act * rows * p.in_local);
    add(p.i, act * rows * p.out_local);
    if (l + 1 == s.L) {  // the class-parallel loss
      const int64_t m = labelled_rows >= 0 ? labelled_rows : ceil_div(s.labelled * rows, s.N);
      if (m > 0) add(p.o, 4 * 4 * m);
      add(p.d, 4 * 2);  // the labelled count (two floats, exact)
      add(p.d, 4 * 2);  // the loss and correct count
    }
    add(p.d, scattered);  // backward: dW and db reduce-scattered
    if (l > 0) add(p.d, gathered), add(p.o, act * rows * p.in_local), add(p.d, act * cols * p.in_local);
    if (l == 0 && s.weight_decay) add(p.o, 4), add(p.i, 4), add(p.d, 4);
    in = out;
  }
  return {.row = bytes[kRow], .col = bytes[kCol], .depth = bytes[kDepth]};
}

int64_t gcn_3d_memory_bytes(const GcnShape& s, int64_t R, int64_t C, int64_t D) {
  const std::array<int64_t, 3> size{R, C, D};
  const auto csr = [](int64_t rows, int64_t nnz) { return 8 * (rows + 1) + 8 * nnz; };  // row_ptr, col + val
  int64_t bytes = 33 * s.N;  // the node orders (four N-long i64 arrays) and the split; no whole Â (read as blocks)
  int64_t in = s.F;
  for (int64_t l = 0; l < s.L; ++l) {
    const int64_t out = l + 1 == s.L ? s.K : s.H;
    const LayerSplit p = split_of(size, l, in, out);
    const int64_t rows = part(s.N, p.Gd, 0), cols = part(s.N, p.Go, 0), nnz = ceil_div(s.nnz, p.Go * p.Gd);
    bytes += csr(rows, nnz) + csr(cols, nnz) + 8 * (rows + cols);  // and the lists of their rows' and columns' nodes
    const int64_t kept = s.bf16 ? 2 : 4;                       // a GEMM operand's bytes (W's copy, Â X kept)
    bytes += 4 * 4 * p.parameter_piece();                      // W and b shards: value, gradient, Adam's m and v
    if (s.bf16) bytes += 2 * p.in_local * p.shard;             // W's shard's bf16 copy
    bytes += (kept * p.in_local + 4) * p.out_local;            // the block gathered over depth (forward, backward)
    bytes += kept * rows * p.in_local + 4 * rows * p.out_local;  // Â X (kept) and the output
    if (l == 0) bytes += 4 * (ceil_div(cols, p.Gd) + cols) * p.in_local;  // the features' shard, gathered
    bytes += 4 * rows * p.out_local;  // ReLU/dropout's mask between layers, the loss's copy of the logits after the last
    in = out;
  }
  return bytes;
}

std::vector<GcnGridCost> rank_gcn_grids(const GcnShape& s, int64_t ranks, double gbps, double gflops) {
  std::vector<GcnGridCost> out;
  for (int64_t R = 1; R <= ranks; ++R)
    for (int64_t C = 1; R * C <= ranks; ++C) {
      if (ranks % (R * C) != 0) continue;
      const int64_t D = ranks / (R * C);
      GcnGridCost g{.R = R, .C = C, .D = D};
      g.bytes = gcn_3d_bytes_per_epoch(s, R, C, D);
      g.memory_bytes = gcn_3d_memory_bytes(s, R, C, D);
      // A ring all-reduce sends 2(p-1)/p of its buffer; the axes' traffic does not overlap.
      const std::array<int64_t, 3> size{R, C, D}, b{g.bytes.row, g.bytes.col, g.bytes.depth};
      for (size_t a = 0; a < 3; ++a)
        if (size[a] > 1)
          g.comm_seconds += 2.0 * static_cast<double>(size[a] - 1) / static_cast<double>(size[a]) *
                            static_cast<double>(b[a]) / (gbps * 1e9);
      // Flops per epoch (forward SpMM + GEMM, backward two GEMMs and a SpMM but the first
      // layer's), each split over every rank of the grid.
      double flops = 0.0;
      int64_t in = s.F;
      for (int64_t l = 0; l < s.L; ++l) {
        const int64_t w = l + 1 == s.L ? s.K : s.H;
        const double spmm = 2.0 * static_cast<double>(s.nnz) * static_cast<double>(in);
        const double gemm = 2.0 * static_cast<double>(s.N) * static_cast<double>(in) * static_cast<double>(w);
        flops += spmm + gemm + gemm + (l > 0 ? gemm + spmm : 0.0);
        in = w;
      }
      g.compute_seconds = flops / static_cast<double>(ranks) / (gflops * 1e9);
      out.push_back(g);
    }
  std::stable_sort(out.begin(), out.end(), [](const GcnGridCost& a, const GcnGridCost& b) { return a.seconds() < b.seconds(); });
  return out;
}

std::string describe_gcn_plan(const GcnShape& s, const std::vector<GcnGridCost>& grids, int64_t top) {
  std::ostringstream os;
  os << "GCN " << s.N << " nodes, " << s.nnz << " non-zeros, " << s.F << " -> " << s.H << " x " << (s.L - 1) << " -> "
     << s.K << "; tp_3d grids by predicted epoch time (Plexus's model):\n";
  os << "  grid (R,C,D)   epoch ms   comm ms   compute ms   MiB/rank   MB row / col / depth (rank 0)\n";
  for (size_t i = 0; i < grids.size() && static_cast<int64_t>(i) < top; ++i) {
    const GcnGridCost& g = grids[i];
    std::ostringstream grid;
    grid << g.R << "," << g.C << "," << g.D;
    os << "  " << std::left << std::setw(14) << grid.str() << std::right << std::fixed << std::setprecision(3)
       << std::setw(9) << 1e3 * g.seconds() << std::setw(10) << 1e3 * g.comm_seconds << std::setw(13)
       << 1e3 * g.compute_seconds << std::setprecision(1) << std::setw(11)
       << static_cast<double>(g.memory_bytes) / 1048576.0 << "   " << std::setprecision(2) << g.bytes.row / 1e6 << " / " << g.bytes.col / 1e6
       << " / " << g.bytes.depth / 1e6 << "\n";
  }
  return os.str();
}

}  // namespace loom::plan
