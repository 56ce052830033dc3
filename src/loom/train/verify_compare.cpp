#include "loom/train/verify_compare.hpp"

#include <algorithm>
#include <cmath>

#include "loom/error.hpp"
#include "loom/optim/adamw_spread.hpp"
#include "loom/optim/clip.hpp"

namespace loom::train {

namespace {

void check_same_shape(const std::string& key, const Tensor& got, const Tensor& want) {
  check(got.shape() == want.shape(), "verify: ", key, " is ", shape_str(got.shape()), " under the layout, ",
        shape_str(want.shape()), " serially");
}

// The largest magnitude of a tensor, what its differences are relative to.
double scale_of(const Tensor& w) {
  float scale = 0.0f;
  for (int64_t i = 0; i < w.numel(); ++i) scale = std::max(scale, std::fabs(w.f32()[i]));
  return scale;
}

}  // namespace

Worst worst_gradient_difference(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want) {
  Worst worst;
  for (const auto& [key, w] : want) {
    if (key.rfind("grad.", 0) != 0) continue;
    const Tensor& g = got.at(key);
    check_same_shape(key, g, w);
    const double scale = std::max(1e-12, scale_of(w));
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double error = std::fabs(static_cast<double>(g.f32()[i]) - w.f32()[i]) / scale;
      if (error > worst.error) worst = {key.substr(5), error};
    }
  }
  return worst;
}

ParameterComparison compare_parameters(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want,
                                       double param_rtol, const Allowances& allowances) {
  ParameterComparison out;
  for (const auto& [key, w] : want) {
    if (key.rfind("model.", 0) != 0) continue;
    const Tensor& g = got.at(key);
    check_same_shape(key, g, w);
    const std::string name = key.substr(6);
    const double scale = std::max(1e-12, scale_of(w));
    const auto allowance = allowances.find(key);
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double diff = std::fabs(static_cast<double>(g.f32()[i]) - w.f32()[i]);
      // What the allowance leaves unexplained, relative: past param_rtol, the element fails;
      // within it although the difference itself is past, the element is excused.
      const double allowed = allowance == allowances.end() ? 0.0 : allowance->second.at(i);
      const double error = std::max(0.0, diff - allowed) / scale, relative = diff / scale;
      if (error > out.worst.error) out.worst = {name, error};
      if (relative > param_rtol && error <= param_rtol) {
        ++out.excused.elements;
        if (relative > out.excused.worst.error) out.excused.worst = {name, relative};
      }
    }
  }
  return out;
}

void AdamWBound::add_step(const TrainConfig& c, const std::map<std::string, Tensor>& grads,
                          const std::map<std::string, Tensor>& state, float lr, double grad_norm, int64_t step,
                          double grad_rtol) {
  if (c.optimizer != "adamw") return;
  // AdamW steps on the clipped gradient: the tolerance scales with it.
  const float clip = optim::clip_factor(grad_norm, static_cast<float>(c.grad_clip));
  const kernels::AdamWParams p{lr, static_cast<float>(c.beta1), static_cast<float>(c.beta2), static_cast<float>(c.eps), 0.0f,
                               step};
  for (const auto& [key, g] : grads) {
    if (key.rfind("grad.", 0) != 0) continue;
    const std::string name = key.substr(5);
    const Tensor &m = state.at("optim.exp_avg." + name), &v = state.at("optim.exp_avg_sq." + name);
    std::vector<float> clipped(g.f32(), g.f32() + g.numel());
    for (float& x : clipped) x *= clip;
    const float delta = static_cast<float>(grad_rtol * scale_of(g)) * clip;
    const std::vector<float> spread = optim::adamw_update_spread(clipped.data(), m.f32(), v.f32(), g.numel(), delta, p);
    std::vector<float>& allowed = allowances_["model." + name];
    allowed.resize(spread.size(), 0.0f);
    for (size_t i = 0; i < spread.size(); ++i) allowed[i] += spread[i];
  }
}

}  // namespace loom::train
