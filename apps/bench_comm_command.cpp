// `loom bench comm`: all-reduce time, algorithm bandwidth and bus bandwidth for every
// algorithm and message size (in the spirit of nccl-tests), next to the alpha-beta model's
// prediction (alpha and beta measured by a ping-pong first) and the ratio to MPI's own
// all-reduce from the same run. Run under mpirun; rank 0 prints Markdown or CSV.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "commands.hpp"
#include "loom/comm/mpi_runtime.hpp"
#include "loom/error.hpp"
#include "loom/plan/comm_cost.hpp"
#include "timing.hpp"

namespace loom::apps {

namespace {

struct CommBenchArgs {
  std::string sizes = "8B:256MiB";
  std::vector<std::string> algorithms{"mpi", "ring", "tree", "rhd", "param-server"};
  int servers = 1;
  int iterations = 0;  // 0: by size
  bool csv = false;
};

int64_t parse_bytes(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    fail("bad size '", text, "' (examples: 8B, 64KiB, 256MiB)");
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  for (const auto& [names, s] : std::vector<std::pair<std::vector<std::string>, double>>{
           {{"", "B"}, 1}, {{"K", "KB", "KiB"}, 1024}, {{"M", "MB", "MiB"}, 1 << 20}, {{"G", "GB", "GiB"}, 1 << 30}})
    if (std::find(names.begin(), names.end(), unit) != names.end()) scale = s;
  check(scale > 0 && v > 0, "bad size '", text, "' (examples: 8B, 64KiB, 256MiB)");
  return static_cast<int64_t>(v * scale);
}

// Ping-pong between ranks 0 and 1: half the round trip of a tiny message is alpha; the
// extra time per byte of a large one is beta.
plan::LinkCost measure_link(comm::ProcessGroup& world) {
  plan::LinkCost link;
  if (world.size() < 2) return link;
  auto half_round_trip = [&](int64_t n, int reps) {
    std::vector<float> buf(static_cast<size_t>(n), 0.0f);
    std::vector<double> times;
    for (int i = 0; i < reps; ++i) {
      world.barrier();
      const auto t0 = Clock::now();
      if (world.rank() == 0) {
        world.send_async(buf.data(), n, 1).wait();
        world.recv_async(buf.data(), n, 1).wait();
      } else if (world.rank() == 1) {
        world.recv_async(buf.data(), n, 0).wait();
        world.send_async(buf.data(), n, 0).wait();
      }
      times.push_back(seconds_since(t0) / 2);
    }
    std::sort(times.begin(), times.end());
    float t = static_cast<float>(times[times.size() / 2]);
    world.broadcast_async(&t, 1, 0).wait();  // rank 0's measurement for everyone
    return static_cast<double>(t);
  };
  link.alpha_s = half_round_trip(2, 50);
  const int64_t big = 16 << 20;  // floats
  link.beta_s_per_byte = std::max(0.0, (half_round_trip(big, 5) - link.alpha_s) / (4.0 * static_cast<double>(big)));
  return link;
}

int run_comm_bench(const CommBenchArgs& a) {
  comm::MpiRuntime mpi(nullptr, nullptr);
  comm::ProcessGroup& world = mpi.world();
  world.set_param_servers(a.servers);
  const auto colon = a.sizes.find(':');
  const int64_t lo = parse_bytes(a.sizes.substr(0, colon));
  const int64_t hi = colon == std::string::npos ? lo : parse_bytes(a.sizes.substr(colon + 1));
  check(lo >= 4 && hi >= lo, "--sizes must be MIN:MAX with 4 B <= MIN <= MAX, got '", a.sizes, "'");
  std::vector<comm::AllReduceAlgorithm> algos;
  for (const auto& name : a.algorithms) algos.push_back(comm::parse_algorithm(name));

  const plan::LinkCost link = measure_link(world);
  const int p = world.size();
  const bool root = world.rank() == 0;
  if (root) {
    std::printf(a.csv ? "# ranks=%d alpha_us=%.2f beta_GBps=%.2f\n"
                      : "all-reduce on %d ranks; link measured by ping-pong: alpha %.2f us, 1/beta %.2f GB/s\n\n",
                p, link.alpha_s * 1e6, link.beta_s_per_byte > 0 ? 1e-9 / link.beta_s_per_byte : 0.0);
    std::printf(a.csv ? "bytes,algorithm,time_us,algbw_GBps,busbw_GBps,model_us,busbw_vs_mpi\n"
                      : "| bytes | algorithm | time (us) | algbw (GB/s) | busbw (GB/s) | model (us) | busbw / mpi |\n"
                        "|---:|---|---:|---:|---:|---:|---:|\n");
  }
  std::vector<float> data(static_cast<size_t>(hi / 4 + 1));
  for (int64_t bytes = lo; bytes <= hi; bytes *= 2) {
    const int64_t n = std::max<int64_t>(1, bytes / 4);
    const int iterations = a.iterations > 0 ? a.iterations : static_cast<int>(std::clamp<int64_t>((64 << 20) / bytes, 3, 50));
    double mpi_busbw = 0.0;
    for (comm::AllReduceAlgorithm algo : algos) {
      std::fill(data.begin(), data.begin() + n, 1.0f);
      world.all_reduce(data.data(), n, comm::ReduceOp::Sum, algo);  // warm-up
      std::vector<double> times;
      for (int i = 0; i < iterations; ++i) {
        world.barrier();
        const auto t0 = Clock::now();
        world.all_reduce(data.data(), n, comm::ReduceOp::Max, algo);
        times.push_back(seconds_since(t0));
      }
      // The slowest rank's median decides: reduce each rank's median with max.
      std::sort(times.begin(), times.end());
      float median = static_cast<float>(times[times.size() / 2]);
      world.all_reduce(&median, 1, comm::ReduceOp::Max);
      const double busbw = plan::all_reduce_bus_bandwidth(n * 4, median, p);
      if (algo == comm::AllReduceAlgorithm::Mpi) mpi_busbw = busbw;
      const double model = plan::all_reduce_seconds(comm::algorithm_name(algo), n * 4, p, link, a.servers);
      if (!root) continue;
      char model_text[32] = "-", ratio_text[32] = "-";
      if (model >= 0) std::snprintf(model_text, sizeof model_text, "%.1f", model * 1e6);
      if (mpi_busbw > 0) std::snprintf(ratio_text, sizeof ratio_text, "%.2f", busbw / mpi_busbw);
      std::printf(a.csv ? "%lld,%s,%.1f,%.3f,%.3f,%s,%s\n" : "| %lld | %s | %.1f | %.3f | %.3f | %s | %s |\n",
                  static_cast<long long>(n * 4), comm::algorithm_name(algo).c_str(), median * 1e6,
                  n * 4 / median / 1e9, busbw / 1e9, model_text, ratio_text);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

void add_comm_bench(CLI::App& bench, Runner& runner) {
  auto args = std::make_shared<CommBenchArgs>();
  CLI::App* sub = bench.add_subcommand(
      "comm", "all-reduce algorithms vs MPI native and the alpha-beta model (example: mpirun -np 4 loom bench comm)");
  sub->allow_extras();
  sub->add_option("--sizes", args->sizes, "message sizes MIN:MAX, doubling (e.g. 8B:256MiB)");
  sub->add_option("--algorithms", args->algorithms, "algorithms to compare")->delimiter(',');
  sub->add_option("--servers", args->servers, "parameter-server shards");
  sub->add_option("--iterations", args->iterations, "timed iterations per size; 0 = by size");
  sub->add_flag("--csv", args->csv, "CSV instead of a Markdown table");
  runner = [args, sub]() {
    reject_unknown_flags(*sub);
    return run_comm_bench(*args);
  };
}

}  // namespace loom::apps
