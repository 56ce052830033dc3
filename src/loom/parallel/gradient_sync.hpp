// The one face of data parallelism: what the trainer asks of DDP and of sharded data
// parallelism (ZeRO 1-3, HSDP) alike, so it holds one pointer and no pairs of branches.
// A step is: zero_grad(); micro-batches, each backward with set_sync(true only where the
// gradient should be reduced during it); finish (sync_now() for what was not launched during
// backward, then finish_gradient_sync()); the optimizer steps optimizer_parameters(); then
// after_optimizer_step(). Without data parallelism (one replica) LocalGradients does nothing.
#pragma once

#include <functional>
#include <vector>

#include "loom/nn/module.hpp"

namespace loom::parallel {

using ParameterFilter = std::function<bool(const nn::Parameter&)>;

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  // What the optimizer steps: the model's parameters, or this rank's shards of them.
  virtual std::vector<nn::Parameter*> optimizer_parameters() const = 0;
  // Zeroes what the optimizer's zero_grad() does not reach (the sharded gradients).
  virtual void zero_grad() {}
  // Gradient accumulation: a backward with sync off launches no reduction it can defer.
  virtual void set_sync(bool on) = 0;
  // Launches the reduction of every gradient not launched during backward.
  virtual void sync_now() = 0;
  // Waits for every reduction; afterwards each gradient (or shard) is the data-parallel mean.
  virtual void finish_gradient_sync() = 0;
  // After the optimizer stepped: ZeRO all-gathers the updated shards (or drops stale copies).
  virtual void after_optimizer_step() {}
  // After forwards with no backward (an evaluation): ZeRO-3 frees the units a backward would
  // have released (each chunk's root unit; under its keep-for-the-step mode every unit).
  virtual void after_evaluation() {}
  // Whether gradients live as shards, which differ between the ranks of a shard group: such
  // a sync cannot reduce a pipeline's tied token table before its two copies are summed.
  virtual bool shards_gradients() const { return false; }
  // Whether every backward reduces (ZeRO-2/3 keep no full gradient between micro-batches), so
  // a pipeline reduces during its backwards too.
  virtual bool reduces_every_backward() const { return false; }
  // Where p's gradient lives on this rank, whole or as the shard of a unit p has to itself: what
  // a sum of a pipeline's tied table copies adds to (after finish_gradient_sync() where the
  // reductions ran during backward, the reduced shard; before sync_now() the full gradient).
  virtual Tensor gradient_held(nn::Parameter& p) { return p.grad(); }
  // Collective over the sync's group: the squared norm of this replica's averaged gradient,
  // each element counted once (summed over shards); counted picks the model parameters.
  virtual double grad_sum_squares(const ParameterFilter& counted) = 0;
  // In the last synced step: seconds the reductions took, and the part the step waited for.
  virtual double comm_seconds() const = 0;
  virtual double exposed_comm_seconds() const = 0;
};

// One replica: the gradients are already the mean, nothing to communicate.
class LocalGradients : public GradientSync {
 public:
  explicit LocalGradients(nn::Module& model) : params_(model.parameters()) {}
  std::vector<nn::Parameter*> optimizer_parameters() const override { return params_; }
  void set_sync(bool) override {}
  void sync_now() override {}
  void finish_gradient_sync() override {}
  double grad_sum_squares(const ParameterFilter& counted) override;
  double comm_seconds() const override { return 0.0; }
  double exposed_comm_seconds() const override { return 0.0; }

 private:
  std::vector<nn::Parameter*> params_;
};

// The squared norm of the listed parameters' gradients that counted accepts.
double sum_squares_of(const std::vector<nn::Parameter*>& params, const ParameterFilter& counted);

}  // namespace loom::parallel
