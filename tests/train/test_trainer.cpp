// The training loop: bit-exact resume, gradient accumulation equals a larger batch,
// NaN/inf handling, and a short run of the demo model that clearly learns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "loom/data/token_file.hpp"
#include "loom/error.hpp"
#include "loom/train/trainer.hpp"
#include "test_util.hpp"
#include "train/tiny_run.hpp"

namespace loom::train {
namespace {

namespace fs = std::filesystem;

void expect_same_parameters(nn::GPT& a, nn::GPT& b) {
  auto pa = a.parameters(), pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(0, std::memcmp(pa[i]->value().raw(), pb[i]->value().raw(), pa[i]->value().nbytes())) << pa[i]->name();
}

// Training 3 steps, checkpointing and resuming for 3 more gives the uninterrupted run's
// losses and parameters bit for bit (the optimizer state included).
void expect_bit_exact_resume(const TrainConfig& c) {
  Trainer straight(c, /*quiet=*/true);
  const std::vector<float> all = losses_of(straight, 6);

  Trainer first(c, true);
  losses_of(first, 3);
  first.save_checkpoint_now();
  TrainConfig resumed_config = c;
  resumed_config.resume = "latest";
  Trainer resumed(resumed_config, true);
  EXPECT_EQ(resumed.step(), 3);
  const std::vector<float> rest = losses_of(resumed, 6);
  ASSERT_EQ(rest.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(rest[i], all[3 + i]) << "step " << 4 + i;  // bit-identical
  expect_same_parameters(straight.model(), resumed.model());
  const std::map<std::string, Tensor> want = straight.state_dict(), got = resumed.state_dict();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want)  // AdamW's moments or SGD's momentum buffers
    EXPECT_EQ(0, std::memcmp(got.at(name).raw(), w.raw(), w.nbytes())) << name;
}

TEST(Trainer, ResumeIsBitExact) {
  TrainConfig c = tiny_run("resume");
  c.micro_batches = 2;
  expect_bit_exact_resume(c);
}

TEST(Trainer, Bf16ResumeIsBitExact) {
  // Checkpoints hold the fp32 masters and moments; the bf16 weight copies are rebuilt from
  // the masters at the next step, so mixed precision resumes bit for bit too.
  TrainConfig c = tiny_run("resume_bf16");
  c.precision = "bf16";
  c.micro_batches = 2;
  expect_bit_exact_resume(c);
}

TEST(Trainer, DropoutTrainsResumesBitExactAndLeavesEvaluationAlone) {
  // Hidden dropout, then attention dropout (on the probabilities).
  for (const bool attention : {false, true}) {
    SCOPED_TRACE(attention ? "attention dropout" : "hidden dropout");
    auto with_dropout = [&](TrainConfig c) {
      (attention ? c.model.attention_dropout : c.model.hidden_dropout) = 0.2;
      return c;
    };
    const std::string kind = attention ? "attention" : "hidden";
    // The masks follow the step, so a resumed run draws the uninterrupted run's.
    TrainConfig c = with_dropout(tiny_run("resume_dropout_" + kind));
    c.micro_batches = 2;
    expect_bit_exact_resume(c);
    // Training draws masks (its loss is not the plain model's); evaluation draws none (the
    // same weights evaluate to the same loss bit for bit).
    Trainer dropped(with_dropout(tiny_run("dropout_eval_" + kind)), true), plain(tiny_run("dropout_eval_plain_" + kind), true);
    EXPECT_EQ(dropped.evaluate(), plain.evaluate());
    const std::vector<float> with = losses_of(dropped, 1), without = losses_of(plain, 1);
    EXPECT_NE(with[0], without[0]) << "a fifth of the " << kind << " values dropped, and the loss the same";
  }
}

TEST(Trainer, SelectiveRecomputeTrainsBitForBitAsKeepingTheProbabilities) {
  // Backward recomputes the probabilities with the forward's products and softmax on the same
  // operands, so nothing changes but the memory: losses and parameters bit for bit, also under
  // attention dropout (which drops the recomputed probabilities in place) and with full
  // recompute. A checkpoint of one resumes into the other (the model is the same).
  for (const double attention_dropout : {0.0, 0.2})
    for (const bool recompute : {false, true}) {
      SCOPED_TRACE("attention dropout " + std::to_string(attention_dropout) + (recompute ? ", recompute" : ""));
      auto config = [&](const std::string& name, bool selective) {
        TrainConfig c = tiny_run(name);
        c.model.attention_dropout = attention_dropout;
        c.model.recompute = recompute;
        c.model.selective_recompute = selective;
        c.micro_batches = 2;
        return c;
      };
      Trainer plain(config("selective_plain", false), true), selective(config("selective_on", true), true);
      EXPECT_EQ(losses_of(plain, 3), losses_of(selective, 3));
      expect_same_parameters(plain.model(), selective.model());
    }
  TrainConfig c = tiny_run("selective_resume");
  Trainer first(c, true);
  losses_of(first, 2);
  first.save_checkpoint_now();
  c.resume = "latest";
  c.model.selective_recompute = true;
  Trainer resumed(c, true);
  EXPECT_EQ(resumed.step(), 2);
}

TEST(Trainer, SgdMomentumResumesBitExact) {
  // The momentum buffers are optimizer state too: a resume that lost them would take a
  // plain SGD step at step 4 and differ from there.
  TrainConfig c = tiny_run("resume_sgd");
  c.optimizer = "sgd";
  c.momentum = 0.9;
  c.lr = 0.5;
  c.grad_clip = 0.0;
  expect_bit_exact_resume(c);
}

TEST(Trainer, MicroBatchesAccumulateToTheLargerBatch) {
  TrainConfig a = tiny_run("accum_a");
  a.batch_size = 4;
  a.micro_batches = 2;
  TrainConfig b = tiny_run("accum_b");
  b.batch_size = 8;
  b.micro_batches = 1;
  Trainer ta(a, true), tb(b, true);
  const StepResult ra = ta.train_step(), rb = tb.train_step();
  EXPECT_NEAR(ra.loss, rb.loss, 1e-5 * std::fabs(rb.loss));
  EXPECT_NEAR(ra.grad_norm, rb.grad_norm, 1e-4 * rb.grad_norm);
  auto pa = ta.model().parameters(), pb = tb.model().parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(testing::all_close(pa[i]->value().f32(), pb[i]->value().f32(), pa[i]->numel(), 1e-4, 1e-6, pa[i]->name()));
  // Validation reads the same global batches too: it once drew eval_batches micro-batches of
  // batch_size rows, half the sequences here, so a run resumed with another split of its
  // global batch logged another validation loss for the same weights.
  const float va = ta.evaluate(), vb = tb.evaluate();
  EXPECT_NEAR(va, vb, 1e-5 * std::fabs(vb)) << "validation loss, 2 micro-batches of 4 vs 1 of 8";
}

TEST(Trainer, NonFiniteLossStopsWithAClearError) {
  Trainer t(tiny_run("nan_stop"), true);
  t.model().ln_f().weight().value().f32()[0] = NAN;
  try {
    t.train_step();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite loss at step 1"), std::string::npos) << e.what();
  }
}

TEST(Trainer, NonFiniteStepsCanBeSkipped) {
  TrainConfig c = tiny_run("nan_skip");
  c.on_nan = "skip";
  Trainer t(c, true);
  t.model().ln_f().weight().value().f32()[0] = INFINITY;
  const Tensor before = t.model().blocks()[0]->mlp().fc().weight().value().clone();
  const StepResult r = t.train_step();
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(t.step(), 1);
  EXPECT_EQ(0, std::memcmp(before.raw(), t.model().blocks()[0]->mlp().fc().weight().value().raw(), before.nbytes()));
}

TEST(Trainer, SkippingEndsWhenEveryStepIsNonFinite) {
  // A diverged model: every step non-finite. Skipping stops at the bound, naming the steps,
  // instead of running on to a "finished" run with a NaN loss.
  TrainConfig c = tiny_run("nan_skip_bound");
  c.on_nan = "skip";
  c.steps = 20;
  Trainer t(c, true);
  t.model().ln_f().weight().value().f32()[0] = INFINITY;
  for (int64_t i = 1; i < kMaxStepsSkippedInARow; ++i) EXPECT_TRUE(t.train_step().skipped);
  EXPECT_EQ(testing::error_of([&] { t.train_step(); }),
            "on_nan = \"skip\": 10 steps in a row (1-10) had a non-finite loss or gradient norm: the model has "
            "diverged; lower lr and start again, or resume from a checkpoint before it diverged");
}

TEST(Trainer, ResumeAutoStartsFreshWithoutACheckpoint) {
  TrainConfig c = tiny_run("resume_auto_fresh");
  c.resume = "auto";
  Trainer t(c, true);
  EXPECT_EQ(t.step(), 0);
}

// An attempt killed before its first checkpoint: `--resume auto` starts afresh after its
// records, which stay in metrics.jsonl as they were, and says so.
TEST(Trainer, ResumeAutoStartingFreshKeepsTheEarlierAttemptsRecords) {
  TrainConfig c = tiny_run("resume_auto_fresh_records");
  c.resume = "auto";
  fs::create_directories(c.out_dir);
  const std::string earlier = "{\"kind\":\"start\",\"step\":0}\n{\"kind\":\"train\",\"loss\":4.5,\"step\":1}\n";
  std::ofstream(fs::path(c.out_dir) / "metrics.jsonl") << earlier;
  ::testing::internal::CaptureStdout();
  {
    Trainer t(c, false);
    EXPECT_EQ(t.step(), 0);
    t.run();
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("resume auto: no complete checkpoint in '" + c.out_dir +
                     "', starting fresh at step 0 (metrics.jsonl keeps the steps an earlier attempt logged; loom report "
                     "draws this run's and counts those it leaves out)\n"),
            std::string::npos)
      << out;
  const std::string metrics = testing::read_file(fs::path(c.out_dir) / "metrics.jsonl");
  EXPECT_EQ(metrics.substr(0, earlier.size()), earlier);
  EXPECT_EQ(metrics.substr(earlier.size(), 25), "{\"kind\":\"start\",\"step\":0}");
}

// A newer checkpoint damaged by a crash is skipped: the run continues bit-exactly from the
// one before it.
TEST(Trainer, ResumeAutoPicksTheNewestCompleteCheckpoint) {
  TrainConfig c = tiny_run("resume_auto");
  Trainer straight(c, true);
  const std::vector<float> all = losses_of(straight, 6);

  Trainer first(c, true);
  losses_of(first, 2);
  first.save_checkpoint_now();
  losses_of(first, 4);
  const std::string newest = first.save_checkpoint_now();
  fs::resize_file(newest, fs::file_size(newest) / 2);
  TrainConfig auto_config = c;
  auto_config.resume = "auto";
  Trainer resumed(auto_config, true);
  EXPECT_EQ(resumed.step(), 2);
  const std::vector<float> rest = losses_of(resumed, 6);
  ASSERT_EQ(rest.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rest[i], all[2 + i]) << "step " << 3 + i;
  expect_same_parameters(straight.model(), resumed.model());
}

TEST(Trainer, ResumeAutoNeedsAnOutDir) {
  TrainConfig c = tiny_run("resume_auto_no_dir");
  c.resume = "auto";
  c.out_dir = "";
  try {
    c.validate();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "resume = 'auto' looks for checkpoints in out_dir: set out_dir");
  }
}

TEST(Trainer, ResumeFromAMissingCheckpointIsAnError) {
  TrainConfig c = tiny_run("resume_missing");
  c.resume = "latest";
  EXPECT_THROW(Trainer(c, true), Error);
}

TEST(Trainer, PaddedVocabularyIsComparedWithTheDatasVocabulary) {
  // 26 letters and a space: a padded vocabulary of 30 rows is enough. It was refused against
  // the config's placeholder of 65 before the data was read; 20 rows is refused, naming both.
  const std::string data = (std::filesystem::temp_directory_path() / "loom_train_letters.txt").string();
  {
    std::ofstream out(data);
    for (int i = 0; i < 2000; ++i) out << "the quick brown fox jumps over a lazy dog ";
  }
  TrainConfig c = tiny_run("padded_vocab");
  c.data = data;
  c.model.padded_vocab_size = 30;
  c.steps = 2;
  Trainer t(c, true);
  EXPECT_EQ(t.model().config().vocab_size, 27);
  EXPECT_TRUE(std::isfinite(t.train_step().loss));
  c = tiny_run("padded_vocab_short");
  c.data = data;
  c.model.padded_vocab_size = 20;
  EXPECT_EQ(loom::testing::error_of([&] { Trainer(c, true); }),
            "padded_vocab_size (20) must be >= the vocabulary's size (27)");
}

TEST(Trainer, SgdAndByteTokenizerTrainToo) {
  TrainConfig c = tiny_run("sgd_bytes");
  c.optimizer = "sgd";
  c.tokenizer = "byte";
  c.lr = 0.5;
  c.momentum = 0.9;
  c.steps = 40;
  Trainer t(c, true);
  EXPECT_EQ(t.model().config().vocab_size, 256);
  const float first = t.train_step().loss;
  EXPECT_NEAR(first, std::log(256.0f), 0.3f);
  float last = first;
  while (t.step() < c.steps) last = t.train_step().loss;
  EXPECT_LT(last, first - 0.5f) << "SGD did not learn: " << first << " -> " << last;
}

TEST(Trainer, DemoModelLearnsInAShortRun) {
  // The demo's model (configs/shakespeare.toml) for 150 steps: validation loss falls from
  // ln(65) = 4.17 to well below 3 nats per character.
  TrainConfig c = tiny_run("learns");
  apply_toml_file(c, LOOM_SOURCE_DIR "/configs/shakespeare.toml");
  c.data = LOOM_SOURCE_DIR "/data/tinyshakespeare.txt";
  c.out_dir = (fs::temp_directory_path() / "loom_train_learns").string();
  c.steps = 150;
  c.threads = 1;
  c.eval_every = 0;
  c.eval_batches = 8;
  c.peak_gflops = 100;
  Trainer t(c, true);
  const float before = t.evaluate();
  EXPECT_NEAR(before, std::log(65.0f), 0.2f);
  const float after = t.run();
  EXPECT_LT(after, 2.7f) << "val loss only went from " << before << " to " << after;
  EXPECT_TRUE(fs::exists(fs::path(c.out_dir) / "latest"));
  EXPECT_TRUE(fs::exists(fs::path(c.out_dir) / "metrics.jsonl"));
}

}  // namespace
}  // namespace loom::train

namespace loom::train {
namespace {

// A token file (`loom tokenize`) trains to the very losses of the text it came from, and
// resumes bit-exactly, as the text does.
TEST(Trainer, TokenFileTrainsAsItsTextAndResumesBitExact) {
  TrainConfig text = tiny_run("token_text");
  TrainConfig tokens = tiny_run("token_file");
  tokens.data = (fs::path(tokens.out_dir).parent_path() / "loom_train_tinyshakespeare.tok").string();
  data::tokenize_text_file(text.data, tokens.data, "char");
  Trainer from_text(text, true), from_tokens(tokens, true);
  EXPECT_EQ(losses_of(from_tokens, 4), losses_of(from_text, 4));
  EXPECT_EQ(from_tokens.evaluate(), from_text.evaluate());
  expect_bit_exact_resume(tokens);
}

}  // namespace
}  // namespace loom::train
