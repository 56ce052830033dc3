// The ranks' agreement texts: what they hold (the resolved config, the vocabulary, the build)
// and how differences are named: the ranks holding each value, keys in config order.
#include <gtest/gtest.h>

#include "loom/train/rank_agreement.hpp"

namespace loom::train {
namespace {

TEST(RankAgreement, TextHoldsTheConfigTheVocabularyAndTheBuild) {
  TrainConfig c;
  c.model.vocab_size = 65;
  const std::string text = agreement_text(c);
  EXPECT_NE(text.find("n_layer = " + std::to_string(c.model.n_layer)), std::string::npos) << text;
  EXPECT_NE(text.find("comm_timeout = 300"), std::string::npos) << text;
  EXPECT_NE(text.find("vocab_size = 65"), std::string::npos) << text;
  EXPECT_NE(text.find("build = \"" + build_id() + "\""), std::string::npos) << text;
  EXPECT_FALSE(build_id().empty());
}

TEST(RankAgreement, NamesTheRanksAndTheKeysThatDiffer) {
  TrainConfig a, b;
  b.model.n_layer = a.model.n_layer + 2;
  b.lr = 0.5;
  const std::string ta = agreement_text(a), tb = agreement_text(b);
  EXPECT_TRUE(disagreements({ta, ta, ta}).empty());
  const std::vector<std::string> d = disagreements({ta, tb, ta, ta, tb});
  ASSERT_EQ(d.size(), 2u);
  const std::string n = std::to_string(a.model.n_layer), m = std::to_string(b.model.n_layer);
  EXPECT_EQ(d[0], "ranks 0 and 2-3 have n_layer = " + n + ", ranks 1 and 4 have n_layer = " + m);
  EXPECT_EQ(d[1], "ranks 0 and 2-3 have lr = 0.001, ranks 1 and 4 have lr = 0.5");
  EXPECT_EQ(disagreements({tb, ta}).front(), "rank 0 has n_layer = " + m + ", rank 1 has n_layer = " + n);
}

}  // namespace
}  // namespace loom::train
