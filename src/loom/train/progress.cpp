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

Progress::Progress(const TrainConfig& config, comm::ProcessGroup& world, bool quiet, StepWork work)
    : config_(config), world_(world), quiet_(quiet || world.rank() != 0), work_(std::move(work)) {
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

void Progress::run_starts(int64_t step) { metrics_->write({{"kind", "start"}, {"step", step}}); }

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

namespace {

// " | val_acc 0.7900" for each metric.
std::string metrics_text(const std::vector<Metric>& metrics) {
  std::string text;
  for (const Metric& m : metrics) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " | %s %.4f", m.name.c_str(), m.value);
    text += buf;
  }
  return text;
}

}  // namespace

void Progress::validation(int64_t step, float val_loss, const std::vector<Metric>& metrics, const std::string& kind) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "step %5lld | %s loss %.4f", static_cast<long long>(step), kind.c_str(), val_loss);
  say(buf + metrics_text(metrics));
  nlohmann::json record = {{"kind", kind}, {"step", step}, {kind + "_loss", val_loss}};
  for (const Metric& m : metrics) record[m.name] = m.value;
  metrics_->write(record);
}

void Progress::finished(const std::string& family) const {
  if (steps_timed_ == 0) return;
  char line[160], took[32];
  // Tenths below a minute: a short run is not "0s".
  if (elapsed_seconds_ < 59.95) std::snprintf(took, sizeof took, "%.1fs", elapsed_seconds_);
  std::snprintf(line, sizeof line, "done: %lld step%s in %s of training, %.0f %s/s on average", static_cast<long long>(steps_timed_),
                steps_timed_ == 1 ? "" : "s", elapsed_seconds_ < 59.95 ? took : format_duration(elapsed_seconds_).c_str(),
                work_.units * static_cast<double>(steps_timed_) / std::max(elapsed_seconds_, 1e-9), work_.unit.c_str());
  std::string next;
  if (!config_.out_dir.empty()) {
    next = "; `loom report " + config_.out_dir + "` writes its report.html";
    if (family == "gpt") next += ", `loom sample --checkpoint " + config_.out_dir + "` samples from it";
  }
  say(line + next);
}

void Progress::step(const StepResult& r, double step_seconds, bool keep, const parallel::GradientSync& sync) {
  elapsed_seconds_ += step_seconds;
  ++steps_timed_;
  if (!keep && !live_) return;
  // The family's units (tokens of the global batch, a graph's edges) per second; MFU against
  // the peak of all the job's processes.
  const double ranks = static_cast<double>(config_.world_ranks());
  const double tok_per_s = work_.units / step_seconds;
  const double mfu = work_.flops / step_seconds / (peak_gflops_ * 1e9 * ranks * core_share());
  const double avg = elapsed_seconds_ / static_cast<double>(std::max<int64_t>(1, steps_timed_));
  const double eta = avg * static_cast<double>(config_.steps - r.step);
  const int64_t mem = MemoryTracker::instance().total_peak();
  // Data parallel: the share of the gradient reduction time that backward hid.
  std::string overlap;
  const double comm_s = sync.comm_seconds(), exposed_s = sync.exposed_comm_seconds();
  if (config_.dp > 1 || config_.cp > 1 || config_.zero > 0) {  // DDP reduces over dp x cp
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
  if (config_.tp > 1 || config_.tp_3d_on()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " | %s comm %.0f ms, %s", config_.tp_3d_on() ? "tp_3d" : "tp", 1e3 * r.tp_comm_seconds,
                  format_bytes(r.tp_comm_bytes).c_str());
    overlap += buf;
    if (r.tp_comm_exposed_seconds >= 0) {
      std::snprintf(buf, sizeof buf, ", %.0f ms exposed (%.0f%% hidden)", 1e3 * r.tp_comm_exposed_seconds,
                    r.tp_comm_seconds > 0 ? 100.0 * std::max(0.0, 1.0 - r.tp_comm_exposed_seconds / r.tp_comm_seconds) : 0.0);
      overlap += buf;
    }
  }
  if (config_.cp > 1) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " | cp ring %s, %.0f ms exposed, %.0f ms attention", format_bytes(r.cp_bytes).c_str(),
                  1e3 * r.cp_wait_seconds, 1e3 * r.cp_compute_seconds);
    overlap += buf;
    if (r.cp_link_seconds > 0) {  // on the emulated link: how much of the ring's time compute hid
      std::snprintf(buf, sizeof buf, ", %.0f ms on the link (%.0f%% hidden)", 1e3 * r.cp_link_seconds,
                    100.0 * std::max(0.0, 1.0 - r.cp_link_exposed_seconds / r.cp_link_seconds));
      overlap += buf;
    }
  }
  if (r.moe.present) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " | experts max/mean %.2f, dropped %.1f%%", r.moe.load_imbalance,
                  100.0 * r.moe.dropped_fraction);
    overlap += buf;
    if (r.moe.rank_imbalance > 0) {  // the experts shared out over ranks: the busiest one's rows
      std::snprintf(buf, sizeof buf, ", ranks max/mean %.2f", r.moe.rank_imbalance);
      overlap += buf;
    }
    if (config_.ep > 1) overlap += " | a2a " + std::to_string(static_cast<int>(1e3 * r.moe.exchange_seconds)) + " ms";
  }
  // On a terminal every step rewrites one live line and logged steps stay; in a log file
  // (CI, Slurm) only the logged steps appear, as plain lines.
  if (!quiet_)
    std::printf("%sstep %5lld/%lld | loss %.4f%s | lr %.2e | norm %.3f | %8.0f %s/s | %.1f ms | MFU %4.1f%% | mem %s%s | ETA %s%s%s",
                live_ ? "\r\033[K" : "", static_cast<long long>(r.step), static_cast<long long>(config_.steps), r.loss,
                metrics_text(r.metrics).c_str(), r.lr, r.grad_norm, tok_per_s, work_.unit.c_str(), 1e3 * step_seconds,
                100.0 * mfu, format_bytes(mem).c_str(), overlap.c_str(),
                format_duration(eta).c_str(), r.skipped ? " | SKIPPED (non-finite)" : "", keep ? "\n" : "");
  std::fflush(stdout);
  if (!keep) return;
  nlohmann::json record = {{"kind", "train"}, {"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                   {work_.metrics_key, tok_per_s}, {"step_s", step_seconds}, {"mfu", mfu}, {"peak_mem_bytes", mem}, {"skipped", r.skipped},
                   {"elapsed_s", elapsed_seconds_}, {"comm_s", comm_s}, {"comm_exposed_s", exposed_s},
                   {"tp_comm_s", r.tp_comm_seconds}, {"tp_comm_bytes", r.tp_comm_bytes},
                   {"pipeline_bubble", r.pipeline_bubble}, {"cp_ring_bytes", r.cp_bytes},
                   {"cp_ring_exposed_s", r.cp_wait_seconds}, {"cp_attention_s", r.cp_compute_seconds},
                   {"cp_ring_link_s", r.cp_link_seconds}, {"cp_ring_link_exposed_s", r.cp_link_exposed_seconds}};
  for (const Metric& m : r.metrics) record[m.name] = m.value;
  if (r.tp_comm_exposed_seconds >= 0) record["tp_comm_exposed_s"] = r.tp_comm_exposed_seconds;
  if (r.moe.present) {
    record["moe_load"] = r.moe.load;
    record["moe_load_imbalance"] = r.moe.load_imbalance;
    record["moe_dropped_fraction"] = r.moe.dropped_fraction;
    record["moe_aux_loss"] = r.moe.aux_loss;
    record["moe_a2a_s"] = r.moe.exchange_seconds;
    if (r.moe.rank_imbalance > 0) record["moe_rank_imbalance"] = r.moe.rank_imbalance;
  }
  metrics_->write(record);
}

std::string memory_report(int rank, const plan::StateBytes& want, int64_t gathered) {
  const MemorySnapshot m = MemoryTracker::instance().snapshot();
  auto at = [&](MemoryCategory c) { return static_cast<size_t>(c); };
  return "memory on rank " + std::to_string(rank) + ": params " + format_bytes(m.current[at(MemoryCategory::Parameters)]) +
         " (formula " + format_bytes(want.params) + ") | grads " + format_bytes(m.current[at(MemoryCategory::Gradients)]) +
         " (formula " + format_bytes(want.grads) + ") | optimizer " +
         format_bytes(m.current[at(MemoryCategory::OptimizerState)]) + " (formula " + format_bytes(want.optimizer) + ")" +
         (gathered > 0 ? " | peak gathered units " + format_bytes(m.peak[at(MemoryCategory::Gathered)]) + " (formula " +
                             format_bytes(gathered) + ")"
                       : std::string()) +
         " | peak activations " + format_bytes(m.peak[at(MemoryCategory::Activations)]) + " | peak comm buffers " +
         format_bytes(m.peak[at(MemoryCategory::CommBuffers)]) + " | peak total " + format_bytes(m.total_peak);
}

}  // namespace loom::train
