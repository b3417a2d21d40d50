// The loss over the output layer in chunks of rows (Embedding::output_loss): whatever the
// chunks, the losses, the gradients and the norms' state are those of the whole logits at once.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gradcheck.h"
#include "layers/embedding.h"
#include "model/lm.h"

namespace pn {
namespace {

TEST(OutputLoss, ChunkRowsFitTheBoundInTilesOf64) {
  EXPECT_EQ(logits_chunk_rows(16384, 33344, kMaxLogits), 1984);  // GPT-2 small: 9 chunks
  EXPECT_EQ(logits_chunk_rows(4096, 10000, kMaxLogits), 4096);   // fits: one chunk
  EXPECT_EQ(logits_chunk_rows(21, 40, 200), 5);                  // fewer than 64 fit: as many
  EXPECT_EQ(logits_chunk_rows(21, 40, 10), 1);                   // at least one row
  EXPECT_EQ(logits_chunk_rows(1000, 8, 8 * 200), 192);
}

// Two micro-batches of the same model in double, the logits whole and in chunks of 5 rows of
// the 21 (the last one of 1 row), with dropout: equal to double rounding.
TEST(OutputLoss, ChunkedLanguageModelIsTheWholeOne) {
  ModelConfig c;
  c.vocab = 37, c.layers = 2, c.dim = 16, c.heads = 2, c.ffn_dim = 32, c.max_len = 16;
  c.dropout = 0.1;
  for (NormOptions* n : {&c.norm_self, &c.norm_ff, &c.norm_final}) n->kind = "power";
  LanguageModel<double> whole(c, 5, nullptr);
  c.max_logits = size_t(whole.embed.logits_ld()) * 5;
  LanguageModel<double> chunked(c, 5, nullptr);
  ASSERT_EQ(logits_chunk_rows(21, whole.embed.logits_ld(), c.max_logits), 5);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, c.vocab - 1);
  for (int micro = 0; micro < 2; ++micro) {
    Batch b;
    b.nseq = 3, b.seq_len = 7;
    for (int i = 0; i < b.rows(); ++i) b.tokens.push_back(tok(rng)), b.targets.push_back(tok(rng));
    b.mask.assign(size_t(b.rows()), 1);
    b.mask[4] = 0;  // a token that neither the loss nor the statistics count
    const k::LossSums w = whole.forward_backward(b, 0.5, 11 + micro);
    const k::LossSums h = chunked.forward_backward(b, 0.5, 11 + micro);
    EXPECT_EQ(chunked.logits.size(), size_t(5) * chunked.embed.logits_ld()) << "one chunk's";
    EXPECT_EQ(h.ntokens, w.ntokens);
    EXPECT_EQ(w.ntokens, 20.0);
    EXPECT_NEAR(h.loss, w.loss, 1e-12 * w.loss);
    EXPECT_NEAR(h.nll, w.nll, 1e-12 * w.nll);
    const k::LossSums we = whole.evaluate(b), he = chunked.evaluate(b);
    EXPECT_NEAR(he.loss, we.loss, 1e-12 * we.loss);
    EXPECT_NE(we.loss, w.loss);  // evaluation: running state, no dropout
  }
  test::expect_same_gradients(chunked.params.grad, whole.params.grad, 1e-12);
  // The logits whole, for sampling: the last position's row of each.
  whole.forward_logits(Batch{1, 2, {5, 6}, {0, 0}, {1, 1}});
  chunked.forward_logits(Batch{1, 2, {5, 6}, {0, 0}, {1, 1}});
  ASSERT_EQ(chunked.logits.size(), whole.logits.size());
  for (size_t i = 0; i < whole.logits.size(); ++i)
    ASSERT_NEAR(chunked.logits[i], whole.logits[i], 1e-12) << i;
}

}  // namespace
}  // namespace pn
