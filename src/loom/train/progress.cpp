#include "loom/train/progress.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include "loom/kernels/peak_flops.hpp"
#include "loom/kernels/threads.hpp"
#include "loom/tensor/memory_tracker.hpp"

namespace loom::train {

Progress::Progress(const TrainConfig& config, comm::ProcessGroup& world, bool quiet)
    : config_(config), world_(world), quiet_(quiet || world.rank() != 0) {
  metrics_ = std::make_unique<MetricsLog>("");
  peak_gflops_ = config_.peak_gflops > 0 ? config_.peak_gflops : 0.0;
  // Under mpirun a rank's stdout is a pseudo-terminal even when the job's output goes to a log.
  live_ = ::isatty(::fileno(stdout)) != 0 && world_.is_single_process();
}

void Progress::open_metrics() {
  if (config_.out_dir.empty() || world_.rank() != 0) return;
  std::filesystem::create_directories(config_.out_dir);
  metrics_ = std::make_unique<MetricsLog>((std::filesystem::path(config_.out_dir) / "metrics.jsonl").string());
}

void Progress::measure_peak() {
  if (peak_gflops_ > 0.0) return;
  // The peak of the precision the run's GEMMs use: MFU against bf16's peak in bf16.
  const kernels::Precision precision = kernels::parse_precision(config_.precision);
  float peak = world_.rank() == 0 ? static_cast<float>(kernels::measure_matmul_gflops(0.3, 1024, precision)) : 0.0f;
  world_.broadcast_async(&peak, 1, 0).wait();
  peak_gflops_ = peak;
}

double Progress::core_share() const {
  // Ranks oversubscribing a node's cores (4 ranks x 1 thread on 2 cores) each get a share
  // of a core's peak, so the job's peak is the cores it can use.
  const double wanted = static_cast<double>(world_.ranks_on_node()) * kernels::num_threads();
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  return std::min(1.0, cores / wanted);
}

void Progress::say(const std::string& line) const {
  if (quiet_) return;
  std::printf("%s%s\n", live_ ? "\r\033[K" : "", line.c_str());
  std::fflush(stdout);
}

void Progress::validation(int64_t step, float val_loss) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "step %5lld | val loss %.4f", static_cast<long long>(step), val_loss);
  say(buf);
  metrics_->write({{"kind", "val"}, {"step", step}, {"val_loss", val_loss}});
}

void Progress::step(const StepResult& r, double step_seconds, bool keep, const parallel::GradientSync& sync) {
  elapsed_seconds_ += step_seconds;
  ++steps_timed_;
  if (!keep && !live_) return;
  // Tokens of the global batch; MFU against the peak of all the job's processes.
  const double ranks = static_cast<double>(config_.dp * config_.pp * config_.tp);
  const double tokens = static_cast<double>(config_.batch_size * config_.micro_batches * config_.model.block_size) *
                        static_cast<double>(config_.dp);
  const double tok_per_s = tokens / step_seconds;
  const double mfu =
      config_.model.flops_per_token(config_.model.block_size) * tok_per_s / (peak_gflops_ * 1e9 * ranks * core_share());
  const double avg = elapsed_seconds_ / static_cast<double>(std::max<int64_t>(1, steps_timed_));
  const double eta = avg * static_cast<double>(config_.steps - r.step);
  const int64_t mem = MemoryTracker::instance().total_peak();
  // Data parallel: the share of the gradient reduction time that backward hid.
  std::string overlap;
  const double comm_s = sync.comm_seconds(), exposed_s = sync.exposed_comm_seconds();
  if (config_.dp > 1 || config_.zero > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " | comm %.0f ms, %.0f%% hidden", 1e3 * comm_s,
                  comm_s > 0 ? 100.0 * std::max(0.0, 1.0 - exposed_s / comm_s) : 0.0);
    overlap = buf;
  }
  if (r.pipeline_bubble >= 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " | bubble %.0f%% (theory %.0f%%)", 100.0 * r.pipeline_bubble,
                  100.0 * r.pipeline_bubble_theory);
    overlap += buf;
  }
  if (config_.tp > 1) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " | tp comm %.0f ms, %s", 1e3 * r.tp_comm_seconds, format_bytes(r.tp_comm_bytes).c_str());
    overlap += buf;
  }
  // On a terminal every step rewrites one live line and logged steps stay; in a log file
  // (CI, Slurm) only the logged steps appear, as plain lines.
  if (!quiet_)
    std::printf("%sstep %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %8.0f tok/s | MFU %4.1f%% | mem %s%s | ETA %s%s%s",
                live_ ? "\r\033[K" : "", static_cast<long long>(r.step), static_cast<long long>(config_.steps), r.loss,
                r.lr, r.grad_norm, tok_per_s, 100.0 * mfu, format_bytes(mem).c_str(), overlap.c_str(),
                format_duration(eta).c_str(), r.skipped ? " | SKIPPED (non-finite)" : "", keep ? "\n" : "");
  std::fflush(stdout);
  if (!keep) return;
  metrics_->write({{"kind", "train"}, {"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                   {"tokens_per_s", tok_per_s}, {"mfu", mfu}, {"peak_mem_bytes", mem}, {"skipped", r.skipped},
                   {"elapsed_s", elapsed_seconds_}, {"comm_s", comm_s}, {"comm_exposed_s", exposed_s},
                   {"tp_comm_s", r.tp_comm_seconds}, {"tp_comm_bytes", r.tp_comm_bytes},
                   {"pipeline_bubble", r.pipeline_bubble}});
}

std::string memory_report(int rank, const plan::StateBytes& want, const parallel::ShardedDataParallel* sharded) {
  const MemorySnapshot m = MemoryTracker::instance().snapshot();
  auto at = [&](MemoryCategory c) { return static_cast<size_t>(c); };
  return "memory on rank " + std::to_string(rank) + ": params " + format_bytes(m.current[at(MemoryCategory::Parameters)]) +
         " (formula " + format_bytes(want.params) + ") | grads " + format_bytes(m.current[at(MemoryCategory::Gradients)]) +
         " (formula " + format_bytes(want.grads) + ") | optimizer " +
         format_bytes(m.current[at(MemoryCategory::OptimizerState)]) + " (formula " + format_bytes(want.optimizer) + ")" +
         (sharded ? " | unit buffers up to " +
                        format_bytes(sharded->gathered_buffer_bytes() + sharded->gradient_buffer_bytes())
                  : std::string()) +
         " | peak activations " + format_bytes(m.peak[at(MemoryCategory::Activations)]) + " | peak comm buffers " +
         format_bytes(m.peak[at(MemoryCategory::CommBuffers)]) + " | peak total " + format_bytes(m.total_peak);
}

}  // namespace loom::train
