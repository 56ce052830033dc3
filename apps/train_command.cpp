// `loom train`: defaults, then the TOML file, then flags (every config key is a flag).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include "commands.hpp"
#include "loom/comm/mesh_layout.hpp"
#include "loom/comm/mpi_runtime.hpp"
#include "loom/comm/startup_watch.hpp"
#include "loom/data/input_file.hpp"
#include "loom/data/token_file.hpp"
#include "loom/agreed_error.hpp"
#include "loom/error.hpp"
#include "loom/parallel/context_parallel/load_balance.hpp"
#include "loom/parallel/pipeline/partition.hpp"
#include "loom/parallel/tensor_parallel_3d/layers_3d.hpp"
#include "loom/plan/comm_cost.hpp"
#include "loom/plan/gcn_cost.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/plan/mixed_precision_cost.hpp"
#include "loom/plan/moe_cost.hpp"
#include "loom/plan/tensor_parallel_3d_memory.hpp"
#include "loom/train/config.hpp"
#include "loom/train/gcn_spec.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/trainer.hpp"

namespace loom::apps {

namespace {

// A GCN's size comes from its graph (features, classes), so its dry run reads the graph.
void print_gcn_dry_run(train::TrainConfig config) {
  train::GcnSpec spec(config);
  spec.read_whole_graph();  // a grid's spec reads its edges when it builds the model, which a dry run does not
  std::printf("# model: %s\n", spec.describe().c_str());
  const std::array<int64_t, 3> at = spec.largest_position();
  const train::MemoryNeed need = spec.memory_need_at(at);
  const train::AvailableMemory available = train::available_memory();
  const std::string where = config.tp_3d_on() ? "grid rank (" + std::to_string(at[0]) + "," + std::to_string(at[1]) +
                                                    "," + std::to_string(at[2]) + "), the one holding the most"
                                              : "one rank";
  std::printf("# predicted memory on %s (%s%s): %s; this machine has %s available (%s)\n", where.c_str(),
              config.precision.c_str(),
              config.precision == "bf16" && !config.tp_3d_on()
                  ? ": a bf16 copy of each weight a GEMM reads, none of a bias or of a first layer's weight that multiplies sparse features"
                  : "",
              train::describe(need).c_str(), format_bytes(available.bytes).c_str(), available.source.c_str());
  const std::array<int64_t, 3> g = config.tp_3d_grid();
  const train::GraphDataBytes data = spec.data_need(at);
  std::printf("# graph data per rank: features %s + per-node arrays %s + Â %s (%s) = %s\n",
              format_bytes(data.features).c_str(), format_bytes(data.nodes).c_str(),
              format_bytes(data.adjacency).c_str(),
              spec.adjacency_exact() ? "exact"
                                     : "at most: the entries counted into its blocks, the edges listed twice (either "
                                       "way) and the self-loops the file lists fold",
              format_bytes(data.total()).c_str());
  if (config.tp_3d.empty()) return;
  const plan::GcnShape shape = spec.plan_shape();
  const plan::Grid3DBytes bytes = plan::gcn_3d_bytes_per_epoch(shape, g[0], g[1], g[2]);
  std::printf("# 3D grid %s (Plexus), as `loom plan` prices it: rank 0 peaks at about %s, transient "
              "buffers included (blocks gathered over depth, layer outputs, the node orders while loading), and "
              "moves per epoch row %s, col %s, depth %s\n",
              config.tp_3d.c_str(), format_bytes(plan::gcn_3d_memory_bytes(shape, g[0], g[1], g[2])).c_str(),
              format_bytes(bytes.row).c_str(), format_bytes(bytes.col).c_str(), format_bytes(bytes.depth).c_str());
}

// ZeRO-2/3's units held whole at some moment of a step, beyond the shards
// (plan/zero_gathered.hpp), and the formula the shards follow under ZeRO-3.
std::string zero_units_held(const train::TrainConfig& config, int64_t bytes) {
  const std::string held = format_bytes(bytes);
  if (config.zero == 2) return " + full gradients of the units in backward and in their reduce-scatter, at most " + held;
  if (config.zero != 3) return "";
  // Psi/N each of fp32 master, (bf16 copy,) fp32 gradient and optimizer moments.
  const int per_parameter = (config.precision == "bf16" ? 10 : 8) + (config.optimizer == "adamw" ? 8 : 4);
  return " (" + std::to_string(per_parameter) + " Psi/N) + gathered units " + held +
         " (at most at once: the root unit, the block computing and the one prefetched" +
         (config.precision == "bf16" ? ", bf16 with the fp32 values widened from them" : "") +
         ", and the units' full gradients until reduce-scattered)";
}

// A dry run reads no data, but a data path that the run cannot open is the commonest
// mistake it should catch before a job is queued: said, not refused, since a dry run may
// check a layout's memory where the data is not (a laptop, a login node).
void print_data_check(const std::string& path) {
  try {
    const int64_t bytes = data::check_input_file(path, "data file", data::is_token_file(path) ? -1 : data::kMaxDataBytes);
    std::printf("# data: '%s', %s\n", path.c_str(), format_bytes(bytes).c_str());
  } catch (const Error& e) {
    std::printf("# data: %s: `loom train` would stop there\n", e.what());
    std::fprintf(stderr, "loom: warning: %s\n", e.what());
  }
}

void print_dry_run(train::TrainConfig& config) {
  std::printf("# resolved configuration\n%s\n", train::to_toml(config).c_str());
  if (config.family == "gcn") {
    print_gcn_dry_run(config);
    std::printf("\n# %s\n", config.mesh_layout().rank_map().c_str());
    return;
  }
  const int64_t params = train::rank_model_parameters(config);
  std::printf("# model: %lld parameters, %lld per %s (vocabulary size taken from the data at run time: %s)\n",
              static_cast<long long>(config.model.num_parameters()), static_cast<long long>(params),
              config.tp_3d_on() ? ("grid rank of tp_3d " + config.tp_3d).c_str() : "tensor-parallel rank",
              config.tokenizer.c_str());
  print_data_check(config.data);
  const plan::StateBytes state = train::rank_training_state(config);
  // What the trainer checks before it builds the model (train/memory_budget.hpp).
  const train::AvailableMemory available = train::available_memory();
  const train::MemoryNeed need = train::training_memory(config);
  const char* mode[] = {"DDP, replicated", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP"};
  const std::string stage_share = config.pp > 1 ? ", the pipeline rank holding the most" : "";
  std::printf("# predicted state memory per rank (%s, %s, %s, sharded over %lld ranks%s): params %s + grads %s + "
              "optimizer %s = %s%s\n",
              config.precision == "bf16" ? "bf16 mixed precision: bf16 weights, fp32 master, gradients and moments" : "fp32",
              config.optimizer.c_str(), mode[config.zero], static_cast<long long>(config.shard_size()),
              stage_share.c_str(),
              format_bytes(state.params).c_str(), format_bytes(state.grads).c_str(),
              format_bytes(state.optimizer).c_str(), format_bytes(state.total()).c_str(),
              zero_units_held(config, static_cast<int64_t>(need.gathered)).c_str());
  const std::string on_rank = need.pp_rank >= 0 ? " (pipeline rank " + std::to_string(need.pp_rank) + ", needing the most)" : "";
  std::printf("# predicted memory per rank, state and the activations and logits kept for backward%s: %s; this machine "
              "has %s available (%s)\n",
              on_rank.c_str(), train::describe(need).c_str(), format_bytes(available.bytes).c_str(),
              available.source.c_str());
  if (const std::optional<train::MemoryNeed> skewed = train::skewed_routing_memory(config)) {
    std::printf("# dropless experts under ep %lld: each rank's routed rows counted at the balanced share; a router "
                "sending a rank every row it can (%.3gx the share) would need %s (activations %s); "
                "moe_capacity_factor bounds them\n",
                static_cast<long long>(config.ep),
                plan::skewed_rows_over_balanced(config.model.moe.experts, config.model.moe.top_k, config.ep),
                format_bytes(static_cast<int64_t>(skewed->total())).c_str(),
                format_bytes(static_cast<int64_t>(skewed->activations)).c_str());
  }
  if (config.tp > 1) {
    const int64_t C = config.model.n_embd, T = config.model.block_size;
    plan::TensorParallelMoe moe;
    if (config.model.moe.enabled())
      moe = {config.model.n_layer / config.model.moe.every, config.model.moe.experts,
             config.model.moe.experts / config.ep, config.ep > 1, config.model.moe.top_k,
             config.model.moe.capacity_factor > 0.0};
    const std::string moe_layer =
        config.model.moe.enabled()
            ? " (a mixture of experts' block: " +
                  format_bytes(train::layer_activation_bytes(config) + train::moe_extra_layer_activation_bytes(config)) + ")"
            : "";
    std::printf("# predicted activations per layer per rank (%s, micro-batch %lld x %lld): %s%s; tensor-parallel "
                "traffic per step per rank: %s\n",
                config.precision.c_str(), static_cast<long long>(config.batch_size), static_cast<long long>(T),
                format_bytes(train::layer_activation_bytes(config)).c_str(), moe_layer.c_str(),
                format_bytes(plan::tensor_parallel_bytes_per_step(config.batch_size, T, C, config.model.n_layer, T,
                                                                  config.micro_batches, config.sequence_parallel,
                                                                  static_cast<int>(config.zero),
                                                                  config.precision == "bf16" ? 2 : 4, moe))
                    .c_str());
  }
  if (config.tp_3d_on()) {
    // Every grid rank holds the same shapes (the widths divide the grid or a layer stays whole
    // on every rank), so one figure is each grid rank's; a pipeline's stages differ (their lines below).
    const plan::Grid3DActivationShape shape = train::grid_3d_activation_shape(config);
    const bool moe = config.model.moe.enabled();
    // The memory check's peak (a mixture of experts' rows added to the grid's blocks as terms).
    const std::string peak =
        config.pp > 1 ? ""
                      : ", " + format_bytes(static_cast<int64_t>(train::rank_training_memory(config, 0).activations)) +
                            " at the step's peak";
    const int64_t block = plan::grid_3d_layer_activation_bytes(shape);
    const std::string moe_block =
        moe ? " (a mixture of experts' block: " + format_bytes(block + train::moe_extra_layer_activation_bytes(config)) +
                  ", its experts over " + std::to_string(parallel::tp3d::Layers3D::expert_split(config.model.moe.experts,
                                                                                               config.tp_3d_grid())) +
                  " plane rank(s))"
            : "";
    std::printf("# predicted activations per grid rank, the same on every rank of %s (%s, micro-batch %lld x %lld, "
                "heads and MLP over row %lld, qkv and fc inputs over col %lld): a block keeps %s%s%s\n",
                config.tp_3d.c_str(), config.precision.c_str(), static_cast<long long>(config.batch_size),
                static_cast<long long>(config.model.block_size), static_cast<long long>(shape.row),
                static_cast<long long>(shape.col), format_bytes(block).c_str(), moe_block.c_str(), peak.c_str());
  }
  if (config.cp > 1) {
    // Context parallelism: each rank's chunks of every sequence, its activations (1/cp of the
    // tokens, no T x T probabilities) and the bytes its ring sends per step.
    const int64_t C = config.model.n_embd, T = config.model.block_size, cp = config.cp, Tl = T / cp;
    const parallel::cp::Split split = parallel::cp::parse_split(config.cp_split);
    std::printf("# context parallel (%s): every sequence of %lld tokens in %lld chunks of %lld;", config.cp_split.c_str(),
                static_cast<long long>(T), static_cast<long long>(2 * cp), static_cast<long long>(T / (2 * cp)));
    for (int r = 0; r < cp; ++r) {
      const std::array<int64_t, 2> chunks = parallel::cp::chunks_of(r, static_cast<int>(cp), split);
      std::printf("%s cp rank %d: chunks %lld, %lld (%lld causal pairs)", r ? ";" : "", r,
                  static_cast<long long>(chunks[0]), static_cast<long long>(chunks[1]),
                  static_cast<long long>(parallel::cp::causal_pairs(T, r, static_cast<int>(cp), split)));
    }
    // Forward: cp - 1 K/V hops; backward: cp - 1 K/V hops and cp dK/dV hops; (B, T/cp, 2C/tp) each.
    const int64_t hop = 4 * config.batch_size * Tl * 2 * C / config.tp;
    train::TrainConfig without_cp = config;
    without_cp.cp = 1;
    std::printf("\n# predicted activations per layer per rank (%s, micro-batch %lld x %lld of %lld tokens): %s "
                "(cp 1: %s); ring traffic per step per rank: %s\n",
                config.precision.c_str(), static_cast<long long>(config.batch_size), static_cast<long long>(Tl),
                static_cast<long long>(T), format_bytes(train::layer_activation_bytes(config)).c_str(),
                format_bytes(train::layer_activation_bytes(without_cp)).c_str(),
                format_bytes(hop * (3 * cp - 2) * config.model.n_layer * config.micro_batches).c_str());
  }
  if (config.pp > 1) {
    // The same partition the trainer uses: virtual stage k on pipeline rank k % pp.
    const std::vector<nn::GPTStage> stages =
        parallel::pipeline::partition_stages(config.model, config.pp, config.chunks, config.pipeline_layers());
    std::printf("# pipeline stages (%s):", (config.schedule_file.empty() ? config.schedule : config.schedule_file).c_str());
    for (size_t k = 0; k < stages.size(); ++k) {
      const nn::GPTStage& s = stages[k];
      std::printf("%s pp rank %lld: blocks %lld-%lld%s%s", k ? ";" : "", static_cast<long long>(k % config.pp),
                  static_cast<long long>(s.first_block), static_cast<long long>(s.end_block - 1),
                  s.embedding ? " + embedding" : "", s.head ? " + final norm and LM head" : "");
    }
    // Each rank's state and the activations of the (micro-batch, chunk) pairs its schedule holds at once.
    std::printf("\n# predicted memory per pipeline rank (state + activations held at once):");
    for (int64_t r = 0; r < config.pp; ++r) {
      const train::MemoryNeed rank = train::rank_training_memory(config, r);
      std::printf("%s pp rank %lld %s + %s", r ? ";" : "", static_cast<long long>(r),
                  format_bytes(static_cast<int64_t>(rank.state)).c_str(),
                  format_bytes(static_cast<int64_t>(rank.activations)).c_str());
    }
    std::printf("\n");
  }
  std::printf("\n# %s\n", config.mesh_layout().rank_map().c_str());
  if (config.zero > 0 && config.shard_size() < config.dp) {
    // HSDP: neighbouring dp ranks shard one copy; equal positions across copies replicate it.
    const int64_t K = config.shard_size(), R = config.dp / K;
    std::string shard, replicate;
    for (int64_t g = 0; g < R; ++g) {
      shard += " [";
      for (int64_t k = 0; k < K; ++k) shard += (k ? " " : "") + std::to_string(g * K + k);
      shard += "]";
    }
    for (int64_t k = 0; k < K; ++k) {
      replicate += " [";
      for (int64_t g = 0; g < R; ++g) replicate += (g ? " " : "") + std::to_string(g * K + k);
      replicate += "]";
    }
    std::printf("# HSDP over dp ranks: shard groups%s, replicate groups%s\n", shard.c_str(), replicate.c_str());
  }
}
}  // namespace

std::shared_ptr<ConfigFlags> add_config_flags(CLI::App& sub, const train::TrainConfig& defaults) {
  auto flags = std::make_shared<ConfigFlags>();
  train::TrainConfig shown = defaults;
  // The tables named from the schema itself, so a new section cannot go missing here.
  std::string tables;
  for (const train::ConfigKey& k : train::config_schema(shown))
    if (tables.find("[" + k.section + "]") == std::string::npos) tables += (tables.empty() ? "[" : " [") + k.section + "]";
  sub.add_option("--config", flags->config_path,
                 "TOML configuration file (keys in " + tables + "; every key is also a flag, which overrides the file)");
  for (const train::ConfigKey& k : train::config_schema(shown)) {
    const std::string flag = "--" + train::flag_name(k.key);
    const std::string help = k.help + " [" + k.section + "." + k.key + ", default " + train::value_string(k.target) + "]";
    CLI::Option* option = std::holds_alternative<bool*>(k.target)
                              ? sub.add_flag(flag + "{true}", flags->values[k.key], help)
                              : sub.add_option(flag, flags->values[k.key], help);
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
    // The values are read as text (set_from_string checks them, naming the key's type), but
    // help names their type as the configuration reference does.
    const std::string type = train::type_name(k.target);
    if (type == "integer" || type == "number") option->type_name(type == "integer" ? "INTEGER" : "NUMBER");
    flags->options[k.key] = option;
  }
  return flags;
}

train::TrainConfig ConfigFlags::resolve(train::TrainConfig config) const {
  if (!config_path.empty()) train::apply_toml_file(config, config_path);
  // The environment's timeout overrides the file's; the flag overrides both.
  config.comm_timeout = comm::timeout_from_environment().value_or(config.comm_timeout);
  for (const train::ConfigKey& k : train::config_schema(config))
    if (options.at(k.key)->count() > 0) train::set_from_string(k, values.at(k.key));
  config.validate();
  return config;
}

bool ConfigFlags::given(const std::string& key) const { return options.at(key)->count() > 0; }

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

int run_on_world(const std::function<void(comm::ProcessGroup&)>& body, double startup_timeout_s) {
  // MPI_Init and the world's communicators block until every rank arrives: watched by a
  // deadline. MPI_Init's own time depends on the launcher and the machine (seconds in a fresh
  // container), so this first step waits at least kMpiInitFloorSeconds even when a test sets
  // comm_timeout to 2 s; the steps after it (communicator splits) keep comm_timeout.
  constexpr double kMpiInitFloorSeconds = 60.0;
  const double init_timeout_s = startup_timeout_s > 0 ? std::max(startup_timeout_s, kMpiInitFloorSeconds) : 0.0;
  auto watch = std::make_unique<comm::StartupWatch>(init_timeout_s, "MPI_Init and the world's communicators");
  comm::MpiRuntime mpi(nullptr, nullptr);
  watch.reset();
  // The run's first collectives (the ranks' configuration check, the run lock) are watched
  // with comm_timeout too, not with the library's default.
  mpi.world().set_timeout(startup_timeout_s);
  try {
    body(mpi.world());
  } catch (const std::exception& e) {
    return end_rank_on_error(e, mpi.world());
  }
  return 0;
}

int end_rank_on_error(const std::exception& e, comm::ProcessGroup& world) {
  const Failure f = failure_of(e);
  // Every rank raised it at the same collective: none waits for another, so the job ends
  // without MPI_Abort, which could end rank 0 before its unwinding removed what it holds
  // in the run directory (the lock, a refused checkpoint's temporary directory). Rank 0 says
  // it for all of them.
  const auto* agreed = dynamic_cast<const AgreedError*>(&e);
  const bool everyone = agreed != nullptr && agreed->ranks() == world.size();
  if (!everyone || world.rank() == 0) {
    std::fprintf(stderr, "loom: %s on rank %d of %d: %s\n", f.kind.c_str(), world.rank(), world.size(), f.message.c_str());
    std::fflush(stderr);
  }
  if (everyone) return f.status;
  // One rank's error must not leave the others waiting in a collective.
  comm::MpiRuntime::abort(f.status);
}

namespace {

// A run a signal stopped (saved, not finished) exits as a process that signal ended would,
// 128 + its number: a script or scheduler sees that the run has steps left.
int stopped_status(const train::Trainer& trainer) {
  return trainer.stopped_by() != 0 ? 128 + trainer.stopped_by() : 0;
}

}  // namespace

Runner add_train_command(CLI::App& sub) {
  auto dry_run = std::make_shared<bool>(false);
  sub.add_flag("--dry-run", *dry_run, "print the resolved configuration and predicted memory, then exit");
  std::shared_ptr<ConfigFlags> flags = add_config_flags(sub, train::TrainConfig{});
  return [flags, dry_run]() {
    train::TrainConfig config = flags->resolve(train::TrainConfig{});
    // An empty out_dir (an unset shell variable in --out-dir "$RUN") would train and keep
    // nothing; the library allows it for tests, the command does not.
    check(!config.out_dir.empty(),
          "out_dir is empty: the run would write no metrics and no checkpoint; give a directory (--out-dir runs/NAME)");
    if (*dry_run) {
      print_dry_run(config);
      return 0;
    }
    // Under mpirun/srun, or for a layout of several ranks, the job's processes form the world.
    const int64_t ranks = config.world_ranks();
    if (!launched_by_mpi()) {
      check(ranks == 1, "layout dp(", config.dp, ") x pp(", config.pp, ") x cp(", config.cp, ") x tp(", config.tp,
            ") needs ", ranks,
            " processes: start it with mpirun -np ", ranks, " loom train ...");
      train::Trainer trainer(config);
      trainer.run();
      return stopped_status(trainer);
    }
    int status = 0;
    const int failed = run_on_world([&](comm::ProcessGroup& world) {
      train::Trainer trainer(config, false, &world);
      try {
        trainer.run();
        status = stopped_status(trainer);
      } catch (const std::exception& e) {
        status = end_rank_on_error(e, world);  // while the trainer's buffers are alive
      }
    }, config.comm_timeout);
    return failed != 0 ? failed : status;
  };
}

Runner add_config_reference_command(CLI::App& sub) {
  return []() {
    std::fputs(train::config_reference_markdown().c_str(), stdout);
    return 0;
  };
}

}  // namespace loom::apps
