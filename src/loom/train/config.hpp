// The training configuration and its schema. One table (config_schema) names every key
// with its section, type, default and help; the TOML reader, the command-line flags and the
// configuration reference are all generated from it, so they cannot drift apart.
#pragma once

#include <cstdint>
#include <array>
#include <string>
#include <variant>
#include <vector>

#include "loom/comm/mesh_layout.hpp"
#include "loom/nn/gcn.hpp"
#include "loom/nn/gpt.hpp"

namespace loom::train {

struct TrainConfig {
  std::string family = "gpt";  // the model family (key `model`): gpt or gcn
  nn::GPTConfig model;  // vocab_size comes from the tokenizer at run time
  nn::GcnConfig gcn;

  // [data]
  std::string data = "data/tinyshakespeare.txt";
  std::string tokenizer = "char";
  std::string tokenizer_dir;  // tokenizer "gpt2": where vocab.json and merges.txt are
  double val_fraction = 0.1;
  std::string split;  // gcn: train, val, test node ranges "0:140,200:500,500:1500"; "" = the graph's own

  // [train]
  int64_t steps = 1000;
  int64_t batch_size = 8;    // B: sequences per micro-batch
  int64_t micro_batches = 1; // gradient accumulation: micro-batches per optimizer step
  int64_t seed = 1337;
  std::string on_nan = "stop";  // "stop" or "skip" the step
  std::string precision = "fp32";  // GEMM precision: fp32, or bf16 with fp32 master weights

  // [optim]
  std::string optimizer = "adamw";
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 100;
  int64_t decay_steps = 0;  // 0: decay over all steps
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double momentum = 0.9;
  double grad_clip = 1.0;  // 0: off

  // [parallel]: degrees of the layout dp x pp x tp (tp fastest-varying over the ranks)
  int64_t dp = 1;
  int64_t pp = 1;
  int64_t tp = 1;
  int64_t cp = 1;                     // context parallel: the sequence split over cp ranks (ring attention)
  std::string cp_split = "zigzag";    // zigzag (balanced causal work) or contiguous
  int64_t ep = 1;                 // expert parallel: a split of dp (mixture of experts)
  std::string schedule = "1f1b";  // pipeline schedule: gpipe, 1f1b or interleaved
  int64_t chunks = 1;             // model chunks per pipeline rank (interleaved: v >= 2)
  std::string schedule_file;      // a custom pipeline schedule to train instead of `schedule`
  std::string pp_layers;          // blocks per pipeline stage, "3,3,2,2"; "" = balanced
  bool sequence_parallel = false;  // split LayerNorm/residual activations along the sequence (tp > 1)
  std::string tp_overlap = "on";   // with tp > 1: "on": collectives under the linear layers' and LM head's GEMMs; "off": blocking
  int64_t zero = 0;               // ZeRO stage: 0 = DDP, 1-3 sharded (3 = FSDP)
  std::string zero3_reshard = "micro-batch";  // ZeRO-3 frees gathered units per micro-batch or per step
  int64_t hsdp_shard = 0;         // HSDP: shard over groups of this many dp ranks (0 = all of dp)
  std::string allreduce = "mpi";  // DDP's all-reduce algorithm
  double bucket_mb = 25.0;        // DDP gradient bucket size
  std::string grad_reduce_dtype = "fp32";  // data-parallel gradient reductions on the wire: fp32 or bf16
  double net_gbps = 0.0;          // emulated link for all-reduce (0: the real one)
  double net_latency_us = 0.0;
  std::string pin_ranks = "auto";  // auto: pin one-thread ranks to cores when a node has more ranks than cores; off
  double comm_timeout = 300.0;     // seconds any wait for other ranks may last before the watchdog ends the job; 0 = off
  std::string tp_3d;               // 3D tensor parallelism's grid "R,C,D" (row, col, depth); "" = off
  std::string tp_3d_overlap = "on";  // "on": 3D collectives overlapped with compute; "off": blocking
  bool graph_permute = true;       // gcn under tp_3d: Plexus's double random node permutation
  int64_t graph_aggregation_chunks = 1;  // gcn under tp_3d: row ranges of the blocked, overlapped aggregation

  // [run]
  std::string out_dir = "runs/default";
  int64_t log_every = 10;
  int64_t eval_every = 200;  // 0: only at the end
  int64_t eval_batches = 20;
  int64_t checkpoint_every = 0;  // 0: only at the end
  int64_t keep_checkpoints = 2;
  std::string checkpoint_format = "auto";  // sharded (a directory, one file per rank), single, or auto
  bool checkpoint_async = false;  // periodic checkpoints written by a thread while training goes on
  int64_t threads = 0;           // 0: all cores
  double peak_gflops = 0;        // MFU denominator; 0: measured at start-up
  std::string resume;
  bool overwrite = false;    // a fresh run may replace the run already in out_dir (its checkpoints, latest, metrics)
  bool trace = false;        // write a Chrome trace of trace_steps to out_dir/trace.json
  std::string trace_steps;   // "5:8"; "": steps 2-4
  std::string pipeline_svg;  // pp > 1: write the last step's measured timeline here            // "", a checkpoint file, a run directory, or "latest"

  // Throws loom::Error naming each invalid value.
  void validate() const;
  void check_context_parallel() const;
  void check_pipeline_svg() const;
  void validate_tp_3d() const;
  // The refusals and requirements of expert parallelism (part of validate()).
  void validate_expert_parallel() const;
  // The ranks one copy of the model state is sharded over: hsdp_shard, else all of dp
  // (with zero = 0 every rank holds everything, so 1).
  // pp_layers as numbers (empty: balanced); loom::Error naming the text when malformed.
  std::vector<int64_t> pipeline_layers() const;
  int64_t shard_size() const { return zero == 0 ? 1 : (hsdp_shard > 0 ? hsdp_shard : dp); }
  // 3D tensor parallelism: {R, C, D} parsed from tp_3d ({1, 1, 1} when off; loom::Error
  // naming the text when malformed); its ranks R * C * D; the batch is split over dp x D.
  std::array<int64_t, 3> tp_3d_grid() const;
  bool tp_3d_on() const { return !tp_3d.empty(); }
  int64_t tp_3d_ranks() const;
  int64_t batch_shards() const { return dp * tp_3d_grid()[2]; }
  // Every rank of the layout: dp x pp x cp x tp (x R x C x D).
  int64_t world_ranks() const { return dp * pp * cp * tp * tp_3d_ranks(); }
  // The ranks' mesh dp x pp x cp x tp, tp varying fastest (tensor-parallel partners are
  // neighbouring ranks), then cp, then pp; with tp_3d the axes depth x row x col before tp
  // (col fastest, as AxoNN).
  std::vector<comm::MeshDim> mesh_dims() const {
    std::vector<comm::MeshDim> dims{{"dp", static_cast<int>(dp)}, {"pp", static_cast<int>(pp)}, {"cp", static_cast<int>(cp)}};
    if (tp_3d_on()) {
      const std::array<int64_t, 3> g = tp_3d_grid();
      dims.push_back({"depth", static_cast<int>(g[2])});
      dims.push_back({"row", static_cast<int>(g[0])});
      dims.push_back({"col", static_cast<int>(g[1])});
    }
    dims.push_back({"tp", static_cast<int>(tp)});
    return dims;
  }
  comm::MeshLayout mesh_layout() const { return comm::MeshLayout(mesh_dims(), static_cast<int>(world_ranks())); }
};

using ConfigTarget = std::variant<int64_t*, double*, bool*, std::string*>;

struct ConfigKey {
  std::string section;  // TOML table: model, data, train, optim, parallel, run
  std::string key;      // TOML key; the flag is --key with '_' -> '-'
  std::string help;
  ConfigTarget target;
};

std::vector<ConfigKey> config_schema(TrainConfig& config);
std::string flag_name(const std::string& key);  // "n_layer" -> "n-layer"
std::string type_name(const ConfigTarget& target);
std::string value_string(const ConfigTarget& target);

// Sets one key from its text form (a flag's value); throws naming the key and expected type.
void set_from_string(const ConfigKey& key, const std::string& text);
// Applies a TOML file over the current values; unknown sections/keys and wrong types are
// errors naming the file, key and a "did you mean" suggestion.
void apply_toml_file(TrainConfig& config, const std::string& path);
void apply_toml_string(TrainConfig& config, const std::string& text, const std::string& origin);
// The resolved configuration as TOML (printed by --dry-run, stored in checkpoints).
std::string to_toml(TrainConfig& config);
// Markdown reference of every key (docs/configuration.md is generated from it).
std::string config_reference_markdown();

// Closest candidate by edit distance, or "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// "R,C,D" -> {R, C, D} ("" -> {1, 1, 1}); loom::Error naming the text when malformed
// (TrainConfig::tp_3d_grid, and `loom plan --tp-3d R,C,D`).
std::array<int64_t, 3> parse_tp_3d_grid(const std::string& tp_3d);

}  // namespace loom::train
