#include "loom/train/config.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "loom/comm/algorithms.hpp"
#include "loom/data/input_file.hpp"
#include "loom/data/toml_text.hpp"
#include "loom/data/tokenizer.hpp"
#include "loom/error.hpp"
#include "loom/parallel/pipeline/partition.hpp"
#include "loom/train/trace_steps.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/kernels/threads.hpp"

namespace loom::train {

std::vector<ConfigKey> config_schema(TrainConfig& c) {
  nn::GPTConfig& m = c.model;
  return {
      {"model", "model", "model family: 'gpt' (a GPT-2 style transformer on text) or 'gcn' (a graph convolutional network on a graph, Kipf & Welling 2017)", &c.family},
      {"model", "n_layer", "transformer blocks (L)", &m.n_layer},
      {"model", "n_head", "attention heads (NH); must divide n_embd", &m.n_head},
      {"model", "n_embd", "model width (C)", &m.n_embd},
      {"model", "block_size", "context length (T) used for training and the maximum for sampling", &m.block_size},
      {"model", "padded_vocab_size", "rows of the token embedding / LM head (the vocabulary plus padding); 0 = the vocabulary rounded up to a multiple of 64 x tp. A checkpoint with other padding loads re-padded (the padding rows are read by nothing)", &m.padded_vocab_size},
      {"model", "recompute", "recompute each block's activations in backward instead of keeping them", &m.recompute},
      {"model", "selective_recompute", "gpt: recompute attention's softmax probabilities in backward instead of keeping them (Megatron-LM's --recompute-granularity selective): an fp32 block keeps no B x n_head x T^2 probabilities, for one more Q K^T and softmax in backward; bf16 and context parallelism never keep them", &m.selective_recompute},
      {"model", "hidden_dropout", "gpt: dropout probability on the embedding's output and on each attention and MLP output before it joins the residual stream, while training (Megatron-LM's hidden_dropout); each mask follows the element's place in the step's batch, so every layout drops what the serial run drops; 0 = off", &m.hidden_dropout},
      // Mixture of experts (nn/moe.hpp).
      {"model", "moe_experts", "experts (E) of each mixture-of-experts block; 0 = dense MLPs only", &m.moe.experts},
      {"model", "moe_top_k", "experts each token is routed to (K), its gates renormalised over them", &m.moe.top_k},
      {"model", "moe_capacity_factor", "each expert takes at most ceil(f K T / E) tokens of a sequence (first choices, then earlier tokens, first), the rest pass by on the residual; 0 = dropless, and so is f >= E / K (a token's K choices are distinct, so an expert gets at most T: the KV cache serves such a model; a smaller f > 0 it refuses). Decided over the whole sequence under cp and sequence_parallel too, so every layout drops what the serial run drops", &m.moe.capacity_factor},
      {"model", "moe_every", "every N-th block (N-1, 2N-1, ...) has a mixture of experts instead of its MLP", &m.moe.every},
      {"model", "moe_aux_loss_coef", "weight of the Switch load-balancing loss E sum_i f_i P_i (per sequence, 1 when balanced)", &m.moe.aux_loss_coef},
      {"model", "gcn_layers", "gcn: graph convolution layers", &c.gcn.layers},
      {"model", "gcn_hidden", "gcn: width of the hidden layers", &c.gcn.hidden},
      {"model", "attention_dropout", "gpt: dropout probability on the attention probabilities (before their product with V), while training (Megatron-LM's attention_dropout); each mask follows the probability's sequence, head, query and key positions in the step's batch, so every layout drops what the serial run drops; 0 = off", &m.attention_dropout},
      {"model", "gcn_dropout", "gcn: dropout probability between layers while training", &c.gcn.dropout},
      {"data", "data", "gpt: UTF-8 text file (a regular file of at most " + std::to_string(data::kMaxDataBytes >> 30) + " GiB) or a token file written by `loom tokenize`; gcn: a graph, `data/cora` (LINQS .content + .cites), a prefix of Loom's text format (.edges, .features, .labels; docs/graphs.md) or `rmat:scale=S,...`", &c.data},
      {"data", "tokenizer", "'char' (code points of the corpus), 'byte' or 'gpt2' (GPT-2's byte-level BPE, read from tokenizer_dir)", &c.tokenizer},
      {"data", "tokenizer_dir", "with tokenizer = 'gpt2': the directory holding GPT-2's vocab.json and merges.txt", &c.tokenizer_dir},
      {"data", "val_fraction", "last fraction of the file held out for validation", &c.val_fraction},
      {"data", "split", "gcn: train, val and test node ranges in file order, e.g. \"0:140,200:500,500:1500\"; empty = the graph's own split (a LINQS graph: pygcn's split of Cora, these ranges)", &c.split},
      {"train", "steps", "optimizer steps", &c.steps},
      {"train", "batch_size", "sequences per micro-batch (B)", &c.batch_size},
      {"train", "micro_batches", "micro-batches accumulated per optimizer step", &c.micro_batches},
      {"train", "seed", "seed for weights and batches", &c.seed},
      {"train", "precision", "'fp32', or 'bf16': mixed precision, every GEMM (linear layers, attention, LM head) on bf16 operands with fp32 accumulation, except a mixture of experts' router (fp32, its weight gathered in fp32 by ZeRO); the parameters stay fp32 (the master copy the optimizer updates, what checkpoints hold) and their bf16 copies are written by AdamW with each update (converted at their first GEMM of a step otherwise), never per GEMM; LayerNorm, softmax, GELU, the loss and gradient accumulation stay fp32; activations cross the model-parallel groups (tp, sequence parallel, pp, cp, ep, 3D) in bf16", &c.precision},
      {"train", "on_nan", "on a NaN/inf loss or gradient: 'stop' (error) or 'skip' the step", &c.on_nan},
      {"optim", "optimizer", "'adamw' or 'sgd'", &c.optimizer},
      {"optim", "lr", "peak learning rate", &c.lr},
      {"optim", "min_lr", "learning rate at the end of the cosine decay", &c.min_lr},
      {"optim", "warmup_steps", "linear warm-up steps", &c.warmup_steps},
      {"optim", "decay_steps", "step where cosine decay reaches min_lr; 0 = steps", &c.decay_steps},
      {"optim", "weight_decay", "gpt: decoupled weight decay (matrices and embeddings only); gcn: the L2 penalty weight_decay/2 x ||W||^2 on the first layer's weights, added to the loss", &c.weight_decay},
      {"optim", "beta1", "AdamW beta1", &c.beta1},
      {"optim", "beta2", "AdamW beta2", &c.beta2},
      {"optim", "eps", "AdamW epsilon", &c.eps},
      {"optim", "momentum", "SGD momentum", &c.momentum},
      {"optim", "grad_clip", "clip the global gradient norm to this; 0 = off", &c.grad_clip},
      {"parallel", "dp", "data-parallel degree", &c.dp},
      {"parallel", "pp", "pipeline-parallel degree", &c.pp},
      {"parallel", "tp", "tensor-parallel degree (neighbouring ranks)", &c.tp},
      {"parallel", "cp", "context-parallel degree: every sequence split over cp ranks, attention as a ring passing K/V (block_size divisible by 2 x cp)", &c.cp},
      {"parallel", "cp_split", "with cp > 1, how the 2 x cp chunks of a sequence are dealt: 'zigzag' (rank r holds chunks r and 2cp-1-r: equal causal attention work) or 'contiguous' (chunks 2r, 2r+1: measures the imbalance)", &c.cp_split},
      {"parallel", "ep", "expert-parallel degree: the experts are split over groups of ep neighbouring data-parallel ranks, which exchange tokens all-to-all (divides dp and moe_experts; on a tp_3d grid each plane rank's block of the experts is split over ep: row x col x ep divides moe_experts)", &c.ep},

      {"parallel", "schedule", "pipeline schedule (pp > 1): 1f1b (PipeDream-flush: at most pp micro-batches of activations in flight), gpipe (all forwards, then all backwards) or interleaved (1F1B over `chunks` model chunks per rank; micro_batches divisible by pp)", &c.schedule},
      {"parallel", "chunks", "model chunks per pipeline rank for the interleaved schedule (v >= 2; the bubble shrinks by v)", &c.chunks},
      {"parallel", "schedule_file", "train a custom pipeline schedule from this file instead of `schedule`: one line of actions per rank, as `loom schedule --file` reads and checks it (its pp, micro_batches and chunks must be the run's); empty = `schedule`", &c.schedule_file},
      {"parallel", "pp_layers", "transformer blocks per pipeline stage, e.g. \"3,3,2,2\"; empty = balanced by cost", &c.pp_layers},
      {"parallel", "sequence_parallel", "with tp > 1, also split the activations outside the tensor-parallel layers (LayerNorm, residual) along the sequence", &c.sequence_parallel},
      {"parallel", "tp_overlap", "with tp > 1: 'on' runs the linear layers' and the LM head's tensor-parallel collectives under their GEMMs (sequence parallelism: the all-gather before a column-parallel GEMM under the GEMM of this rank's own rows, the reduce-scatter after a row-parallel GEMM a piece of rows at a time under the next piece; in backward the input gather under the dX GEMM and dX's reduce-scatter or all-reduce under the dW GEMM; the LM head's gather and reduce-scatter likewise; without data parallelism the sums of replicated gradients under the rest of backward); 'off' blocks on each (bit-identical results either way)", &c.tp_overlap},
      {"parallel", "zero", "ZeRO stage: 0 = DDP (replicated), 1 = optimizer state sharded, 2 = + gradients, 3 = + parameters (FSDP)", &c.zero},
      {"parallel", "zero3_reshard", "zero = 3: when a unit's gathered parameters are freed: 'micro-batch' after each forward and each backward (gathered twice a micro-batch, the least memory), or 'step' after the unit's last backward of the step (gathered once a step, every unit of the rank whole meanwhile: ZeRO-2's parameter memory; FSDP's reshard_after_forward=False, which torchtitan picks under a pipeline)", &c.zero3_reshard},
      {"parallel", "hsdp_shard", "hybrid sharding: shard over groups of this many dp ranks, replicate across groups; 0 = shard over all dp ranks", &c.hsdp_shard},
      {"parallel", "allreduce", "data-parallel gradient all-reduce: mpi, ring, tree, rhd or param-server (ZeRO: mpi or ring)", &c.allreduce},
      {"parallel", "bucket_mb", "data-parallel gradient bucket size in MiB", &c.bucket_mb},
      {"parallel", "grad_reduce_dtype", "data-parallel gradient reductions (DDP's all-reduce, ZeRO's reduce-scatter, HSDP's replica average) on the wire: 'fp32', or 'bf16' for half the bytes (each element rounded to bf16 and summed in fp32 a hop at a time; the gradients stay fp32 buffers); bf16 reduces with allreduce = 'mpi'", &c.grad_reduce_dtype},
      {"parallel", "net_gbps", "emulate a network of this many Gbit/s for collectives and the cp ring's hops (to see overlap on one machine); 0 = off", &c.net_gbps},
      {"parallel", "net_latency_us", "latency of the emulated network in microseconds", &c.net_latency_us},
      {"parallel", "pin_ranks", "'auto': when a node runs more ranks than it has cores and each rank one thread, pin every rank to a core, the ranks of each pipeline stage on different cores (ranks waiting in MPI keep polling, so the OS does not move working ranks apart); 'off': leave placement to the OS", &c.pin_ranks},
      {"parallel", "tp_3d", "3D tensor parallelism (AxoNN): the grid \"R,C,D\" of row x col x depth ranks per data-parallel replica (per pipeline stage with pp > 1); each linear layer's weight split over row and col and sharded over depth, the batch split over dp x depth; layers whose shapes do not divide the grid stay serial; a mixture of experts' experts are shared out over the row x col ranks; with model = 'gcn', Plexus's 3D-parallel GCN (Â, features and weights split over the grid); \"\" = off", &c.tp_3d},
      {"parallel", "tp_3d_overlap", "with tp_3d: 'on' starts each layer's depth all-gather of its weight one layer ahead and keeps the all-reduce of dX and the reduce-scatter of dW in flight under the next GEMMs; 'off' blocks on each (bit-identical results either way)", &c.tp_3d_overlap},
      {"parallel", "graph_aggregation_chunks", "gcn with tp_3d: split each graph convolution's aggregation (Â X forward, Âᵀ dZ backward) into this many ranges of rows, each range's all-reduce running while the next range's SpMM computes (Plexus's blocked, overlapped aggregation); the result is the same up to the all-reduce's summation order; 1 = one SpMM, then one all-reduce", &c.graph_aggregation_chunks},
      {"parallel", "graph_permute", "gcn with tp_3d: permute the nodes randomly (two orders, from seed) so every rank's block of the adjacency gets about the same non-zeros; the result is the same either way", &c.graph_permute},
      {"parallel", "comm_timeout", "seconds any wait for other ranks (a collective, a pipeline send or receive) may last before the watchdog reports the rank holding the job up and ends the job; 0 = off. The environment variable LOOM_COMM_TIMEOUT overrides the config file, this flag overrides both", &c.comm_timeout},
      {"run", "out_dir", "run directory: metrics.jsonl, memory.json and checkpoints (an empty value is refused)", &c.out_dir},
      {"run", "log_every", "print a progress line every N steps", &c.log_every},
      {"run", "eval_every", "validation loss every N steps; 0 = at the end only", &c.eval_every},
      {"run", "eval_batches", "validation batches per evaluation, each a global batch (micro_batches micro-batches of batch_size sequences on every data-parallel rank): every layout of one global batch evaluates the same sequences", &c.eval_batches},
      {"run", "checkpoint_every", "save a checkpoint every N steps; 0 = at the end only", &c.checkpoint_every},
      {"run", "keep_checkpoints", "how many recent complete checkpoints to keep (older ones are removed only after a new one is complete)", &c.keep_checkpoints},
      {"run", "checkpoint_format", "'sharded' (a directory: each rank writes its own pieces, then a manifest), 'single' (one file in the serial layout, gathered to rank 0) or 'auto' (sharded when the job has more than one rank). Either loads into any layout", &c.checkpoint_format},
      {"run", "checkpoint_async", "write the checkpoints of checkpoint_every behind training: the step pauses only while this rank's file is encoded in memory (a copy of its state, held until written), then a thread writes, fsyncs and publishes it while the next steps run; the next checkpoint, a stop signal and the run's end wait for it, and a failed write stops the run there, the previous checkpoint still `latest`. The last checkpoint (the run's end, a stop) is written in the foreground", &c.checkpoint_async},
      {"run", "threads", "compute threads; 0 = all cores (under mpirun: the cores of the node shared among its ranks); at most " + std::to_string(kernels::kMaxThreadsPerCpu) + " x the machine's CPUs", &c.threads},
      {"run", "peak_gflops", "peak GFLOP/s for MFU; 0 = measure a GEMM at start-up", &c.peak_gflops},
      {"run", "pipeline_svg", "with pp > 1, write the last step's measured pipeline timeline (ranks x time) to this SVG file", &c.pipeline_svg},
      {"run", "trace", "write a Chrome trace-event file of trace_steps to out_dir/trace.json (open it in Perfetto)", &c.trace},
      {"run", "trace_steps", "steps traced, FIRST:LAST (1-based, e.g. \"5:8\"); empty = 2:4", &c.trace_steps},
      {"run", "resume", "checkpoint file, run directory, 'latest' (of out_dir) or 'auto' (the newest complete checkpoint of out_dir; none: start fresh) to continue from", &c.resume},
      {"run", "overwrite", "start over in an out_dir that holds another run: delete its checkpoints, `latest`, metrics.jsonl, memory.json, trace.json and report.html first (without it such a run is refused)", &c.overwrite},
  };
}

std::vector<int64_t> TrainConfig::pipeline_layers() const {
  std::vector<int64_t> blocks;
  std::stringstream list(pp_layers);
  for (std::string item; std::getline(list, item, ',');) {
    size_t used = 0;
    int64_t n = 0;
    try {
      n = std::stoll(item, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
    check(used > 0 && used == item.size(), "pp_layers must list blocks per stage like \"3,3,2,2\", got '", pp_layers,
          "'");
    check(n >= 1, "pp_layers '", pp_layers, "' gives stage ", blocks.size(), " ", n,
          " blocks: every pipeline stage holds at least one");
    blocks.push_back(n);
  }
  return blocks;
}

// Context parallelism: what composes so far, each conflict named.
void TrainConfig::check_context_parallel() const {
  check(cp >= 1, "cp must be >= 1, got ", cp);
  check(cp_split == "zigzag" || cp_split == "contiguous", "cp_split must be 'zigzag' or 'contiguous', got '", cp_split,
        "'");
  if (cp == 1) return;
  // cp first bounded by the sequence, so 2 x cp cannot overflow (a hostile cp of 6.7e18).
  const bool fits = cp <= model.block_size / 2;
  const std::string chunks = fits ? std::to_string(2 * cp) : "2 x " + std::to_string(cp);
  check(fits && model.block_size % (2 * cp) == 0, "context parallelism cuts every sequence into 2 x cp = ", chunks,
        " chunks: block_size (", model.block_size, ") must be divisible by ", chunks);
  check(!sequence_parallel || (model.block_size / cp) % tp == 0, "sequence parallelism splits each cp rank's ",
        model.block_size / cp, " tokens over tp (", tp, "): block_size / cp must be divisible by tp");
}

// The picture is written after the last step: a path that cannot be written would fail the
// run at its end, so its directory is checked now, on every rank alike.
void TrainConfig::check_pipeline_svg() const {
  if (pipeline_svg.empty()) return;
  check(pp > 1, "pipeline_svg draws a pipeline's timeline: set pp > 1 (pp is ", pp, ")");
  const std::filesystem::path path(pipeline_svg), parent = path.parent_path();
  std::error_code ec;
  check(!std::filesystem::is_directory(path, ec), "pipeline_svg '", pipeline_svg, "' is a directory: name the SVG file");
  check(parent.empty() || std::filesystem::is_directory(parent, ec), "pipeline_svg '", pipeline_svg,
        "': its directory '", parent.string(), "' does not exist");
}

void TrainConfig::validate() const {
  check(family == "gpt" || family == "gcn", "model must be 'gpt' or 'gcn', got '", family, "'");
  // Every number finite, wherever it came from (the readers check too; the environment and
  // code that fills a config do not go through them).
  TrainConfig copy = *this;
  for (const ConfigKey& k : config_schema(copy))
    if (double* const* p = std::get_if<double*>(&k.target))
      check(std::isfinite(**p), k.key, " must be a finite number, got ", **p);
  model.validate(/*vocabulary_known=*/false);  // the tokenizer's size is known once GptSpec reads the data
  if (family == "gcn") gcn.validate();
  check(steps >= 0, "steps must be >= 0, got ", steps);
  check(batch_size >= 1, "batch_size must be >= 1, got ", batch_size);
  check(micro_batches >= 1, "micro_batches must be >= 1, got ", micro_batches);
  check(on_nan == "stop" || on_nan == "skip", "on_nan must be 'stop' or 'skip', got '", on_nan, "'");
  kernels::parse_precision(precision);  // names the choices when unknown
  check(optimizer == "adamw" || optimizer == "sgd", "optimizer must be 'adamw' or 'sgd', got '", optimizer, "'");
  check(tokenizer == "char" || tokenizer == "byte" || tokenizer == "gpt2",
        "tokenizer must be 'char', 'byte' or 'gpt2', got '", tokenizer, "'");
  check(tokenizer != "gpt2" || !tokenizer_dir.empty(),
        "tokenizer = 'gpt2' reads vocab.json and merges.txt: set tokenizer_dir to their directory");
  check(lr > 0, "lr must be > 0, got ", lr);
  check(min_lr >= 0 && min_lr <= lr, "min_lr must be in [0, lr], got ", min_lr);
  check(warmup_steps >= 0 && decay_steps >= 0, "warmup_steps and decay_steps must be >= 0");
  check(decay_steps == 0 || decay_steps > warmup_steps, "decay_steps (", decay_steps,
        ") must be after warmup_steps (", warmup_steps, "): the cosine decay starts where the warm-up ends");
  check(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "beta1 and beta2 must be in [0, 1)");
  check(eps > 0, "eps must be > 0, got ", eps);
  check(weight_decay >= 0, "weight_decay must be >= 0, got ", weight_decay);
  check(momentum >= 0 && momentum < 1, "momentum must be in [0, 1), got ", momentum);
  check(val_fraction > 0 && val_fraction < 1, "val_fraction must be in (0, 1), got ", val_fraction);
  check(grad_clip >= 0, "grad_clip must be >= 0, got ", grad_clip);
  check(log_every >= 1, "log_every must be >= 1, got ", log_every);
  check(eval_every >= 0 && eval_batches >= 1, "eval_every must be >= 0 and eval_batches >= 1");
  check(checkpoint_every >= 0 && keep_checkpoints >= 1, "checkpoint_every must be >= 0 and keep_checkpoints >= 1");
  check(checkpoint_format == "auto" || checkpoint_format == "sharded" || checkpoint_format == "single",
        "checkpoint_format must be 'auto', 'sharded' or 'single', got '", checkpoint_format, "'");
  check((resume != "auto" && resume != "latest") || !out_dir.empty(), "resume = '", resume,
        "' looks for checkpoints in out_dir: set out_dir");
  check(!overwrite || (resume != "auto" && resume != "latest"), "overwrite deletes the checkpoints resume = '", resume,
        "' would continue from: give one or the other");
  kernels::check_thread_count(threads);
  check(pin_ranks == "auto" || pin_ranks == "off", "pin_ranks must be 'auto' or 'off', got '", pin_ranks, "'");
  check(dp >= 1 && pp >= 1 && tp >= 1, "parallel degrees must be >= 1, got dp(", dp, ") x pp(", pp, ") x tp(", tp, ")");
  comm::parse_algorithm(allreduce);  // names the choices when unknown
  check(bucket_mb > 0, "bucket_mb must be > 0, got ", bucket_mb);
  check(grad_reduce_dtype == "fp32" || grad_reduce_dtype == "bf16", "grad_reduce_dtype must be 'fp32' or 'bf16', got '",
        grad_reduce_dtype, "'");
  check(grad_reduce_dtype == "fp32" || allreduce == "mpi", "grad_reduce_dtype = 'bf16' reduces with allreduce = 'mpi' (bf16 "
        "sums need MPI's user operators), not '", allreduce, "'");
  pipeline_layers();  // names a malformed list now rather than at start-up
  // Malformed steps are named now, not when tracing starts; the run's length only matters
  // when the trace is on.
  parse_trace_steps(trace_steps, trace ? steps : std::numeric_limits<int64_t>::max());
  check(schedule == "1f1b" || schedule == "gpipe" || schedule == "interleaved",
        "schedule must be '1f1b', 'gpipe' or 'interleaved', got '", schedule, "'");
  check(chunks >= 1, "chunks must be >= 1, got ", chunks);
  check(!schedule_file.empty() || (schedule == "interleaved") == (chunks > 1), schedule == "interleaved"
        ? "the interleaved schedule needs chunks >= 2 model chunks per pipeline rank"
        : "chunks > 1 (model chunks per pipeline rank) needs schedule = \"interleaved\"");
  check(chunks == 1 || pp > 1, "chunks = ", chunks, " model chunks per pipeline rank need a pipeline: set pp > 1");
  check(schedule_file.empty() || pp > 1, "schedule_file (", schedule_file, ") is a pipeline schedule: set pp > 1");
  check_context_parallel();
  check_pipeline_svg();
  check(!sequence_parallel || tp > 1, "sequence_parallel needs tensor parallelism: set tp > 1");
  // Before the memory check, which divides the heads among tp ranks (0 heads divided by zero).
  check(family != "gpt" || model.n_head % tp == 0, "n_head (", model.n_head,
        ") must be divisible by the tensor-parallel degree tp (", tp, ")");
  // An explicit token table splits over tp as it is (0 is resolved to a multiple of 64 x tp).
  check(family != "gpt" || model.padded_vocab_size % tp == 0, "padded_vocab_size (", model.padded_vocab_size,
        ") must be divisible by the tensor-parallel degree tp (", tp, "): give a multiple of 64 x tp, or 0 to let "
        "Loom pad the vocabulary for this tp");
  check(tp_overlap == "on" || tp_overlap == "off", "tp_overlap must be 'on' or 'off', got '", tp_overlap, "'");
  check(!sequence_parallel || model.block_size % tp == 0, "sequence_parallel splits the sequence over tp ranks: block_size (",
        model.block_size, ") must be divisible by tp (", tp, ")");
  check(zero >= 0 && zero <= 3, "zero must be 0, 1, 2 or 3 (the ZeRO stage), got ", zero);
  check(zero3_reshard == "micro-batch" || zero3_reshard == "step", "zero3_reshard must be 'micro-batch' or 'step', got '",
        zero3_reshard, "'");
  check(zero3_reshard == "micro-batch" || zero == 3, "zero3_reshard = 'step' frees ZeRO-3's gathered parameters: set zero = 3");
  check(hsdp_shard >= 0, "hsdp_shard must be >= 0, got ", hsdp_shard);
  check(hsdp_shard == 0 || zero >= 1, "hsdp_shard needs a sharded mode: set zero to 1, 2 or 3");
  check(hsdp_shard == 0 || dp % hsdp_shard == 0, "hsdp_shard (", hsdp_shard, ") must divide dp (", dp, ")");
  check(zero == 0 || allreduce == "mpi" || allreduce == "ring", "ZeRO reduce-scatters and all-gathers with 'mpi' or 'ring', not '",
        allreduce, "'");
  check(net_gbps >= 0 && net_latency_us >= 0, "net_gbps and net_latency_us must be >= 0");
  check(comm_timeout >= 0, "comm_timeout must be seconds >= 0 (0 = off), got ", comm_timeout);
  check(peak_gflops >= 0, "peak_gflops must be >= 0, got ", peak_gflops);
  check(graph_aggregation_chunks >= 1, "graph_aggregation_chunks must be >= 1 (1 = one SpMM, then one all-reduce), got ",
        graph_aggregation_chunks);
  check(graph_aggregation_chunks == 1 || (family == "gcn" && tp_3d_on()), "graph_aggregation_chunks (",
        graph_aggregation_chunks, ") splits the aggregation of a GCN on a 3D grid: it needs model = 'gcn' and tp_3d");
  validate_tp_3d();
  validate_expert_parallel();
  // The blocks' split over the pipeline's virtual stages, refused here on every rank alike (the
  // model builder would refuse it on one rank, and the job would end in MPI_Abort).
  if (family == "gpt" && pp > 1) parallel::pipeline::partition_stages(model, pp, chunks, pipeline_layers());
}

std::array<int64_t, 3> TrainConfig::tp_3d_grid() const { return parse_tp_3d_grid(tp_3d); }

std::array<int64_t, 3> parse_tp_3d_grid(const std::string& tp_3d) {
  if (tp_3d.empty()) return {1, 1, 1};
  std::array<int64_t, 3> g{};
  size_t n = 0, begin = 0;
  while (true) {
    const size_t end = tp_3d.find(',', begin);
    const std::string part = tp_3d.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    int64_t v = -1;
    const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    check(n < 3 && ec == std::errc() && ptr == part.data() + part.size() && !part.empty(), "tp_3d must be \"R,C,D\": three ",
          "degrees (row, col, depth), got '", tp_3d, "'");
    check(v >= 1, "tp_3d degrees must be >= 1, got '", tp_3d, "'");
    g[n++] = v;
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  check(n == 3, "tp_3d must be \"R,C,D\": three degrees (row, col, depth), got '", tp_3d, "'");
  return g;
}

int64_t TrainConfig::tp_3d_ranks() const {
  const std::array<int64_t, 3> g = tp_3d_grid();
  return g[0] * g[1] * g[2];
}

void TrainConfig::validate_tp_3d() const {
  if (!tp_3d_on()) return;
  const std::array<int64_t, 3> g = tp_3d_grid();
  const std::string grid = "tp_3d (" + tp_3d + ")";
  check(tp_3d_overlap == "on" || tp_3d_overlap == "off", "tp_3d_overlap must be 'on' or 'off', got '", tp_3d_overlap, "'");
  check(tp == 1, grid, " and tp (", tp, ") are two tensor-parallel layouts: give one");
  check(!sequence_parallel, grid, " does not compose with sequence_parallel (a 1D tensor-parallel mode)");
  check(family == "gcn" || model.n_head % g[0] == 0, "n_head (", model.n_head, ") must be divisible by the row degree of ", grid,
        ": attention heads are split over row");
}

void TrainConfig::validate_expert_parallel() const {
  check(ep >= 1, "ep must be >= 1, got ", ep);
  if (ep == 1) return;
  const int64_t E = model.moe.experts;
  check(E > 0, "ep (", ep, ") splits the experts of a mixture of experts: set moe_experts");
  check(E % ep == 0, "moe_experts (", E, ") must be divisible by ep (", ep, ")");
  check(dp % ep == 0, "ep (", ep, ") splits the data-parallel ranks: it must divide dp (", dp, ")");
  // ZeRO shards the dense parameters (the experts stay whole, split by ep), tp replicates the
  // experts (each tp rank exchanges over its own ep group), pp runs each stage's experts, and a
  // 3D grid's plane shares them out too (each plane rank's block split over ep).
  if (tp_3d_on()) {
    const std::array<int64_t, 3> g = tp_3d_grid();
    check(E % (g[0] * g[1] * ep) == 0, "moe_experts (", E, ") must be divisible by row x col x ep (", g[0], " x ", g[1],
          " x ", ep, ") of tp_3d (", tp_3d, "): under ep the grid's plane shares the experts out, each plane rank's block "
          "split over ep");
  }
}

std::string flag_name(const std::string& key) {
  std::string f = key;
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

std::string type_name(const ConfigTarget& target) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, int64_t>) return "integer";
        if constexpr (std::is_same_v<T, double>) return "number";
        if constexpr (std::is_same_v<T, bool>) return "boolean";
        return "string";
      },
      target);
}

namespace {

// A TOML string that reads back as s. toml++ prints a 'literal' (multi-line when s holds a
// newline, which drops a leading newline on reading: a fuzzer found it); strings with
// control characters get a "basic" string with every such character escaped instead.
std::string toml_string(const std::string& s) {
  if (std::none_of(s.begin(), s.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
    std::ostringstream os;
    os << toml::value<std::string>(s);
    return os.str();
  }
  std::string out = "\"";
  for (const unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

std::string value_string(const ConfigTarget& target) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        std::ostringstream os;
        if constexpr (std::is_same_v<T, bool>) {
          os << (*p ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::string>) {
          os << toml_string(*p);
        } else if constexpr (std::is_same_v<T, double>) {
          // The shortest text that reads back as the same double (a checkpoint's config is exact).
          char buf[32];
          const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, *p, std::chars_format::general);
          os << std::string_view(buf, static_cast<size_t>(end - buf));
        } else {
          os << *p;
        }
        return os.str();
      },
      target);
}

void set_from_string(const ConfigKey& key, const std::string& text) {
  auto bad = [&]() { fail("--", flag_name(key.key), ": expected ", type_name(key.target), ", got '", text, "'"); };
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *p);
          if (ec != std::errc() || end != text.data() + text.size()) bad();
        } else if constexpr (std::is_same_v<T, double>) {
          try {
            size_t used = 0;
            *p = std::stod(text, &used);
            if (used != text.size()) bad();
          } catch (const std::logic_error&) {
            bad();
          }
          // nan and inf read as numbers but no key means them (an infinite bucket or lr).
          check(std::isfinite(*p), "--", flag_name(key.key), ": expected a finite number, got '", text, "'");
        } else if constexpr (std::is_same_v<T, bool>) {
          if (text == "true" || text == "1") *p = true;
          else if (text == "false" || text == "0") *p = false;
          else bad();
        } else {
          // TOML strings are UTF-8: anything else could not be stored in a checkpoint's config.
          try {
            data::utf8_decode(text);
          } catch (const Error& e) {
            fail("--", flag_name(key.key), ": the value is not valid UTF-8 (", e.what(), ")");
          }
          *p = text;
        }
      },
      key.target);
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    const size_t d = distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

namespace {

std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string s = did_you_mean(word, candidates);
  return s.empty() ? "" : " (did you mean '" + s + "'?)";
}

void set_from_toml(const ConfigKey& key, const toml::node& node, const std::string& origin) {
  auto bad = [&]() {
    fail(origin, ": [", key.section, "] ", key.key, " must be a", type_name(key.target) == "integer" ? "n " : " ",
         type_name(key.target));
  };
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          if (!node.is_integer()) bad();
          *p = node.as_integer()->get();
        } else if constexpr (std::is_same_v<T, double>) {
          if (node.is_integer()) *p = static_cast<double>(node.as_integer()->get());
          else if (node.is_floating_point()) *p = node.as_floating_point()->get();
          else bad();
          check(std::isfinite(*p), origin, ": [", key.section, "] ", key.key, " must be a finite number, got ", *p);
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!node.is_boolean()) bad();
          *p = node.as_boolean()->get();
        } else {
          if (!node.is_string()) bad();
          *p = node.as_string()->get();
        }
      },
      key.target);
}

}  // namespace

void apply_toml_string(TrainConfig& config, const std::string& text, const std::string& origin) {
  const toml::table root = data::parse_toml(text, origin);
  std::vector<ConfigKey> schema = config_schema(config);
  std::vector<std::string> sections;
  for (const auto& k : schema)
    if (std::find(sections.begin(), sections.end(), k.section) == sections.end()) sections.push_back(k.section);
  for (const auto& [section_name, section_node] : root) {
    const std::string section(section_name.str());
    check(std::find(sections.begin(), sections.end(), section) != sections.end(), origin, ": unknown section [",
          section, "]", suggestion(section, sections));
    check(section_node.is_table(), origin, ": '", section, "' must be a table ([", section, "])");
    std::vector<std::string> keys_here;
    for (const auto& k : schema)
      if (k.section == section) keys_here.push_back(k.key);
    for (const auto& [key_name, value] : *section_node.as_table()) {
      const std::string key(key_name.str());
      auto it = std::find_if(schema.begin(), schema.end(),
                             [&](const ConfigKey& k) { return k.section == section && k.key == key; });
      if (it == schema.end()) {
        std::string hint = suggestion(key, keys_here);
        for (const auto& k : schema)  // the right key in the wrong section
          if (hint.empty() && k.key == key) hint = " (it belongs in [" + k.section + "])";
        fail(origin, ": unknown key '", key, "' in [", section, "]", hint);
      }
      set_from_toml(*it, value, origin);
    }
  }
}

void apply_toml_file(TrainConfig& config, const std::string& path) {
  check(data::file_kind(path) != "missing", "cannot open config file '", path, "'");
  data::check_input_file(path, "config file", data::kMaxConfigBytes);
  std::ifstream in(path);
  check(in.good(), "cannot open config file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  apply_toml_string(config, ss.str(), path);
}

std::string to_toml(TrainConfig& config) {
  std::ostringstream os;
  std::string section;
  for (const auto& k : config_schema(config)) {
    if (k.section != section) {
      os << (section.empty() ? "" : "\n") << "[" << k.section << "]\n";
      section = k.section;
    }
    os << k.key << " = " << value_string(k.target) << "\n";
  }
  return os.str();
}

std::string config_reference_markdown() {
  TrainConfig defaults;
  std::ostringstream os;
  os << "# Configuration reference\n\n"
     << "Generated by `loom config-reference` from the schema the parser uses "
     << "(`src/loom/train/config.cpp`). Every key can be set in a TOML file under its section "
     << "or on the command line as `--key-with-dashes VALUE`; flags override the file.\n";
  std::string section;
  for (const auto& k : config_schema(defaults)) {
    if (k.section != section) {
      os << "\n## [" << k.section << "]\n\n| key | flag | type | default | meaning |\n|---|---|---|---|---|\n";
      section = k.section;
    }
    os << "| `" << k.key << "` | `--" << flag_name(k.key) << "` | " << type_name(k.target) << " | `"
       << value_string(k.target) << "` | " << k.help << " |\n";
  }
  return os.str();
}

}  // namespace loom::train
