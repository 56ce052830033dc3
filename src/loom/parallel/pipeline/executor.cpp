#include "loom/parallel/pipeline/executor.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "loom/comm/activation_wire.hpp"
#include "loom/comm/byte_transport.hpp"
#include "loom/error.hpp"
#include "loom/trace/recorder.hpp"

namespace loom::parallel::pipeline {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

PipelineExecutor::PipelineExecutor(std::vector<nn::Module*> chunks, comm::ProcessGroup& group, int64_t micro_batches,
                                   Shape activation_shape)
    : chunks_(std::move(chunks)),
      group_(group),
      p_(group.size()),
      v_(static_cast<int64_t>(chunks_.size())),
      rank_(group.rank()),
      micro_batches_(micro_batches),
      activation_shape_(std::move(activation_shape)) {
  check(v_ >= 1, "pipeline executor: no model chunks");
  check(2 * p_ * v_ * micro_batches_ < 32767, "pipeline: ", micro_batches_, " micro-batches x ", p_ * v_,
        " virtual stages exceed the MPI tags this executor uses");
}

int PipelineExecutor::tag(bool gradient, int64_t virtual_stage, int64_t micro_batch) const {
  return static_cast<int>(((gradient ? 1 : 0) * p_ * v_ + virtual_stage) * micro_batches_ + micro_batch);
}

void PipelineExecutor::post_receive(Transfers& t, const Action& a) {
  const bool gradient = a.kind == ActionKind::RecvGradient;
  const TransferKey key{gradient, a.micro_batch, a.chunk};
  check(!t.receives.contains(key), "pipeline rank ", rank_, ": ", to_string(a), " is posted twice");
  Tensor x = Tensor::empty(activation_shape_, DType::F32, MemoryCategory::Activations);
  // Activations and their gradients cross in the group's activation dtype (bf16 in a bf16 run).
  comm::Work work =
      comm::recv_activations_async(group_, x.f32(), x.numel(), a.peer, tag(gradient, a.chunk * p_ + rank_, a.micro_batch));
  t.receives.emplace(key, PendingRecv{std::move(work), x, a.peer});
}

void PipelineExecutor::post_send(Transfers& t, const Action& a) {
  const bool gradient = a.kind == ActionKind::SendGradient;
  const auto it = t.outputs.find({gradient, a.micro_batch, a.chunk});
  check(it != t.outputs.end(), "pipeline rank ", rank_, ": ", to_string(a), " sends the output of ",
        gradient ? "B" : "F", a.micro_batch, a.chunk != 0 ? "." + std::to_string(a.chunk) : "",
        ", which no earlier action computed (or it was sent already)");
  const Tensor y = std::move(it->second);
  t.outputs.erase(it);
  // The tag names the receiving virtual stage: the next one for an activation, else the previous.
  const int64_t receiver = a.chunk * p_ + rank_ + (gradient ? -1 : 1);
  trace::AsyncSpan span("p2p", gradient ? "send gradient" : "send activation",
                        trace::enabled() ? nlohmann::json{{"group", group_.name()},
                                                          {"bytes", comm::activation_wire_bytes(group_, y.numel())},
                                                          {"peer", a.peer}, {"mb", a.micro_batch}}
                                         : nlohmann::json());
  sends_.push_back({comm::send_activations_async(group_, y.f32(), y.numel(), a.peer, tag(gradient, receiver, a.micro_batch)),
                    y, std::move(span)});
}

Tensor PipelineExecutor::take_received(Transfers& t, const Action& a, bool gradient) {
  const auto it = t.receives.find({gradient, a.micro_batch, a.chunk});
  check(it != t.receives.end(), "pipeline rank ", rank_, ": ", to_string(a), " needs the ",
        gradient ? "gradient" : "activation", " of micro-batch ", a.micro_batch,
        ", but the schedule posts no receive for it before");
  PendingRecv r = std::move(it->second);
  t.receives.erase(it);
  trace::Span span("p2p", gradient ? "recv gradient" : "recv activation");
  span.arg("group", group_.name())
      .arg("bytes", comm::activation_wire_bytes(group_, r.data.numel()))
      .arg("peer", r.peer)
      .arg("mb", a.micro_batch);
  r.work.wait();
  return r.data;
}

void PipelineExecutor::reap_sends(bool all) {
  std::vector<PendingSend> still;
  for (PendingSend& s : sends_) {
    if (all || s.work.is_done())
      s.work.wait();
    else
      still.push_back(std::move(s));
  }
  sends_.swap(still);
}

double PipelineExecutor::run(const std::vector<Action>& actions, const std::function<Tensor(int64_t)>& input,
                             const std::function<float(Tensor&, int64_t)>& loss,
                             const std::function<void(bool)>& before_backward, const PrepareContext& prepare) {
  trace_.clear();
  return execute(actions, input, loss, before_backward, prepare, /*training=*/true);
}

double PipelineExecutor::run_forward(const std::function<Tensor(int64_t)>& input,
                                     const std::function<float(Tensor&, int64_t)>& loss, int64_t micro_batches) {
  Schedule forwards = make_schedule(static_cast<int>(p_), static_cast<int>(micro_batches), static_cast<int>(v_));
  for (auto& actions : forwards.ranks)
    for (int mb = 0; mb < micro_batches; ++mb)
      for (int c = 0; c < v_; ++c) actions.push_back({ActionKind::Forward, mb, c});
  return execute(with_transfers(forwards).ranks.at(static_cast<size_t>(rank_)), input, loss, {}, {},
                 /*training=*/false);
}

double PipelineExecutor::execute(const std::vector<Action>& actions, const std::function<Tensor(int64_t)>& input,
                                 const std::function<float(Tensor&, int64_t)>& loss,
                                 const std::function<void(bool)>& before_backward, const PrepareContext& prepare,
                                 bool training) {
  const int64_t S = p_ * v_;
  // Each chunk's last backward in this rank's list: its gradients are whole after it.
  std::map<int64_t, const Action*> last_backward;
  for (const Action& a : actions)
    if (a.kind == ActionKind::Backward) last_backward[a.chunk] = &a;
  Transfers transfers;
  std::map<std::pair<int64_t, int64_t>, nn::Context> contexts;  // (micro-batch, chunk)
  std::map<std::pair<int64_t, int64_t>, Tensor> dlogits;        // last stage: from the loss
  double loss_sum = 0.0;
  for (const Action& a : actions) {
    if (is_recv(a.kind)) {
      post_receive(transfers, a);
      continue;
    }
    if (is_send(a.kind)) {
      post_send(transfers, a);
      reap_sends(false);
      continue;
    }
    check(a.chunk >= 0 && a.chunk < v_, "pipeline rank ", rank_, ": ", to_string(a), " names chunk ", a.chunk,
          ", but this rank holds ", v_);
    TimedAction timed{a, 0.0, 0.0};
    const int64_t k = a.chunk * p_ + rank_;  // virtual stage
    const auto key = std::make_pair(a.micro_batch, a.chunk);
    nn::Module& model = *chunks_[static_cast<size_t>(a.chunk)];
    if (training) trace::set_micro_batch(a.micro_batch);
    if (a.kind == ActionKind::Forward) {
      Tensor x = k == 0 ? input(a.micro_batch) : take_received(transfers, a, /*gradient=*/false);
      MemoryScope scope(MemoryCategory::Activations);
      nn::Context eval_context;
      std::optional<trace::Span> span;  // the timeline's box: after the receive, as timed.start
      if (training) span.emplace("pipeline", "F").arg("mb", a.micro_batch).arg("chunk", a.chunk);
      timed.start = now_seconds();  // after the receive: waiting is bubble, not compute
      nn::Context& ctx = training ? contexts[key] : eval_context;
      if (training && prepare) prepare(ctx, a.micro_batch);
      Tensor y = model.forward(x, ctx);
      if (k < S - 1) {
        transfers.outputs[{false, a.micro_batch, a.chunk}] = y;
      } else {
        loss_sum += loss(y, a.micro_batch);  // training: y becomes dlogits
        if (training) dlogits[key] = y;
      }
    } else {
      check(training, "pipeline rank ", rank_, ": ", to_string(a), " in a forward-only run");
      Tensor dy;
      if (k == S - 1) {
        dy = dlogits.at(key);
        dlogits.erase(key);
      } else {
        dy = take_received(transfers, a, /*gradient=*/true);
      }
      before_backward(last_backward.at(a.chunk) == &a);
      MemoryScope scope(MemoryCategory::Activations);
      trace::Span span("pipeline", "B");
      span.arg("mb", a.micro_batch).arg("chunk", a.chunk);
      timed.start = now_seconds();
      Tensor dx = model.backward(dy, contexts.at(key));
      contexts.erase(key);
      if (k > 0) transfers.outputs[{true, a.micro_batch, a.chunk}] = dx;
    }
    timed.end = now_seconds();
    if (training) trace_.push_back(timed);
    reap_sends(false);
  }
  trace::set_micro_batch(-1);
  reap_sends(true);
  check(contexts.empty(), "pipeline schedule left ", contexts.size(), " micro-batch(es) without their backward");
  check(transfers.receives.empty() && transfers.outputs.empty(), "pipeline rank ", rank_, ": the schedule left ",
        transfers.receives.size(), " receive(s) unused and ", transfers.outputs.size(), " output(s) unsent");
  return loss_sum;
}

Timeline PipelineExecutor::gather_timeline() {
  Timeline t;
  t.pp = static_cast<int>(p_);
  t.micro_batches = static_cast<int>(micro_batches_);
  t.chunks = static_cast<int>(v_);
  t.ranks = comm::all_gather_records(group_, trace_);  // start and end as each rank's clock read them
  t.peak_activations.assign(static_cast<size_t>(p_), 0);
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& rank : t.ranks)
    for (const TimedAction& a : rank) origin = std::min(origin, a.start);
  for (auto& rank : t.ranks) {
    int held = 0;
    for (TimedAction& a : rank) {
      a.start -= origin;
      a.end -= origin;
      held += a.action.kind == ActionKind::Forward ? 1 : -1;
      t.peak_activations[static_cast<size_t>(&rank - t.ranks.data())] =
          std::max(t.peak_activations[static_cast<size_t>(&rank - t.ranks.data())], held);
    }
  }
  return t;
}

}  // namespace loom::parallel::pipeline
