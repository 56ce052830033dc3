#include "loom/train/verify_compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

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

// An element's difference; a NaN (a NaN value in either run, or in the allowance) is the worst
// there is: compared as a number it would be past no tolerance and lose to every finite one.
double or_worst(double error) { return std::isnan(error) ? std::numeric_limits<double>::infinity() : error; }

}  // namespace

Worst worst_gradient_difference(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want) {
  Worst worst;
  for (const auto& [key, w] : want) {
    if (key.rfind("grad.", 0) != 0) continue;
    const Tensor& g = got.at(key);
    check_same_shape(key, g, w);
    const double scale = std::max(1e-12, scale_of(w));
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double error = or_worst(std::fabs(static_cast<double>(g.f32()[i]) - w.f32()[i]) / scale);
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
      const double error = std::max(0.0, or_worst(diff - allowed)) / scale, relative = diff / scale;
      if (error > out.worst.error) out.worst = {name, error};
      if (relative > param_rtol && error <= param_rtol) {
        ++out.excused.elements;
        if (relative > out.excused.worst.error) out.excused.worst = {name, relative};
      }
    }
  }
  return out;
}

Worst worst_moment_difference(const TrainConfig& c, const std::map<std::string, Tensor>& got,
                              const std::map<std::string, Tensor>& want, const std::map<std::string, Tensor>& want_grads,
                              double grad_norm, double grad_rtol, double norm_rtol) {
  const bool adamw = c.optimizer == "adamw";
  const double clip = optim::clip_factor(grad_norm, static_cast<float>(c.grad_clip));
  const double first_share = adamw ? 1.0 - c.beta1 : 1.0;
  Worst worst;
  for (const auto& [key, w] : want) {
    if (key.rfind("optim.", 0) != 0) continue;
    const size_t kind_end = key.find('.', 6);
    const std::string kind = key.substr(6, kind_end - 6), name = key.substr(kind_end + 1);
    const bool second = kind == "exp_avg_sq";
    const Tensor &m = got.at(key), &g = want_grads.at("grad." + name);
    check_same_shape(key, m, w);
    const double delta = grad_rtol * scale_of(g), scale = std::max(1e-30, scale_of(w));
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double gi = std::fabs(static_cast<double>(g.f32()[i]));
      const double d = delta + (second ? 2.0 : 1.0) * norm_rtol * gi;
      const double allowed = second ? (1.0 - c.beta2) * clip * clip * (2.0 * gi + d) * d : first_share * clip * d;
      const double error = std::max(0.0, or_worst(std::fabs(static_cast<double>(m.f32()[i]) - w.f32()[i]) - allowed)) / scale;
      if (error > worst.error) worst = {kind + "." + name, error};
    }
  }
  return worst;
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
