// `loom bench spmm`: the GCN's aggregation, C = Â B, and its backward, dB = Âᵀ dC (the SpMM
// of the transposed CSR the backward keeps), on a graph's normalised adjacency for several
// feature widths: median time, GFLOP/s (2 · nnz · D) and GB/s against the bytes it must move
// at least (the CSR arrays, B and C once each), as JSON lines for bench/gcn_vs_pytorch.sh to
// put next to torch.sparse.mm on the same arrays.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "commands.hpp"
#include "loom/data/graph.hpp"
#include "loom/error.hpp"
#include "loom/kernels/sparse.hpp"
#include "loom/kernels/spmm.hpp"
#include "loom/kernels/threads.hpp"
#include "timing.hpp"

namespace loom::apps {

namespace {

struct SpmmBenchArgs {
  std::string data = "data/cora";
  std::vector<int64_t> widths{16, 64, 128};
  int threads = 0;
  std::string save_csr;  // a directory for the CSR arrays (Â, and Âᵀ under transposed/), so PyTorch multiplies the same matrices
};

void save_csr(const kernels::CsrMatrix& A, const std::string& dir) {
  std::filesystem::create_directories(dir);
  auto write = [&](const char* name, const void* data, size_t bytes) {
    std::ofstream out(std::filesystem::path(dir) / name, std::ios::binary);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    check(out.good(), "cannot write ", dir, "/", name);
  };
  write("row_ptr.i64", A.row_ptr.data(), A.row_ptr.size() * 8);
  write("col.i32", A.col.data(), A.col.size() * 4);
  write("val.f32", A.val.data(), A.val.size() * 4);
}

// The median of timed calls of spmm(A, B) (at least 5, up to 1 s or 200 calls), after one untimed.
double median_spmm_seconds(const kernels::CsrMatrix& A, int64_t D) {
  const std::vector<float> B(static_cast<size_t>(A.cols * D), 0.5f);
  std::vector<float> C(static_cast<size_t>(A.rows * D));
  kernels::spmm(A, B.data(), C.data(), D);
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < 5 || (seconds_since(start) < 1.0 && times.size() < 200)) {
    const auto t0 = Clock::now();
    kernels::spmm(A, B.data(), C.data(), D);
    times.push_back(seconds_since(t0));
  }
  return median(times);
}

// Widths past this are no GCN's features; the bound keeps nodes x width far from overflow
// (a negative width asked for a vector of 2^64 floats).
constexpr int64_t kMaxWidth = int64_t{1} << 20;

int run_spmm_bench(const SpmmBenchArgs& a) {
  for (const int64_t D : a.widths) check(D >= 1 && D <= kMaxWidth, "--widths must be between 1 and ", kMaxWidth, ", got ", D);
  kernels::set_num_threads(a.threads);
  const data::Graph g = data::load_graph(a.data, "");
  const kernels::CsrMatrix A = kernels::gcn_normalized_adjacency(g.num_nodes, g.src, g.dst);
  const kernels::CsrMatrix At = kernels::csr_transpose(A);  // as nn::GraphOperator keeps it for the backward
  if (!a.save_csr.empty()) {
    save_csr(A, a.save_csr);
    save_csr(At, a.save_csr + "/transposed");
  }
  for (const int64_t D : a.widths)
    for (const auto& [op, M] : {std::pair<const char*, const kernels::CsrMatrix*>{"A", &A}, {"At", &At}}) {
      const double s = median_spmm_seconds(*M, D);
      const double bytes = 8.0 * static_cast<double>(M->rows + 1) + 8.0 * static_cast<double>(M->nnz()) +
                           4.0 * static_cast<double>((M->rows + M->cols) * D);
      const nlohmann::json out = {{"impl", "loom"}, {"graph", a.data}, {"op", op}, {"nodes", M->rows}, {"nnz", M->nnz()},
                                  {"width", D}, {"threads", kernels::num_threads()}, {"median_s", s},
                                  {"gflops", 2.0 * static_cast<double>(M->nnz() * D) / s / 1e9},
                                  {"gbytes_per_s", bytes / s / 1e9}};
      std::printf("%s\n", out.dump().c_str());
    }
  return 0;
}

}  // namespace

CLI::App* add_spmm_bench(CLI::App& bench, Runner& runner) {
  auto args = std::make_shared<SpmmBenchArgs>();
  CLI::App* sub = bench.add_subcommand(
      "spmm", "SpMM (Â B) on a graph's normalised adjacency, as JSON lines (example: loom bench spmm --data data/cora)");
  sub->allow_extras();
  sub->add_option("--data", args->data, "a graph: data/cora, a text-format prefix, or rmat:scale=S,...");
  sub->add_option("--widths", args->widths, "feature widths D")->delimiter(',');
  sub->add_option("--threads", args->threads, "compute threads; 0 = all cores");
  sub->add_option("--save-csr", args->save_csr, "also write Â's CSR arrays (row_ptr.i64, col.i32, val.f32) to this directory, Âᵀ's to its transposed/");
  runner = [args, sub]() {
    reject_unknown_flags(*sub);
    return run_spmm_bench(*args);
  };
  return sub;
}

}  // namespace loom::apps
