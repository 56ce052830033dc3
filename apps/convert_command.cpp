// `loom convert`: re-shards a checkpoint offline. To one file (a path ending in
// .safetensors; one process): every tensor assembled from the checkpoint's pieces. To a run
// directory for a layout (under mpirun, dp x pp x cp x tp processes, or dp x R x C x D for a 3D
// grid; every degree not given is 1, whatever the stored run's was): the layout's trainer loads the checkpoint through the same re-sharding path a
// resume takes and writes its own pieces as a sharded checkpoint, so a converted checkpoint
// is exactly what that layout would save.
// --from-gpt2 DIR: GPT-2's released weights and tokenizer into a Loom checkpoint (gpt2_import.hpp);
// --to-gpt2 DIR: a Loom GPT out in that layout, for PyTorch / Hugging Face (gpt2_export.hpp).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.hpp"
#include "loom/comm/process_group.hpp"
#include "loom/error.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/gpt2_export.hpp"
#include "loom/train/gpt2_import.hpp"
#include "loom/train/run_directory.hpp"
#include "loom/train/sharded_checkpoint.hpp"
#include "loom/train/trainer.hpp"

namespace loom::apps {

namespace {
struct ConvertArgs {
  std::string from, from_gpt2, to, to_gpt2, data, tp_3d;
  int64_t dp = 1, pp = 1, tp = 1, cp = 1, ep = 1, zero = 0, chunks = 1, hsdp_shard = 0;
  bool sequence_parallel = false;
};

void to_single_file(const std::string& from, const std::string& to) {
  train::CheckpointReader reader(from);
  const std::map<std::string, Tensor> tensors = train::read_full_state(reader);
  train::write_checkpoint_file(to, tensors, reader.info());
  std::printf("wrote %s: %zu tensors at step %lld from %s\n", to.c_str(), tensors.size(),
              static_cast<long long>(reader.info().step), from.c_str());
}

train::TrainConfig target_config(const ConvertArgs& a, const std::string& from) {
  train::CheckpointReader reader(from);
  train::TrainConfig c;
  train::apply_toml_string(c, reader.info().config_toml, from + " (stored configuration)");
  c.dp = a.dp;
  c.pp = a.pp;
  c.tp = a.tp;
  c.cp = a.cp;  // the stored cp and ep belong to the old layout too
  c.ep = a.ep;
  c.tp_3d = a.tp_3d;  // the stored grid belongs to the old layout, like its tp
  // A GCN's blocked aggregation splits the grid's all-reduces: without a grid, one SpMM.
  if (a.tp_3d.empty()) c.graph_aggregation_chunks = 1;
  c.zero = a.zero;
  c.hsdp_shard = a.hsdp_shard;
  c.sequence_parallel = a.sequence_parallel;
  c.chunks = a.chunks;
  c.pp_layers = "";  // the stored split belongs to the old pipeline
  c.schedule = a.chunks > 1 ? "interleaved" : (c.schedule == "interleaved" ? "1f1b" : c.schedule);
  c.schedule_file = "";  // a custom schedule is made for its own pipeline
  c.pipeline_svg = "";   // so is the stored run's picture
  if (a.chunks > 1) c.micro_batches = (std::max(c.micro_batches, a.pp) + a.pp - 1) / a.pp * a.pp;
  if (!a.data.empty()) c.data = a.data;
  // The token table keeps the checkpoint's rows where they split evenly over the target tp, else
  // it is re-padded as a run under that tp pads it (the padding rows are read by nothing).
  auto wte = reader.manifest().tensors.find("model.embedding.wte");
  if (wte != reader.manifest().tensors.end()) {
    const int64_t rows = wte->second.shape.at(0);
    c.model.padded_vocab_size = rows % std::max<int64_t>(1, a.tp) == 0 ? rows : 0;
  }
  c.resume = from;
  c.overwrite = false;  // the stored run's choice, not this conversion's
  c.out_dir = a.to;
  c.checkpoint_format = "sharded";
  return c;
}
}  // namespace

Runner add_convert_command(CLI::App& sub) {
  auto args = std::make_shared<ConvertArgs>();
  sub.add_option("--from", args->from, "checkpoint: a file, a sharded checkpoint directory or a run directory");
  sub.add_option("--from-gpt2", args->from_gpt2,
                 "a GPT-2 checkpoint directory as its releases ship it (config.json, model.safetensors, vocab.json, "
                 "merges.txt): written to --to (a FILE.safetensors or a new run directory) for loom sample and "
                 "loom train --resume");
  sub.add_option("--to", args->to,
                 "FILE.safetensors: one file in the serial layout; else a run directory to write a sharded "
                 "checkpoint for the layout given (run under mpirun -np dp*pp*cp*tp)");
  sub.add_option("--to-gpt2", args->to_gpt2,
                 "a new directory in GPT-2's release layout (config.json, model.safetensors with GPT-2's names, "
                 "and vocab.json + merges.txt for a GPT-2 tokenizer) from --from: for PyTorch / Hugging Face "
                 "(GPT2LMHeadModel.from_pretrained) or loom convert --from-gpt2");
  sub.add_option("--dp", args->dp, "target data-parallel degree");
  sub.add_option("--pp", args->pp, "target pipeline-parallel degree");
  sub.add_option("--tp", args->tp, "target tensor-parallel degree");
  sub.add_option("--cp", args->cp, "target context-parallel degree");
  sub.add_option("--ep", args->ep, "target expert-parallel degree (a split of dp)");
  sub.add_option("--zero", args->zero, "target ZeRO stage (0-3)");
  sub.add_option("--chunks", args->chunks, "target model chunks per pipeline rank (interleaved)");
  sub.add_option("--hsdp-shard", args->hsdp_shard, "target hybrid-sharding group size");
  sub.add_option("--tp-3d", args->tp_3d, "target 3D tensor-parallel grid \"R,C,D\" (run under mpirun -np dp*R*C*D)");
  sub.add_flag("--sequence-parallel", args->sequence_parallel, "target uses sequence parallelism");
  sub.add_option("--data", args->data, "the training text, when not at the path the checkpoint's configuration names");
  return [args]() {
    if (!args->to_gpt2.empty()) {
      check(!args->from.empty() && args->from_gpt2.empty() && args->to.empty(),
            "--to-gpt2 DIR writes the checkpoint given by --from (and no --to)");
      std::printf("%s\n", train::export_gpt2_checkpoint(train::resolve_checkpoint_path(args->from), args->to_gpt2).c_str());
      return 0;
    }
    check(!args->to.empty(), "--to is empty: give a FILE.safetensors or a run directory (or --to-gpt2 DIR)");
    // Before the product of the degrees is taken for processes (dp -1 x pp -1 would be one).
    for (const auto& [flag, value] :
         {std::pair{"--dp", args->dp}, {"--pp", args->pp}, {"--tp", args->tp}, {"--cp", args->cp}, {"--ep", args->ep},
          {"--chunks", args->chunks}})
      check(value >= 1, flag, " must be >= 1, got ", value);
    check(args->from.empty() != args->from_gpt2.empty(), "give one of --from (a Loom checkpoint) or --from-gpt2 DIR");
    if (!args->from_gpt2.empty()) {
      check(args->dp * args->pp * args->tp * args->cp * args->ep == 1 && args->tp_3d.empty(),
            "--from-gpt2 writes the serial layout; re-shard the result with --from");
      const std::string path = train::convert_gpt2_checkpoint(args->from_gpt2, args->to);
      std::printf("wrote %s from the GPT-2 checkpoint %s\n", path.c_str(), args->from_gpt2.c_str());
      return 0;
    }
    const std::string from = train::resolve_checkpoint_path(args->from);
    if (args->to.ends_with(".safetensors")) {
      check(args->dp * args->pp * args->tp * args->cp * args->ep == 1 && args->tp_3d.empty(),
            "converting to one file takes no layout; write a directory for dp(", args->dp, ") x pp(", args->pp, ") x cp(",
            args->cp, ") x tp(", args->tp, ")", args->ep > 1 ? " with ep(" + std::to_string(args->ep) + ")" : "",
            args->tp_3d.empty() ? "" : " x tp_3d(" + args->tp_3d + ")");
      std::error_code ec;
      check(!std::filesystem::exists(args->to, ec), "--to '", args->to,
            "' exists: convert writes a new file and replaces none (remove it or name another)");
      to_single_file(from, args->to);
      return 0;
    }
    // Another run in --to: the trainer would name `loom train`'s remedies (--resume, --overwrite),
    // which convert lacks. Converting a run's checkpoint into that run itself stays allowed.
    std::error_code ec;
    const bool in_place = std::filesystem::equivalent(from, args->to, ec) ||
                          std::filesystem::equivalent(std::filesystem::path(from).parent_path(), args->to, ec);
    const std::vector<std::string> previous = train::previous_run_files(args->to);
    check(previous.empty() || in_place, "--to '", args->to, "' already holds a run (", previous.empty() ? "" : previous.front(),
          previous.size() > 1 ? " and " + std::to_string(previous.size() - 1) + " more" : "",
          "): convert into a run directory that holds none, or to a FILE.safetensors");
    const train::TrainConfig config = target_config(*args, from);
    auto convert = [&](comm::ProcessGroup* world) {
      train::Trainer trainer(config, true, world);
      const std::string path = trainer.save_checkpoint_now();
      if (world == nullptr || world->rank() == 0)
        std::printf("wrote %s for dp %lld x pp %lld x %stp %lld%s, %szero %lld, step %lld\n", path.c_str(),
                    static_cast<long long>(config.dp), static_cast<long long>(config.pp),
                    config.cp > 1 ? ("cp " + std::to_string(config.cp) + " x ").c_str() : "",
                    static_cast<long long>(config.tp), config.tp_3d_on() ? (" x tp_3d " + config.tp_3d).c_str() : "",
                    config.ep > 1 ? ("ep " + std::to_string(config.ep) + ", ").c_str() : "",
                    static_cast<long long>(config.zero), static_cast<long long>(trainer.step()));
    };
    if (!launched_by_mpi()) {
      check(config.world_ranks() == 1, "layout dp(", config.dp, ") x pp(", config.pp, ") x cp(", config.cp, ") x tp(",
            config.tp, ")",
            config.tp_3d_on() ? " x tp_3d(" + config.tp_3d + ")" : "", " needs ", config.world_ranks(),
            " processes: start it with mpirun -np ", config.world_ranks(), " loom convert ...");
      convert(nullptr);
      return 0;
    }
    // The stored run's comm_timeout, unless LOOM_COMM_TIMEOUT gives another (as for train).
    return run_on_world([&](comm::ProcessGroup& world) { convert(&world); },
                        comm::timeout_from_environment().value_or(config.comm_timeout));
  };
}

}  // namespace loom::apps
