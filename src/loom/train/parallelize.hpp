// The parallelize recipe: from the resolved config and the job's world to this rank's part
// of the model, made parallel in one fixed order (docs/architecture.md): the mesh and its
// groups -> tensor-parallel layers -> pipeline chunks and schedule -> replicated-gradient
// sums -> data parallelism (DDP or ZeRO/HSDP) -> the gradient finalizer. The serial run is
// the one-rank layout: every group exists, with one member.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/comm/device_mesh.hpp"
#include "loom/comm/process_group.hpp"
#include "loom/parallel/context_parallel/context_parallel_layers.hpp"
#include "loom/parallel/finalize_gradients.hpp"
#include "loom/parallel/gradient_sync.hpp"
#include "loom/parallel/expert_parallel/expert_parallel_layers.hpp"
#include "loom/parallel/pipeline/executor.hpp"
#include "loom/parallel/tensor_parallel/sequence_parallel.hpp"
#include "loom/parallel/tensor_parallel/tensor_parallel_layers.hpp"
#include "loom/parallel/tensor_parallel_3d/layers_3d.hpp"
#include "loom/train/config.hpp"
#include "loom/train/model_spec.hpp"

namespace loom::train {

struct Parallelized {
  std::string placement;  // where the ranks were pinned, for the log ("" when left to the OS)
  // Axes "dp", "pp", "cp", "tp"; named groups "replicate" and "shard" (dp split for HSDP; with
  // ZeRO over all of dp, replicate has one member), "expert_dp" x "ep" (dp split for expert
  // parallelism: ep neighbouring dp ranks share out the experts) and "embedding" (the first
  // and last stage).
  std::unique_ptr<comm::DeviceMesh> mesh;
  // The ranks sharing a mixture's experts out (ep, a grid's plane, or both) again, for the
  // routing statistics alone (moe_metrics.hpp); empty without experts shared out. Before the
  // layers, whose dispatchers use them, so they outlive them.
  std::vector<std::unique_ptr<comm::ProcessGroup>> expert_statistics;
  // Also "batch" (the ranks sharing out the global batch: dp, or dp x depth under tp_3d) and
  // "tensor" (one replica's model-parallel group: tp, or the grid depth x row x col).
  std::unique_ptr<parallel::tp::TensorParallelLayers> tp_layers;  // tp > 1
  std::unique_ptr<parallel::cp::ContextParallelLayers> cp_layers;  // cp > 1
  // Data parallelism's group under context parallelism: dp x cp (replicas of every parameter).
  std::unique_ptr<comm::ProcessGroup> data_and_context;            // cp > 1
  std::unique_ptr<parallel::tp::ReplicatedGradientSum> context_mean;  // cp > 1 with ZeRO: the mean over cp first
  std::unique_ptr<parallel::tp3d::Grid3D> grid;                   // tp_3d: axes "row", "col", "depth"
  std::unique_ptr<parallel::tp3d::Layers3D> tp3d_layers;          // tp_3d
  std::vector<std::string> notes;  // lines for the log (a layer kept serial under tp_3d, and why)
  // The groups whose traffic the progress line reports as tensor-parallel communication:
  // tp, or the grid's axes row, col and depth.
  std::vector<comm::ProcessGroup*> tensor_comm_groups;
  // The groups a mixture of experts' statistics are summed over for the progress line: dp, pp,
  // and the ranks holding parts of the same sequences (cp; tp under sequence parallelism).
  std::vector<comm::ProcessGroup*> moe_stat_groups;
  std::unique_ptr<parallel::ep::ExpertParallelLayers> ep_layers;  // ep > 1 (wraps the tp, 3D or serial layers)
  std::unique_ptr<nn::Module> model;  // the model, or this rank's pipeline chunks under one module
  std::vector<nn::Module*> chunks;    // the model, or this rank's chunks in virtual-stage order
  // The last stage's copy of a tied parameter when another rank owns it (it counts nowhere).
  const nn::Parameter* tied_copy = nullptr;
  std::unique_ptr<parallel::pipeline::PipelineExecutor> pipeline;  // pp > 1
  std::vector<parallel::pipeline::Action> pipeline_actions;        // this rank's part of the schedule
  std::unique_ptr<parallel::tp::ReplicatedGradientSum> replicated_sum;   // sequence parallel; tp_3d: mean over depth
  std::unique_ptr<parallel::GradientSync> gradient_sync;
  std::unique_ptr<parallel::GradientFinalizer> finalizer;

  comm::ProcessGroup& group(const std::string& name) const { return mesh->group(name); }
};

// Collective over world: step 1 alone, the mesh with every named group of the layout.
std::unique_ptr<comm::DeviceMesh> parallel_mesh(const TrainConfig& config, comm::ProcessGroup& world);

// Collective over world (its size must be dp x pp x tp): the model family's part of this
// rank, made parallel (the spec also gets its loss for the tensor-parallel group).
Parallelized parallelize(const TrainConfig& config, ModelSpec& spec, comm::ProcessGroup& world);

}  // namespace loom::train
