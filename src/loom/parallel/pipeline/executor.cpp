#include "loom/parallel/pipeline/executor.hpp"

#include <map>
#include <utility>

#include "loom/error.hpp"

namespace loom::parallel::pipeline {

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
  for (const Action& a : actions) {
    if (is_transfer(a.kind)) continue;  // posted by the forwards and backwards themselves
    const int64_t k = a.chunk * p_ + rank_;  // virtual stage
    const auto key = std::make_pair(a.micro_batch, a.chunk);
    nn::GPT& model = *chunks_.at(static_cast<size_t>(a.chunk));
    if (a.kind == ActionKind::Forward) {
      Tensor x;
      if (k == 0) {
        x = input(a.micro_batch);
      } else {
        x = Tensor::empty(activation_shape_, DType::F32, MemoryCategory::Activations);
        group_.recv_async(x.f32(), x.numel(), static_cast<int>((k - 1) % p_), tag(false, k, a.micro_batch)).wait();
      }
      MemoryScope scope(MemoryCategory::Activations);
      Tensor y = model.forward(x, contexts[key]);
      if (k == S - 1) {
        loss_sum += loss(y, a.micro_batch);  // y becomes dlogits
        dlogits[key] = y;
      } else {
        sends_.push_back({group_.send_async(y.f32(), y.numel(), static_cast<int>((k + 1) % p_), tag(false, k + 1, a.micro_batch)), y});
      }
    } else {
      Tensor dy;
      if (k == S - 1) {
        dy = dlogits.at(key);
        dlogits.erase(key);
      } else {
        dy = Tensor::empty(activation_shape_, DType::F32, MemoryCategory::Activations);
        group_.recv_async(dy.f32(), dy.numel(), static_cast<int>((k + 1) % p_), tag(true, k, a.micro_batch)).wait();
      }
      before_backward(a.micro_batch, a.chunk);
      MemoryScope scope(MemoryCategory::Activations);
      Tensor dx = model.backward(dy, contexts.at(key));
      contexts.erase(key);
      if (k > 0)
        sends_.push_back({group_.send_async(dx.f32(), dx.numel(), static_cast<int>((k - 1) % p_), tag(true, k - 1, a.micro_batch)), dx});
    }
    reap_sends(false);
  }
  reap_sends(true);
  check(contexts.empty(), "pipeline schedule left ", contexts.size(), " micro-batch(es) without their backward");
  return loss_sum;
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
        group_.recv_async(x.f32(), x.numel(), static_cast<int>((k - 1) % p_), tag(false, k, mb)).wait();
      }
      MemoryScope scope(MemoryCategory::Activations);
      nn::Context ctx;
      Tensor y = chunks_[static_cast<size_t>(c)]->forward(x, ctx);
      if (k == S - 1)
        loss_sum += loss(y, mb);
      else
        sends_.push_back({group_.send_async(y.f32(), y.numel(), static_cast<int>((k + 1) % p_), tag(false, k + 1, mb)), y});
    }
  reap_sends(true);
  return loss_sum;
}

}  // namespace loom::parallel::pipeline
