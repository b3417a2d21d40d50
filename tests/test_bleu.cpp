// Corpus BLEU against hand-computed values (multi-bleu.perl's definition, trainer/bleu.h).
#include <gtest/gtest.h>

#include <cmath>

#include "trainer/bleu.h"

namespace pn {
namespace {

TEST(Bleu, PerfectMatchIs100) {
  const BleuStats s = corpus_bleu({"the cat sat on the mat", "a b c d"},
                                  {"the cat sat on the mat", "a b c d"});
  EXPECT_DOUBLE_EQ(s.bleu(), 100.0);
  EXPECT_DOUBLE_EQ(s.brevity_penalty(), 1.0);
}

TEST(Bleu, OneWrongWordByHand) {
  // hyp "a b c d e" vs ref "a b c d f": p1 = 4/5, p2 = 3/4, p3 = 2/3, p4 = 1/2, c = r = 5,
  // BLEU = 100 * (4/5 * 3/4 * 2/3 * 1/2)^(1/4) = 100 * 0.2^0.25 = 66.874...
  const BleuStats s = corpus_bleu({"a b c d e"}, {"a b c d f"});
  EXPECT_DOUBLE_EQ(s.precision(0), 0.8);
  EXPECT_DOUBLE_EQ(s.precision(3), 0.5);
  EXPECT_NEAR(s.bleu(), 100.0 * std::pow(0.2, 0.25), 1e-9);
}

TEST(Bleu, BrevityPenaltyWhenTheHypothesisIsShorter) {
  // Every n-gram of the 6-word hypothesis is in the 8-word reference: precisions are 1 and
  // BLEU = 100 * exp(1 - 8/6) = 71.653...
  const BleuStats s = corpus_bleu({"the cat sat on the mat"}, {"the cat sat on the mat today ok"});
  for (int n = 0; n < 4; ++n) EXPECT_DOUBLE_EQ(s.precision(n), 1.0);
  EXPECT_NEAR(s.brevity_penalty(), std::exp(1.0 - 8.0 / 6.0), 1e-12);
  EXPECT_NEAR(s.bleu(), 100.0 * std::exp(-1.0 / 3.0), 1e-9);
  // A longer hypothesis is not rewarded: BP = 1.
  EXPECT_DOUBLE_EQ(corpus_bleu({"a b c d e f"}, {"a b c d e"}).brevity_penalty(), 1.0);
}

TEST(Bleu, ZeroFourGramMatchesGiveZero) {
  // hyp 4-grams "a b c x", "b c x b", "c x b c", "x b c d" are not in "a b c d b c d", while
  // unigrams to trigrams match: multi-bleu.perl has no smoothing, so BLEU is 0.
  const BleuStats s = corpus_bleu({"a b c x b c d"}, {"a b c d b c d"});
  EXPECT_GT(s.precision(2), 0.0);
  EXPECT_EQ(s.precision(3), 0.0);
  EXPECT_EQ(s.bleu(), 0.0);
}

TEST(Bleu, ClippingAndCorpusSums) {
  // Clipping: "the" x7 against a reference holding it twice gives p1 = 2/7.
  EXPECT_DOUBLE_EQ(corpus_bleu({"the the the the the the the"}, {"the cat is on the mat"})
                       .precision(0),
                   2.0 / 7.0);
  // Corpus BLEU sums counts over sentences before dividing (not a mean of sentence BLEUs):
  // sentence 1 as in OneWrongWordByHand, sentence 2 perfect with 5 words:
  // p1 = 9/10, p2 = 7/8, p3 = 5/6, p4 = 3/4.
  const BleuStats s = corpus_bleu({"a b c d e", "v w x y z"}, {"a b c d f", "v w x y z"});
  const double expect = 100.0 * std::pow(0.9 * 7.0 / 8 * 5.0 / 6 * 0.75, 0.25);
  EXPECT_NEAR(s.bleu(), expect, 1e-9);
}

TEST(Bleu, LowercaseOptionAndBpeRemoval) {
  EXPECT_EQ(corpus_bleu({"The Cat"}, {"the cat"}).bleu(), 0.0);
  EXPECT_DOUBLE_EQ(corpus_bleu({"The Cat sat"}, {"the cat sat"}, /*lowercase=*/true).precision(0),
                   1.0);
  EXPECT_EQ(remove_bpe("es ist diese pyrami@@ de ."), "es ist diese pyramide .");
  EXPECT_EQ(remove_bpe("two-@@ to-@@ three"), "two-to-three");
  EXPECT_EQ(remove_bpe("dangling@@"), "dangling");  // fairseq: (line + " ").replace(...)
  EXPECT_THROW(corpus_bleu({"a"}, {}), std::invalid_argument);
}

}  // namespace
}  // namespace pn
