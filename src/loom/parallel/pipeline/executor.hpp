// The pipeline executor: runs one rank's part of any schedule (GPipe, 1F1B, interleaved or a
// custom one; a schedule is data) over its model chunks, doing exactly what the rank's
// action list says: a receive action posts that receive, a send action posts the send of an
// output computed earlier, forwards and backwards compute. Who talks to whom is the
// schedule's (each transfer names its peer), never re-derived here. Sends and receives are
// asynchronous: a send completes while this rank computes on, a receive where its data is
// first needed, so any schedule that passes the pre-flight check (schedule_check.hpp) runs
// without deadlock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/nn/module.hpp"
#include "loom/parallel/pipeline/schedule.hpp"
#include "loom/parallel/pipeline/timeline.hpp"
#include "loom/trace/recorder.hpp"

namespace loom::parallel::pipeline {

class PipelineExecutor {
 public:
  // chunks: this rank's model chunks (chunk c is virtual stage c * p + rank of p * v).
  // activation_shape: what flows between stages, (B, T, C) or (B, T/t, C) under sequence
  // parallelism.
  PipelineExecutor(std::vector<nn::Module*> chunks, comm::ProcessGroup& group, int64_t micro_batches,
                   Shape activation_shape);

  // input(mb): micro-batch mb's token ids (used by the first virtual stage).
  // loss(logits, mb): on the last virtual stage, the loss of micro-batch mb, turning logits
  //   into dlogits in place (scaled for the micro-batch count).
  // before_backward(last): before each backward, whether it is this rank's last backward of
  //   its chunk in `actions` (whichever micro-batch that is: a schedule file may end with any),
  //   so data and sequence parallelism reduce a chunk's gradients only once they are whole.
  // prepare(ctx, mb): sets up micro-batch mb's context on every stage before its first
  //   forward there (the step's dropout rows); none: a bare context.
  // Returns the summed loss of the micro-batches on the last stage's rank (0 elsewhere).
  using PrepareContext = std::function<void(nn::Context&, int64_t)>;
  double run(const std::vector<Action>& actions, const std::function<Tensor(int64_t)>& input,
             const std::function<float(Tensor&, int64_t)>& loss, const std::function<void(bool)>& before_backward,
             const PrepareContext& prepare = {});
  // Forward only (evaluation): a schedule of forwards, micro-batch after micro-batch, with
  // their transfers; loss(logits, mb) must not write the logits. Returns the summed loss on the last stage's rank (0 elsewhere).
  double run_forward(const std::function<Tensor(int64_t)>& input, const std::function<float(Tensor&, int64_t)>& loss,
                     int64_t micro_batches);

  int64_t virtual_stages() const { return p_ * v_; }
  // The last run's forwards and backwards on this rank, in seconds of the system-wide
  // monotonic clock (comparable across the processes of one machine).
  const std::vector<TimedAction>& trace() const { return trace_; }
  // Collective over the pipeline: every rank's trace of the last run, times from the first
  // compute's start: the measured picture (timeline_svg) and bubble.
  Timeline gather_timeline();

 private:
  using TransferKey = std::tuple<bool, int64_t, int64_t>;  // (gradient?, micro-batch, this rank's chunk)
  struct PendingRecv {
    comm::Work work;
    Tensor data;  // (B, T, C) or (B, T/t, C): filled when work completes
    int peer;
  };
  struct PendingSend {
    comm::Work work;
    Tensor data;  // alive until the send completes
    trace::AsyncSpan span;
  };
  // What one run has in flight between its actions.
  struct Transfers {
    std::map<TransferKey, PendingRecv> receives;  // posted, not yet consumed by their compute
    std::map<TransferKey, Tensor> outputs;        // computed, not yet sent
  };

  // Runs `actions` in order. training: keep each forward's context and the last stage's
  // dlogits for the backward; otherwise (evaluation) forwards only, logits left as they are.
  double execute(const std::vector<Action>& actions, const std::function<Tensor(int64_t)>& input,
                 const std::function<float(Tensor&, int64_t)>& loss,
                 const std::function<void(bool)>& before_backward, const PrepareContext& prepare, bool training);
  // virtual_stage: the receiving stage's.
  int tag(bool gradient, int64_t virtual_stage, int64_t micro_batch) const;
  void post_receive(Transfers& t, const Action& a);
  void post_send(Transfers& t, const Action& a);
  // Waits for the receive that feeds compute action a and returns its data.
  Tensor take_received(Transfers& t, const Action& a, bool gradient);
  void reap_sends(bool all);

  std::vector<nn::Module*> chunks_;
  comm::ProcessGroup& group_;
  int64_t p_, v_, rank_, micro_batches_;
  Shape activation_shape_;
  std::vector<PendingSend> sends_;
  std::vector<TimedAction> trace_;
};

}  // namespace loom::parallel::pipeline
