// Parameter: a trainable tensor with its gradient and a stable dotted name
// ("blocks.0.attn.qkv.weight"). The grad-ready hook fires once per backward pass, when
// every contribution to the gradient has been added (a tied weight gets two), which is
// the moment a data-parallel wrapper may start reducing it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loom/kernels/matmul.hpp"
#include "loom/nn/shard_spec.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::nn {

class Parameter {
 public:
  using GradReadyHook = std::function<void(Parameter&)>;

  Parameter(std::string name, const Shape& shape, bool weight_decay);
  // A parameter over storage owned elsewhere: a sharded optimizer's slice of a flat shard.
  Parameter(std::string name, Tensor value_view, Tensor grad_view, bool weight_decay);

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  Tensor& value() { return value_; }
  const Tensor& value() const { return value_; }
  Tensor& grad() { return grad_; }
  const Tensor& grad() const { return grad_; }
  // The logical shape, also while the value is released (ZeRO-3 between gathers).
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_numel(shape_); }
  // Makes grad() a view into storage owned elsewhere (a data-parallel gradient bucket),
  // keeping its current values, so reductions run on the gradients in place.
  void rebind_grad(Tensor view);
  // Sharded data parallelism: value() and grad() become views of a gathered flat buffer
  // (contents as they are there), or are dropped (undefined) while the buffer is freed.
  void rebind_value(Tensor view);
  // Whether a value is here to read (false while ZeRO-3 has released it between gathers).
  bool has_value() const { return value_.defined() || bf16_only_; }
  void release_value() {
    value_ = Tensor();
    bf16_value_ = Tensor();
    bf16_only_ = false;
    bf16_owned_ = false;
    bf16_refreshed_ = false;
  }
  // The value as a GEMM reads it: value() itself in fp32; in bf16 (kernels::compute_precision)
  // a bf16 copy of it, converted at most once per weights generation (once per step, never per
  // GEMM) and dropped with the value. value() stays the fp32 master the optimizer updates.
  kernels::Operand gemm_operand();
  // The optimizer's side of the bf16 copy: where it may write the copy of the value it is about
  // to update, in the update's own pass (kernels::adamw_update), or null when this parameter
  // has no copy of its own (fp32 runs, kept in fp32, or a copy that sharded data parallelism's
  // gathers provide). After writing it, the optimizer calls bf16_copy_refreshed(): the copy is
  // then current until the optimizer's next update or kernels::weights_overwritten(), so the
  // next step's GEMMs read it without converting the master again.
  bfloat16* bf16_copy_to_refresh();
  void bf16_copy_refreshed();
  // How many times gemm_operand() converted the master into the copy (tests).
  int64_t bf16_conversions() const { return bf16_conversions_; }
  // The same as a tensor (fp32 value() or its bf16 copy): what a layer that moves its weight
  // before the GEMMs (3D tensor parallelism's depth gather) sends, converted no more often.
  const Tensor& gemm_value();
  // Sharded data parallelism's bf16 gathers: view holds value() in bf16 already (gathered as
  // such), the GEMMs' copy for this weights generation. Call after rebind_value().
  void rebind_bf16_value(Tensor view);
  // ZeRO-1/2 in bf16: view is the parameter's only full copy (its fp32 master is sharded), kept
  // current by the gathers after each step; value() is released. Only for a parameter that
  // nothing but GEMMs reads (read_only_by_gemms()).
  void bind_bf16_only(Tensor view);
  // Set by a layer whose GEMMs read this parameter through gemm_operand() or gemm_value() while
  // training (a Linear's weight, the LM head's table, the experts' weights): under DDP in bf16
  // it holds a bf16 copy of its own; one no GEMM reads (a LayerNorm's, a bias, the position
  // table) holds none, whereas ZeRO's bf16 gathers hold every parameter in bf16.
  void set_read_by_gemms(bool on) { read_by_gemms_ = on; }
  bool read_by_gemms() const { return read_by_gemms_; }
  // Set by a layer whose weight nothing reads but gemm_operand() while training (a Linear's).
  void set_read_only_by_gemms(bool on) { read_only_by_gemms_ = on; }
  bool read_only_by_gemms() const { return read_only_by_gemms_; }
  // Mixed precision leaves this parameter exact: the layer runs its GEMMs in fp32 (gemm_operand()
  // is the fp32 value, no bf16 copy exists) and sharded data parallelism gathers it in fp32. Set
  // by a layer whose output feeds a discrete decision (a mixture of experts' router: top-k).
  void set_kept_in_fp32(bool on) { kept_in_fp32_ = on; }
  bool kept_in_fp32() const { return kept_in_fp32_; }
  void rebind_grad_storage(Tensor view);
  void release_grad() { grad_ = Tensor(); }
  // Tensor parallelism: which piece of the full parameter this rank holds (default: all of it).
  const ShardSpec& shard_spec() const { return shard_spec_; }
  void set_shard_spec(const ShardSpec& spec) { shard_spec_ = spec; }
  // AdamW decays matrices, not biases or LayerNorm gains.
  bool weight_decay() const { return weight_decay_; }
  // The full tensor's rows from `rows` on are padding that nothing reaching the loss reads (the
  // token table rounded up for faster GEMMs and even tp splits): a checkpoint may hold more or
  // fewer of them, so a run under another tp still loads it. 0: every row counts.
  void set_padded_past_row(int64_t rows) { padded_past_row_ = rows; }
  int64_t padded_past_row() const { return padded_past_row_; }

  // A parameter used k times per forward (a tied embedding) receives k contributions.
  void set_contributions_per_backward(int k) { contributions_per_backward_ = k; }
  // Called by a module's backward after it has added its share to grad().
  void grad_contributed();
  void add_grad_ready_hook(GradReadyHook hook) { grad_ready_hooks_.push_back(std::move(hook)); }

 private:
  std::string name_;
  Shape shape_;
  Tensor value_;  // category Parameters
  Tensor grad_;   // category Gradients, same shape; accumulated across micro-batches
  Tensor bf16_value_;  // category Parameters: value_ in bf16, valid for bf16_generation_ and bf16_source_
  uint64_t bf16_generation_ = 0;
  const void* bf16_source_ = nullptr;
  bool bf16_only_ = false;  // bf16_value_ is the only full copy (bind_bf16_only)
  bool bf16_owned_ = false;      // bf16_value_ is this parameter's own conversion (not a gathered view)
  bool bf16_refreshed_ = false;  // written by the optimizer with the value's last update
  uint64_t bf16_refresh_epoch_ = 0;
  int64_t bf16_conversions_ = 0;
  bool read_by_gemms_ = false;
  bool read_only_by_gemms_ = false;
  bool kept_in_fp32_ = false;
  bool weight_decay_;
  int64_t padded_past_row_ = 0;
  ShardSpec shard_spec_;
  int contributions_per_backward_ = 1;
  int contributions_seen_ = 0;
  std::vector<GradReadyHook> grad_ready_hooks_;
};

}  // namespace loom::nn
