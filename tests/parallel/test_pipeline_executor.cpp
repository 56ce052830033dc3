// The pipeline executor on its own, without a Trainer: a tiny GPT cut into p x v virtual
// stages (the world is the pipeline) runs a built schedule's actions, or a custom schedule
// read from a file, and gives the serial model's summed loss (relative 1e-5) and parameter
// gradients (1e-5 of each tensor's largest magnitude: only the order of the micro-batches'
// gradient sums may differ). A forward-only run gives the serial losses; an action list that
// sends what it never computed is an error naming the action.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_test_env.hpp"
#include "loom/error.hpp"
#include "loom/nn/cross_entropy_loss.hpp"
#include "loom/parallel/pipeline/executor.hpp"
#include "loom/parallel/pipeline/partition.hpp"
#include "loom/parallel/pipeline/schedule_builders.hpp"
#include "loom/parallel/pipeline/schedule_check.hpp"
#include "loom/parallel/pipeline/schedule_file.hpp"
#include "test_util.hpp"

namespace loom::parallel::pipeline::executor_test {
namespace {

using loom::testing::all_close;
using loom::testing::world;

constexpr int64_t kB = 2, kT = 8, kC = 16, kV = 65, kM = 4;
constexpr uint64_t kSeed = 42;

nn::GPTConfig tiny_model() { return {.vocab_size = kV, .block_size = kT, .n_layer = 8, .n_head = 2, .n_embd = kC}; }

struct MicroBatches {
  std::vector<Tensor> inputs, targets;  // (M) token ids, each (B, T) i32
};

MicroBatches micro_batches() {
  MicroBatches d;
  for (int64_t mb = 0; mb < kM; ++mb) {
    Tensor idx = Tensor::empty({kB, kT}, DType::I32), targets = Tensor::empty({kB, kT}, DType::I32);
    for (int64_t i = 0; i < kB * kT; ++i) {
      idx.i32()[i] = static_cast<int32_t>((7 * i + 13 * mb + 1) % kV);
      targets.i32()[i] = static_cast<int32_t>((5 * i + 3 * mb + 3) % kV);
    }
    d.inputs.push_back(idx);
    d.targets.push_back(targets);
  }
  return d;
}

// The last stage's loss of one micro-batch; training turns the logits into dlogits.
float micro_batch_loss(Tensor& logits, const Tensor& targets, bool training) {
  const float loss = nn::cross_entropy_loss(logits, targets, kV);
  if (training) nn::cross_entropy_loss_backward(logits, targets, kV, 1.0f / static_cast<float>(kM));
  return loss;
}

struct Reference {
  double loss = 0.0;                                  // summed over the micro-batches
  std::map<std::string, std::vector<float>> grads;  // by parameter name
};

Reference serial_run(const MicroBatches& d) {
  nn::GPT whole(tiny_model(), kSeed);
  Reference r;
  for (int64_t mb = 0; mb < kM; ++mb) {
    nn::Context ctx;
    Tensor logits = whole.forward(d.inputs[mb], ctx);  // (B, T, Vp)
    r.loss += micro_batch_loss(logits, d.targets[mb], true);
    whole.backward(logits, ctx);
  }
  for (nn::Parameter* p : whole.parameters())
    r.grads[p->name()] = std::vector<float>(p->grad().f32(), p->grad().f32() + p->numel());
  return r;
}

// This rank's chunks of the model cut into p x v virtual stages (chunk c is stage c p + rank).
struct RankChunks {
  std::vector<std::unique_ptr<nn::GPT>> owned;
  std::vector<nn::GPT*> chunks;
};

RankChunks rank_chunks(int64_t v) {
  const int64_t p = world().size();
  const std::vector<nn::GPTStage> stages = partition_stages(tiny_model(), p, v);
  RankChunks r;
  for (int64_t c = 0; c < v; ++c) {
    r.owned.push_back(std::make_unique<nn::GPT>(tiny_model(), kSeed, nn::serial_layers(),
                                                stages[static_cast<size_t>(c * p + world().rank())]));
    r.chunks.push_back(r.owned.back().get());
  }
  return r;
}

// Runs this rank's actions of a p-rank schedule with v chunks and compares with the serial run.
void expect_serial_result(const std::vector<Action>& actions, int64_t v, const std::string& what) {
  const MicroBatches d = micro_batches();
  const Reference want = serial_run(d);
  RankChunks model = rank_chunks(v);
  PipelineExecutor executor(std::vector<nn::Module*>(model.chunks.begin(), model.chunks.end()), world(), kM, Shape{kB, kT, kC});
  std::vector<bool> last_flags;  // before_backward's, one per backward in order
  float loss = static_cast<float>(executor.run(
      actions, [&](int64_t mb) { return d.inputs[mb]; },
      [&](Tensor& logits, int64_t mb) { return micro_batch_loss(logits, d.targets[mb], true); },
      [&](bool last) { last_flags.push_back(last); }));
  // Data parallelism reduces a chunk's gradients at the backward flagged last: it must be the
  // chunk's last backward in the list, whichever micro-batch that is (LIFO ends with mb 0).
  std::vector<bool> want_flags;
  for (size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].kind != ActionKind::Backward) continue;
    bool later = false;
    for (size_t j = i + 1; j < actions.size(); ++j)
      later = later || (actions[j].kind == ActionKind::Backward && actions[j].chunk == actions[i].chunk);
    want_flags.push_back(!later);
  }
  EXPECT_EQ(last_flags, want_flags) << what << ": the backwards flagged as their chunk's last";
  world().all_reduce(&loss, 1, comm::ReduceOp::Sum);  // only the last stage's rank has it
  EXPECT_NEAR(loss, want.loss, 1e-5 * want.loss) << what;

  auto scale = [](const std::vector<float>& g) {
    float s = 0.0f;
    for (float x : g) s = std::max(s, std::fabs(x));
    return s;
  };
  // The tied token table: the first stage's and the last stage's copies sum to its gradient.
  const std::vector<float>& want_wte = want.grads.at("embedding.wte");
  std::vector<float> wte(want_wte.size(), 0.0f);
  for (nn::GPT* chunk : model.chunks)
    for (nn::Parameter* p : chunk->parameters()) {
      const std::vector<float> got(p->grad().f32(), p->grad().f32() + p->numel());
      if (p->name() == "embedding.wte") {
        for (size_t i = 0; i < got.size(); ++i) wte[i] += got[i];
        continue;
      }
      const std::vector<float>& g = want.grads.at(p->name());
      EXPECT_TRUE(all_close(got, g, 0, 1e-5 * scale(g), what + " gradient of " + p->name()));
    }
  world().all_reduce(wte.data(), static_cast<int64_t>(wte.size()), comm::ReduceOp::Sum);
  EXPECT_TRUE(all_close(wte, want_wte, 0, 1e-5 * scale(want_wte), what + " gradient of embedding.wte"));

  // The measured timeline holds every rank's forwards and backwards.
  const Timeline t = executor.gather_timeline();
  ASSERT_EQ(t.ranks.size(), static_cast<size_t>(world().size())) << what;
  for (const auto& rank : t.ranks) EXPECT_EQ(rank.size(), static_cast<size_t>(2 * kM * v)) << what;
  EXPECT_GE(t.bubble_over_compute(), 0.0) << what;
}

// A schedule no builder makes, for any p: all forwards, then the backwards last-in-first-out;
// each rank but the first posts all its activation receives up front, and each rank but the
// last sends every activation one forward late.
std::string custom_schedule_text(int p) {
  std::string text = "pp=" + std::to_string(p) + " micro_batches=" + std::to_string(kM) + " chunks=1\n";
  for (int r = 0; r < p; ++r) {
    const std::string prev = std::to_string(r - 1), next = std::to_string(r + 1);
    text += "rank " + std::to_string(r) + ":";
    for (int mb = 0; r > 0 && mb < kM; ++mb) text += " RA" + std::to_string(mb) + "<" + prev;
    for (int mb = 0; mb < kM; ++mb) {
      text += " F" + std::to_string(mb);
      if (r < p - 1 && mb > 0) text += " SA" + std::to_string(mb - 1) + ">" + next;
    }
    if (r < p - 1) text += " SA" + std::to_string(kM - 1) + ">" + next;
    for (int mb = kM - 1; mb >= 0; --mb) {
      if (r < p - 1) text += " RG" + std::to_string(mb) + "<" + next;
      text += " B" + std::to_string(mb);
      if (r > 0) text += " SG" + std::to_string(mb) + ">" + prev;
    }
    text += "\n";
  }
  return text;
}

TEST(PipelineExecutor, BuiltSchedulesMatchSerial) {
  const int p = world().size();
  if (p < 2) GTEST_SKIP() << "a pipeline needs 2 ranks";
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved}) {
    const int v = kind == ScheduleKind::Interleaved ? 2 : 1;
    if (v * p > tiny_model().n_layer || (v > 1 && kM % p != 0)) continue;  // a block per stage; m % p == 0
    const Schedule s = build_schedule(kind, p, kM, v);
    check_schedule(s);
    expect_serial_result(s.ranks[static_cast<size_t>(world().rank())], v, schedule_kind_name(kind));
  }
}

TEST(PipelineExecutor, CustomScheduleFileMatchesSerial) {
  const int p = world().size();
  if (p < 2) GTEST_SKIP() << "a pipeline needs 2 ranks";
  const std::string path = std::filesystem::temp_directory_path() /
                           ("loom_custom_schedule_np" + std::to_string(p) + "_rank" + std::to_string(world().rank()) + ".txt");
  std::ofstream(path) << custom_schedule_text(p);
  const Schedule s = schedule_from_file(path, p, kM, 1);
  std::filesystem::remove(path);
  EXPECT_NE(s.ranks, build_schedule(ScheduleKind::GPipe, p, kM).ranks) << "the custom schedule is not GPipe's";
  expect_serial_result(s.ranks[static_cast<size_t>(world().rank())], 1, "custom schedule (np " + std::to_string(p) + ")");
  if (p == 2) {
    const std::string committed = LOOM_SOURCE_DIR "/configs/schedules/gpipe_lifo_pp2_m4.txt";
    const Schedule c = schedule_from_file(committed, p, kM, 1);
    expect_serial_result(c.ranks[static_cast<size_t>(world().rank())], 1, committed);
  }
}

TEST(PipelineExecutor, ForwardOnlyRunGivesTheSerialLosses) {
  const int p = world().size();
  if (p < 2) GTEST_SKIP() << "a pipeline needs 2 ranks";
  const MicroBatches d = micro_batches();
  double want = 0.0;
  nn::GPT whole(tiny_model(), kSeed);
  for (int64_t mb = 0; mb < kM; ++mb) {
    nn::Context ctx;
    Tensor logits = whole.forward(d.inputs[mb], ctx);
    want += micro_batch_loss(logits, d.targets[mb], false);
  }
  for (int64_t v : {1, 2}) {
    if (v * p > tiny_model().n_layer) continue;
    RankChunks model = rank_chunks(v);
    PipelineExecutor executor(std::vector<nn::Module*>(model.chunks.begin(), model.chunks.end()), world(), kM, Shape{kB, kT, kC});
    float loss = static_cast<float>(executor.run_forward(
        [&](int64_t mb) { return d.inputs[mb]; },
        [&](Tensor& logits, int64_t mb) { return micro_batch_loss(logits, d.targets[mb], false); }, kM));
    world().all_reduce(&loss, 1, comm::ReduceOp::Sum);
    EXPECT_NEAR(loss, want, 1e-5 * want) << v << " chunk(s) per rank";
  }
}

TEST(PipelineExecutor, SendingWhatWasNeverComputedIsNamed) {
  // Every rank fails on its first action, before any message is posted.
  RankChunks model = rank_chunks(1);
  PipelineExecutor executor(std::vector<nn::Module*>(model.chunks.begin(), model.chunks.end()), world(), kM, Shape{kB, kT, kC});
  const std::vector<Action> actions{{ActionKind::SendActivation, 2, 0, (world().rank() + 1) % world().size()}};
  const std::string error = loom::testing::error_of([&] {
    executor.run(actions, [](int64_t) { return Tensor(); }, [](Tensor&, int64_t) { return 0.0f; }, [](bool) {});
  });
  EXPECT_EQ(error, "pipeline rank " + std::to_string(world().rank()) + ": SA2>" +
                       std::to_string((world().rank() + 1) % world().size()) +
                       " sends the output of F2, which no earlier action computed (or it was sent already)");
}

}  // namespace
}  // namespace loom::parallel::pipeline::executor_test
