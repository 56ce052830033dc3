// The memory check that runs before a model is built: its prediction is the planner's (what
// `loom train --dry-run` prints), absurd sizes are counted without overflow, and a model
// larger than the machine is refused naming both numbers, the command whose prediction it is
// and (generating) that command's batch flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "loom/nn/kv_cache.hpp"
#include "loom/parallel/pipeline/partition.hpp"
#include "loom/plan/memory_model.hpp"
#include "loom/plan/tensor_parallel_3d_memory.hpp"
#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/trainer.hpp"
#include "step_activation_peak.hpp"
#include "test_util.hpp"
#include "tiny_config.hpp"

namespace {

using namespace loom::train;

TEST(MemoryBudget, StateIsThePlannersFormula) {
  TrainConfig c;
  c.dp = 4;
  c.zero = 3;
  const MemoryNeed need = training_memory(c);
  const loom::plan::StateBytes state = loom::plan::model_state_bytes(c.model.num_parameters(), 4, 3, 8);
  EXPECT_EQ(need.state, static_cast<double>(state.total()));
  EXPECT_GT(need.activations, 0.0);
  c.model.recompute = true;
  EXPECT_LT(training_memory(c).activations, need.activations) << "recompute keeps only each block's input";
  EXPECT_EQ(inference_memory(c.model).state, 4.0 * static_cast<double>(c.model.num_parameters()));
}

// Under a pipeline each rank's state counts the parameters of the stages it owns, as the trainer
// builds them (the same partition, balanced by cost or given by pp_layers, one chunk or two): its
// blocks and their experts (a mixture in every other or every third block, so uneven splits hold
// different numbers of them), the tables on the first stage and the head's copy of the token table
// on the last. Once each rank counted 1/pp of the model's parameters, experts and all (pp 2 over
// "1,4": 15816 parameters for 5584 and 28096). In fp32 without ZeRO the state is 16 B a parameter.
TEST(MemoryBudget, EachPipelineRanksStateCountsItsOwnStagesParameters) {
  struct Case {
    int64_t layers, pp, chunks, every;
    std::string split;
  };
  for (const Case& k : {Case{5, 2, 1, 2, "1,4"}, Case{5, 2, 1, 2, "3,2"}, Case{5, 2, 1, 2, ""}, Case{7, 3, 1, 2, "3,3,1"},
                        Case{7, 3, 1, 2, "1,2,4"}, Case{7, 3, 1, 3, ""}, Case{8, 2, 2, 2, "1,3,3,1"}, Case{9, 3, 1, 1, ""},
                        Case{6, 3, 1, 0, "1,1,4"}})
    for (const int64_t ep : {1, 2}) {
      TrainConfig c;
      c.model = loom::nn::GPTConfig{.vocab_size = 65, .block_size = 16, .n_layer = k.layers, .n_head = 2, .n_embd = 16};
      c.model.moe.experts = k.every > 0 ? 4 : 0;
      c.model.moe.every = std::max<int64_t>(k.every, 1);
      c.pp = k.pp;
      c.chunks = k.chunks;
      c.pp_layers = k.split;
      c.dp = ep;
      c.ep = ep;
      const std::string what = std::to_string(k.layers) + " blocks over pp " + std::to_string(k.pp) + " x " +
                               std::to_string(k.chunks) + " \"" + k.split + "\", moe every " + std::to_string(k.every) +
                               ", ep " + std::to_string(ep);
      const std::vector<loom::nn::GPTStage> stages =
          loom::parallel::pipeline::partition_stages(c.model, c.pp, c.chunks, c.pipeline_layers());
      int64_t most = 0;
      for (int64_t r = 0; r < c.pp; ++r) {
        int64_t params = 0;
        for (int64_t v = 0; v < c.chunks; ++v) {
          loom::nn::GPT stage(c.model, 1, loom::nn::serial_layers(), stages[static_cast<size_t>(v * c.pp + r)]);
          for (loom::nn::Parameter* q : stage.parameters())  // under ep a rank holds E / ep experts
            params += q->name().find(".experts.") != std::string::npos ? q->numel() / ep : q->numel();
        }
        EXPECT_EQ(rank_training_state(c, r).total(), 16 * params) << what << ", pp rank " << r;
        most = std::max(most, 16 * params);
      }
      EXPECT_EQ(rank_training_state(c).total(), most) << what << ": the rank holding the most";
    }
}

// Under a pipeline each rank's activations are its own chunks' for every (micro-batch, chunk)
// its schedule holds at once, the running action's peak on top, and the tensors in transit; the
// check takes the rank needing the most, which a refusal names. 4 blocks over pp 2 (2 each) and
// 4 micro-batches: under 1F1B rank 0 holds 2 micro-batches, rank 1 (the head's: with the logits
// and the final LayerNorm's) one; under GPipe both hold all 4. Once every rank counted
// ceil(L / pp) blocks, the logits and one micro-batch.
TEST(MemoryBudget, EachPipelineRankHoldsWhatItsScheduleKeeps) {
  TrainConfig c;
  c.model = loom::nn::GPTConfig{.vocab_size = 65, .block_size = 16, .n_layer = 4, .n_head = 2, .n_embd = 16};
  c.model.padded_vocab_size = 128;
  c.pp = 2;
  c.micro_batches = 4;
  c.batch_size = 2;
  // A chunk's kept bytes and its backward's peak, as a grid rank of its 2 blocks counts them; a
  // (B, T, C) fp32 tensor in transit.
  const auto chunk = [](bool embedding, bool head) {
    return loom::plan::grid_3d_chunk_activation_peaks(
        {.B = 2, .T = 16, .C = 16, .NH = 2, .L = 2, .V = 128, .embedding = embedding, .head = head});
  };
  const loom::plan::ChunkActivationPeaks first = chunk(true, false), last = chunk(false, true);
  const double x = 4.0 * 2 * 16 * 16;
  const auto in = [](int64_t bytes) { return static_cast<double>(bytes); };
  // Rank 0's first backward runs with micro-batch 1 held and both outputs it sent in transit (as
  // far as it can tell, micro-batch 1's receive may not be posted yet); rank 1's second with
  // micro-batch 0's gradient in transit.
  c.schedule = "1f1b";
  EXPECT_EQ(rank_training_memory(c, 0).activations, in(first.kept + first.backward) + 2 * x);
  EXPECT_EQ(rank_training_memory(c, 1).activations, in(last.backward) + x);
  c.schedule = "gpipe";
  EXPECT_EQ(rank_training_memory(c, 0).activations, in(3 * first.kept + first.backward) + 4 * x);
  EXPECT_EQ(rank_training_memory(c, 1).activations, in(3 * last.kept + last.backward));
  const MemoryNeed most = training_memory(c);
  EXPECT_EQ(most.pp_rank, 1);
  EXPECT_EQ(most.total(), rank_training_memory(c, 1).total());
  EXPECT_EQ(most.state, static_cast<double>(rank_training_state(c, 1).total()));
  c.model.n_embd = 1 << 16;  // terabytes; under 1F1B rank 0's two micro-batches need the most
  c.schedule = "1f1b";
  const std::string error = loom::testing::error_of(
      [&] { check_fits_in_memory(training_memory(c), 1, "the model", {"loom train --dry-run", ""}); });
  EXPECT_NE(error.find(" per rank on pipeline rank 0 (the one needing the most), as `loom train --dry-run` predicts"),
            std::string::npos)
      << error;
}

TEST(MemoryBudget, AbsurdSizesAreCountedWithoutOverflowAndRefused) {
  TrainConfig c;
  c.model.n_embd = 2000000000;
  c.model.n_head = 1;
  c.model.n_layer = 1000000;
  const MemoryNeed need = training_memory(c);
  EXPECT_GT(need.total(), 1e26);  // 16 bytes x 12 x 10^6 layers x (2 x 10^9)^2
  EXPECT_EQ(describe(need).rfind("more than 1 EiB (state more than 1 EiB", 0), 0u) << describe(need);
  const std::string error =
      loom::testing::error_of([&] { check_fits_in_memory(need, 2, "the model", {"loom train --dry-run", ""}); });
  EXPECT_EQ(error.rfind("the model needs more than 1 EiB", 0), 0u) << error;
  EXPECT_NE(error.find(" per rank x 2 ranks on this host, as `loom train --dry-run` predicts, more than the "),
            std::string::npos)
      << error;
  EXPECT_NE(error.find(" this machine has available ("), std::string::npos) << error;
  EXPECT_GT(available_memory().bytes, 0);
  EXPECT_EQ(loom::testing::error_of([] { check_fits_in_memory({1024.0, 0.0}, 1, "a small model", {}); }), "(no error)");
}

// Generation holds its KV cache beside the model: layers x 2 x batch x context x width
// values, fp32 or in a bf16 run bf16, as KVCache allocates them; bf16 adds the weights' bf16 copies (2 bytes each);
// a batch past the GEMV's rows adds the decode step's packed copies (4 bytes, 2 in bf16).
TEST(MemoryBudget, GenerationCountsTheKvCacheOfItsBatch) {
  const loom::nn::GPTConfig m{.vocab_size = 30, .block_size = 16, .n_layer = 3, .n_head = 2, .n_embd = 8};
  EXPECT_EQ(kv_cache_bytes(m, 5), 3.0 * 2 * 5 * 16 * 8 * 4);
  EXPECT_EQ(kv_cache_bytes(m, 5, /*bf16=*/true), 3.0 * 2 * 5 * 16 * 8 * 2);  // a bf16 run's cache
  loom::nn::GPT model(m, 1);
  EXPECT_EQ(kv_cache_bytes(m, 5), 5.0 * static_cast<double>(loom::nn::KVCache(model, 1).bytes_read(m.block_size)));
  const MemoryNeed one = inference_memory(m), many = inference_memory(m, 4);
  EXPECT_EQ(many.kv_cache, kv_cache_bytes(m, 4));
  EXPECT_EQ(many.total() - one.total(), 3 * kv_cache_bytes(m, 1));
  EXPECT_EQ(inference_memory(m, 1, /*bf16=*/true).state, 1.5 * one.state);
  EXPECT_EQ(inference_memory(m, 4, /*bf16=*/true).kv_cache, kv_cache_bytes(m, 4, /*bf16=*/true));
  EXPECT_EQ(inference_memory(m, 5).state, 2.0 * one.state);
  EXPECT_EQ(inference_memory(m, 5, /*bf16=*/true).state, 2.0 * one.state);
  EXPECT_NE(describe(many).find(" + KV cache "), std::string::npos) << describe(many);
  // A batch whose cache the machine cannot hold is refused before anything is allocated,
  // naming the command whose prediction it is and that command's batch flag.
  const MemoryNeed huge = inference_memory(m, int64_t{1} << 40);
  const std::string error =
      loom::testing::error_of([&] { check_fits_in_memory(huge, 1, "the model", {"loom generate", "--batch"}); });
  EXPECT_NE(error.find("KV cache"), std::string::npos) << error;
  EXPECT_NE(error.find(" per rank, as `loom generate` predicts, more than the "), std::string::npos) << error;
  EXPECT_EQ(error.find("loom train"), std::string::npos) << error;
  // A checkpoint's model is what it is: the remedy is memory, or fewer sequences, never a smaller model.
  const std::string tail = "); run it where more memory is free, or generate fewer sequences together (--batch)";
  EXPECT_EQ(error.substr(error.size() - std::min(error.size(), tail.size())), tail) << error;
  const std::string training = loom::testing::error_of(
      [&] { check_fits_in_memory(huge, 1, "the model", {"loom train --dry-run", "", kTrainingMemoryRemedy}); });
  EXPECT_NE(training.find("); make the model smaller (n_layer, n_embd, block_size, batch_size) or shard it over more "
                          "ranks"),
            std::string::npos)
      << training;
  const std::string bench = loom::testing::error_of(
      [&] { check_fits_in_memory(huge, 1, "the model", {"loom bench generate", "--batches"}); });
  EXPECT_NE(bench.find(", as `loom bench generate` predicts, "), std::string::npos) << bench;
  EXPECT_NE(bench.find("generate fewer sequences together (--batches)"), std::string::npos) << bench;
  const std::string bench_remedy = loom::testing::error_of([&] {
    check_fits_in_memory(huge, 1, "the model", {"loom bench generate", "--batches", "leave the largest shapes out"});
  });
  EXPECT_NE(bench_remedy.find("); leave the largest shapes out, or generate fewer"), std::string::npos) << bench_remedy;
  // A command without a batch flag (one prompt) is not told to generate fewer; a
  // checkpoint's bytes are no command's prediction.
  const std::string single = loom::testing::error_of([&] { check_fits_in_memory(huge, 1, "the model", {"loom sample", ""}); });
  EXPECT_NE(single.find(", as `loom sample` predicts, "), std::string::npos) << single;
  EXPECT_EQ(single.find("fewer"), std::string::npos) << single;
  // Scoring (no KV cache) runs windows at once: fewer of those, not fewer sequences.
  const std::string eval = loom::testing::error_of(
      [&] { check_fits_in_memory(scoring_memory(m, int64_t{1} << 40), 1, "the model", {"loom eval", "--batch"}); });
  EXPECT_NE(eval.find(", as `loom eval` predicts, "), std::string::npos) << eval;
  EXPECT_EQ(eval.find("KV cache"), std::string::npos) << eval;
  const std::string eval_tail = "); run it where more memory is free, or score fewer windows at once (--batch)";
  EXPECT_EQ(eval.substr(eval.size() - std::min(eval.size(), eval_tail.size())), eval_tail) << eval;
  const std::string bytes = loom::testing::error_of([&] { check_fits_in_memory(huge, 1, "checkpoint 'x'", {}); });
  EXPECT_EQ(bytes.find("predicts"), std::string::npos) << bytes;
}

}  // namespace

// The memory check's activations of a whole model on one rank (train::training_memory, what
// --dry-run prints) against the tracker's activation peak over a step after a warm one: fp32
// and bf16, with and without recompute, a width the heads divide unevenly into groups and one
// micro-batch or two. Summing every block's activations with the first backward's scratch, the
// recomputed probabilities and the passed-on gradients counted 82176 B in bf16 where the tiny
// GPT peaks at 74496: by the time the last block's attention backward runs, its MLP's tensors
// are freed. Counted moment by moment as the 1 x 1 grid's (plan/tensor_parallel_3d_memory.hpp).
TEST(MemoryBudget, SerialActivationsAreTheTrackersPeak) {
  for (const int64_t width : {16, 48})
    for (const int64_t micro_batches : {1, 2})
      for (const std::string precision : {"fp32", "bf16"})
        for (const bool recompute : {false, true}) {
          TrainConfig c = loom::testing::tiny_config();
          c.model.n_embd = width;
          c.batch_size = 2;
          c.micro_batches = micro_batches;
          c.precision = precision;
          c.model.recompute = recompute;
          c.threads = 1;
          Trainer t(c, true);
          const int64_t measured = loom::testing::step_activation_peak(t);
          EXPECT_EQ(static_cast<int64_t>(training_memory(t.config()).activations), measured)
              << "width " << width << ", " << micro_batches << " micro-batches, " << precision
              << (recompute ? ", recompute" : "");
        }
}
