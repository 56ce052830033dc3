// A resume must find the model its configuration describes: every [model] key (but
// recompute), the vocabulary as the token table holds it and the tokenizer are compared with
// what the checkpoint stored, each difference is named, and a refused resume writes nothing
// in the run directory. Layout and training keys may differ.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "loom/data/tokenizer.hpp"
#include "loom/train/model_identity.hpp"
#include "loom/train/trainer.hpp"
#include "test_util.hpp"
#include "train/tiny_run.hpp"

namespace loom::train {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

// A checkpoint's metadata as a run of c (vocabulary resolved) with tokenizer spec writes it.
CheckpointInfo stored(TrainConfig c, const std::string& spec) {
  return {6, to_toml(c), spec, c.optimizer, 6};
}

TrainConfig resolved(int64_t vocab) {
  TrainConfig c;
  c.model.vocab_size = vocab;
  return c;
}

std::string char_spec(const std::string& text) { return data::Tokenizer::create("char", text)->spec(); }

TEST(ModelIdentity, NamesEveryKeyThatDiffers) {
  TrainConfig six = resolved(3), four = resolved(3);
  six.model.n_layer = 6;
  six.model.n_head = 8;
  four.model.n_layer = 4;
  four.model.n_head = 4;
  four.model.block_size = 64;
  const std::string abc = char_spec("abc");
  EXPECT_EQ(model_differences(stored(six, abc), four, abc),
            (std::vector<std::string>{"n_layer 6 (checkpoint) vs 4 (config)", "n_head 8 vs 4", "block_size 256 vs 64"}));
  EXPECT_EQ(different_model_message("runs/x/checkpoint-00000060", stored(six, abc), four, abc),
            "checkpoint 'runs/x/checkpoint-00000060' holds a different model: n_layer 6 (checkpoint) vs 4 (config), "
            "n_head 8 vs 4, block_size 256 vs 64; resume with the checkpoint's values or start a new out_dir");
}

TEST(ModelIdentity, VocabularyAndTokenizerAreNamed) {
  const std::string abc = char_spec("abc");
  EXPECT_EQ(model_differences(stored(resolved(3), abc), resolved(256), "byte"),
            (std::vector<std::string>{"vocab_size 3 (checkpoint) vs 256 (config)",
                                      "tokenizer char with 3 symbols vs byte with 256 symbols"}));
  EXPECT_EQ(model_differences(stored(resolved(3), abc), resolved(3), char_spec("abd")),
            (std::vector<std::string>{"tokenizer char with 3 symbols (checkpoint) vs char with 3 other symbols (config)"}));
}

// The token table's padding is no part of the model: a load re-pads it (its rows past the
// vocabulary are read by nothing), and the resume says so.
TEST(ModelIdentity, AnotherTokenTablePaddingIsTheSameModelRepadded) {
  const std::string abc = char_spec("abc");
  TrainConfig padded = resolved(3);
  padded.model.padded_vocab_size = 128;
  EXPECT_TRUE(model_differences(stored(resolved(3), abc), padded, abc).empty());
  EXPECT_EQ(token_table_repadding(stored(resolved(3), abc), padded),
            "token table re-padded from 64 to 128 rows (its 3 vocabulary rows kept; padding is read by nothing)");
  EXPECT_EQ(token_table_repadding(stored(padded, abc), resolved(3)),
            "token table re-padded from 128 to 64 rows (its 3 vocabulary rows kept; padding is read by nothing)");
  EXPECT_EQ(token_table_repadding(stored(padded, abc), padded), "");
}

// A graph's digest covers its split: a changed split is named as one, not as two digests
// that read the same but for their CRCs; a changed graph is still named as the data.
TEST(ModelIdentity, AGraphsChangedSplitIsNamed) {
  TrainConfig was = resolved(7), now = resolved(7);
  was.split = "0:140,200:500,500:1500";
  now.split = "0:100,200:500,500:1500";
  const std::string graph_a = "graph:2708 nodes,5429 edges,1433 features,7 classes,crc32 4095cc82";
  const std::string graph_b = "graph:2708 nodes,5429 edges,1433 features,7 classes,crc32 63f7f7ff";
  EXPECT_EQ(model_differences(stored(was, graph_a), now, graph_b),
            (std::vector<std::string>{"split '0:140,200:500,500:1500' (checkpoint) vs '0:100,200:500,500:1500' (config)"}));
  const std::string bigger = "graph:3000 nodes,5429 edges,1433 features,7 classes,crc32 12345678";
  EXPECT_EQ(model_differences(stored(was, graph_a), now, bigger),
            (std::vector<std::string>{"split '0:140,200:500,500:1500' (checkpoint) vs '0:100,200:500,500:1500' (config)",
                                      "data " + graph_a + " vs " + bigger}));
  EXPECT_EQ(model_differences(stored(was, graph_a), was, graph_b),
            (std::vector<std::string>{"data " + graph_a + " (checkpoint) vs " + graph_b + " (config)"}));
}

TEST(ModelIdentity, LayoutTrainingKeysAndRecomputeMayDiffer) {
  TrainConfig saved = resolved(256), now = resolved(256);
  saved.tp = 4;
  saved.model.padded_vocab_size = 256;  // what the trainer resolves under tp 4; 0 resolves to 256 too
  saved.zero = 3;
  now.dp = 4;
  now.lr = 0.5;
  now.steps = 5000;
  now.model.recompute = true;
  now.out_dir = "elsewhere";
  EXPECT_TRUE(model_differences(stored(saved, "byte"), now, "byte").empty());
}

// Every file under dir (recursively) with its bytes, and every link with its target.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = fs::relative(e.path(), dir).string();
    if (e.is_symlink()) out[name] = "-> " + fs::read_symlink(e.path()).string();
    else if (e.is_regular_file()) out[name] = testing::read_file(e.path());
    else out[name] = "(directory)";
  }
  return out;
}

TEST(ModelIdentity, ResumeIntoAnotherModelIsRefusedAndWritesNothing) {
  TrainConfig c = tiny_run("another_model");
  c.steps = 2;
  Trainer(c, true).run();  // checkpoint-00000002.safetensors, latest, metrics.jsonl, memory.json
  const std::map<std::string, std::string> before = snapshot(c.out_dir);
  ASSERT_EQ(before.count("metrics.jsonl"), 1u);
  const std::string checkpoint = fs::canonical(fs::path(c.out_dir) / "checkpoint-00000002.safetensors").string();

  TrainConfig other = c;
  other.model.n_layer = 3;
  other.model.n_head = 4;
  other.steps = 4;
  for (const std::string resume : {"latest", "auto"}) {
    other.resume = resume;
    EXPECT_EQ(error_of([&] { Trainer t(other, true); }),
              "checkpoint '" + checkpoint + "' holds a different model: n_layer 2 (checkpoint) vs 3 (config), n_head 2 vs "
              "4; resume with the checkpoint's values or start a new out_dir")
        << "resume = " << resume;
    EXPECT_EQ(snapshot(c.out_dir), before) << "resume = " << resume << " changed the run directory";
  }
  // The same model under other training keys resumes.
  TrainConfig same = c;
  same.resume = "latest";
  same.steps = 4;
  same.lr = 1e-3;
  EXPECT_EQ(Trainer(same, true).step(), 2);
}

}  // namespace
}  // namespace loom::train
