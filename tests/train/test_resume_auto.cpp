// `resume = "auto"` falls back past a checkpoint that fails any check, saying why: a tensor
// missing from the manifest, a rank file's CRC-32 that does not match or cannot be one (-1),
// a step that disagrees with the directory's name, an unreadable tokenizer. A sound
// checkpoint of another model is an error instead: falling back past it would lose it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <ostream>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/train/resume_auto.hpp"
#include "loom/train/trainer.hpp"
#include "test_util.hpp"
#include "train/tiny_run.hpp"

namespace loom::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Damage {
  std::string name;
  std::function<void(json&)> edit;  // of checkpoint-00000004's manifest
  std::string reason;               // printed after "resume auto: skipping checkpoint-00000004: "
};

void PrintTo(const Damage& d, std::ostream* os) { *os << d.name; }

class ResumeAuto : public ::testing::TestWithParam<Damage> {};

TEST_P(ResumeAuto, SkipsADamagedCheckpointSayingWhy) {
  const Damage& d = GetParam();
  TrainConfig c = tiny_run("resume_auto_" + d.name);
  c.checkpoint_format = "sharded";
  {
    Trainer t(c, true);
    losses_of(t, 2);
    t.save_checkpoint_now();
    losses_of(t, 4);
    t.save_checkpoint_now();
  }
  const fs::path newest = fs::path(c.out_dir) / "checkpoint-00000004";
  json manifest = json::parse(testing::read_file(newest / "manifest.json"));
  d.edit(manifest);
  std::ofstream(newest / "manifest.json") << manifest.dump(1);

  c.resume = "auto";
  ::testing::internal::CaptureStdout();
  Trainer resumed(c, false);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(resumed.step(), 2);
  const std::string skipped = "resume auto: skipping checkpoint-00000004: ";
  EXPECT_NE(out.find(skipped), std::string::npos) << out;
  EXPECT_NE(out.find(d.reason), std::string::npos) << "want: " << d.reason << "\n" << out;
}

INSTANTIATE_TEST_SUITE_P(
    Checks, ResumeAuto,
    ::testing::Values(
        Damage{"missing_tensor", [](json& m) { m["tensors"].erase("model.ln_f.weight"); },
               "has no tensor 'model.ln_f.weight'"},
        Damage{"crc_minus_one", [](json& m) { m["files"]["rank-00000.safetensors"]["crc32"] = -1; },
               ": field 'files.rank-00000.safetensors.crc32' is not a CRC-32 (an integer in 0..4294967295): -1"},
        Damage{"crc_mismatch",
               [](json& m) {
                 json& crc = m["files"]["rank-00000.safetensors"]["crc32"];
                 crc = crc.get<uint32_t>() ^ 1u;
               },
               "rank file 'rank-00000.safetensors' is corrupted (CRC-32 "},
        Damage{"step_mismatch", [](json& m) { m["step"] = 3; }, "records step 3, its name says step 4"},
        Damage{"bad_tokenizer", [](json& m) { m["tokenizer"] = "bogus"; }, "unknown tokenizer spec 'bogus'"}),
    [](const auto& info) { return info.param.name; });

// A tensor the model has and the checkpoint lacks is damage even when none of this rank's
// pieces asks for it (a layout whose pieces left it out, as bf16 ZeRO-1/2 once left out the
// experts): judged against the rank's StateShapes, auto falls back past it instead of
// choosing it and failing in the resume.
TEST(ResumeAutoJudge, ATensorNoPieceAsksForIsStillRequired) {
  TrainConfig c = tiny_run("resume_auto_judge");
  c.checkpoint_format = "sharded";
  Trainer t(c, true);
  losses_of(t, 2);
  t.save_checkpoint_now();
  const fs::path dir = fs::path(c.out_dir) / "checkpoint-00000002";
  json manifest = json::parse(testing::read_file(dir / "manifest.json"));
  manifest["tensors"].erase("optim.exp_avg.ln_f.bias");
  std::ofstream(dir / "manifest.json") << manifest.dump(1);
  std::vector<StatePiece> asked;
  for (const StatePiece& p : t.local_state())
    if (p.name != "optim.exp_avg.ln_f.bias") asked.push_back(p);
  const std::string spec = t.spec().data_identity();
  EXPECT_EQ(judge_checkpoint(dir.string(), asked, c, spec).damage, "");  // the pieces alone see nothing
  const CheckpointVerdict verdict = judge_checkpoint(dir.string(), asked, c, spec, t.state_shapes());
  EXPECT_EQ(verdict.misfit, "");
  EXPECT_NE(verdict.damage.find("checkpoint '" + dir.string() + "' has no tensor 'optim.exp_avg.ln_f.bias'"),
            std::string::npos)
      << verdict.damage;
}

TEST(ResumeAutoBranch, FollowsLatestOverAHigherStepARunAbandoned) {
  // A run to step 4, then one resumed from step 2 (a training key changed, as a resume may)
  // that stops at 3: `latest` names step 3; auto continues it, not the abandoned step 4.
  TrainConfig c = tiny_run("resume_auto_branch");
  c.checkpoint_every = 1;
  c.keep_checkpoints = 10;
  c.steps = 4;
  Trainer(c, true).run();
  TrainConfig branch = c;
  branch.resume = (fs::path(c.out_dir) / "checkpoint-00000002.safetensors").string();
  branch.steps = 3;
  branch.lr = 1e-4;
  Trainer(branch, true).run();
  TrainConfig again = branch;
  again.resume = "auto";
  again.steps = 5;
  Trainer resumed(again, true);
  EXPECT_EQ(resumed.step(), 3);
}

// A checkpoint whose token table has other padding (saved under another tp) is neither
// damage nor another model: auto resumes from it, re-padded, rather than skipping it and
// starting over (which it did until the judge learned re-padding).
TEST(ResumeAutoRepadding, AnotherTokenTablePaddingIsResumedNotSkipped) {
  TrainConfig c = tiny_run("resume_auto_repadding");
  c.steps = 2;
  c.model.padded_vocab_size = 192;
  Trainer(c, true).run();
  TrainConfig again = c;
  again.model.padded_vocab_size = 0;  // 128 rows for the 65 characters
  again.resume = "auto";
  again.steps = 3;
  ::testing::internal::CaptureStdout();
  Trainer resumed(again, false);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(resumed.step(), 2) << out;
  EXPECT_EQ(out.find("skipping"), std::string::npos) << out;
  EXPECT_NE(out.find("at step 2: token table re-padded from 192 to 128 rows"), std::string::npos) << out;
}

TEST(ResumeAutoMisfit, ASoundCheckpointOfAnotherModelIsAnErrorNotSkipped) {
  TrainConfig c = tiny_run("resume_auto_misfit");
  c.steps = 2;
  Trainer(c, true).run();
  TrainConfig other = c;
  other.model.n_embd = 32;
  other.resume = "auto";
  const std::string error = testing::error_of([&] { Trainer t(other, true); });
  EXPECT_NE(error.find("holds a different model: n_embd 16 (checkpoint) vs 32 (config)"), std::string::npos) << error;
  other.model.n_embd = 16;
  other.optimizer = "sgd";
  EXPECT_NE(testing::error_of([&] { Trainer t(other, true); })
                .find("was trained with optimizer 'adamw', this run uses 'sgd'"),
            std::string::npos);
}

}  // namespace
}  // namespace loom::train
