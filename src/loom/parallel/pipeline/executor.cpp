#include "loom/parallel/pipeline/executor.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <utility>

#include "loom/comm/byte_transport.hpp"
#include "loom/error.hpp"
#include "loom/trace/recorder.hpp"

namespace loom::parallel::pipeline {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

PipelineExecutor::PipelineExecutor(std::vector<nn::GPT*> chunks, comm::ProcessGroup& group, int64_t micro_batches,
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

void PipelineExecutor::receive(Tensor& x, bool gradient, int64_t virtual_stage, int64_t micro_batch) {
  const int64_t peer = gradient ? virtual_stage + 1 : virtual_stage - 1;
  trace::Span span("p2p", gradient ? "recv gradient" : "recv activation");
  span.arg("group", group_.name()).arg("bytes", 4 * x.numel()).arg("peer", static_cast<int>(peer % p_)).arg("mb", micro_batch);
  group_.recv_async(x.f32(), x.numel(), static_cast<int>(peer % p_), tag(gradient, virtual_stage, micro_batch)).wait();
}

void PipelineExecutor::send(const Tensor& y, bool gradient, int64_t virtual_stage, int64_t micro_batch) {
  // virtual_stage: the receiver's; the send completes while this rank computes on.
  const int peer = static_cast<int>(virtual_stage % p_);
  trace::AsyncSpan span("p2p", gradient ? "send gradient" : "send activation",
                        trace::enabled() ? nlohmann::json{{"group", group_.name()}, {"bytes", 4 * y.numel()},
                                                          {"peer", peer}, {"mb", micro_batch}}
                                         : nlohmann::json());
  sends_.push_back({group_.send_async(y.f32(), y.numel(), peer, tag(gradient, virtual_stage, micro_batch)), y, std::move(span)});
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
                             const std::function<void(int64_t, int64_t)>& before_backward) {
  const int64_t S = p_ * v_;
  std::map<std::pair<int64_t, int64_t>, nn::Context> contexts;  // (micro-batch, chunk)
  std::map<std::pair<int64_t, int64_t>, Tensor> dlogits;        // last stage: from the loss
  double loss_sum = 0.0;
  trace_.clear();
  for (const Action& a : actions) {
    if (is_transfer(a.kind)) continue;  // posted by the forwards and backwards themselves
    TimedAction timed{a, 0.0, 0.0};
    const int64_t k = a.chunk * p_ + rank_;  // virtual stage
    const auto key = std::make_pair(a.micro_batch, a.chunk);
    nn::GPT& model = *chunks_.at(static_cast<size_t>(a.chunk));
    trace::set_micro_batch(a.micro_batch);
    if (a.kind == ActionKind::Forward) {
      Tensor x;
      if (k == 0) {
        x = input(a.micro_batch);
      } else {
        x = Tensor::empty(activation_shape_, DType::F32, MemoryCategory::Activations);
        receive(x, false, k, a.micro_batch);
      }
      MemoryScope scope(MemoryCategory::Activations);
      trace::Span span("pipeline", "F");  // the timeline's box: after the receive, as timed.start
      span.arg("mb", a.micro_batch).arg("chunk", a.chunk);
      timed.start = now_seconds();  // after the receive: waiting is bubble, not compute
      Tensor y = model.forward(x, contexts[key]);
      if (k == S - 1) {
        loss_sum += loss(y, a.micro_batch);  // y becomes dlogits
        dlogits[key] = y;
      } else {
        send(y, false, k + 1, a.micro_batch);
      }
    } else {
      Tensor dy;
      if (k == S - 1) {
        dy = dlogits.at(key);
        dlogits.erase(key);
      } else {
        dy = Tensor::empty(activation_shape_, DType::F32, MemoryCategory::Activations);
        receive(dy, true, k, a.micro_batch);
      }
      before_backward(a.micro_batch, a.chunk);
      MemoryScope scope(MemoryCategory::Activations);
      trace::Span span("pipeline", "B");
      span.arg("mb", a.micro_batch).arg("chunk", a.chunk);
      timed.start = now_seconds();
      Tensor dx = model.backward(dy, contexts.at(key));
      contexts.erase(key);
      if (k > 0)
        send(dx, true, k - 1, a.micro_batch);
    }
    timed.end = now_seconds();
    trace_.push_back(timed);
    reap_sends(false);
  }
  trace::set_micro_batch(-1);
  reap_sends(true);
  check(contexts.empty(), "pipeline schedule left ", contexts.size(), " micro-batch(es) without their backward");
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

double PipelineExecutor::run_forward(const std::function<Tensor(int64_t)>& input,
                                     const std::function<float(Tensor&, int64_t)>& loss, int64_t micro_batches) {
  const int64_t S = p_ * v_;
  double loss_sum = 0.0;
  for (int64_t mb = 0; mb < micro_batches; ++mb)
    for (int64_t c = 0; c < v_; ++c) {
      const int64_t k = c * p_ + rank_;
      Tensor x;
      if (k == 0) {
        x = input(mb);
      } else {
        x = Tensor::empty(activation_shape_, DType::F32, MemoryCategory::Activations);
        receive(x, false, k, mb);
      }
      MemoryScope scope(MemoryCategory::Activations);
      nn::Context ctx;
      Tensor y = chunks_[static_cast<size_t>(c)]->forward(x, ctx);
      if (k == S - 1)
        loss_sum += loss(y, mb);
      else
        send(y, false, k + 1, mb);
    }
  reap_sends(true);
  return loss_sum;
}

}  // namespace loom::parallel::pipeline
