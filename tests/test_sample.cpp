// Text from a language model (trainer/sample.h): the draw's temperature and top-k, and samples
// that are a function of the seed.
#include <glog/logging.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "lm_fixtures.h"
#include "trainer/sample.h"

namespace pn {
namespace {

TEST(Sample, DrawFollowsTemperatureAndTopK) {
  const float logits[3] = {0.0f, float(std::log(3.0)), -1.0f};
  // Temperature 1: p = (1, 3, e^-1) / (4 + e^-1); cumulative 0.229, 0.916, 1.
  EXPECT_EQ(draw_token(logits, 3, 1.0, 0, 0.20), 0);
  EXPECT_EQ(draw_token(logits, 3, 1.0, 0, 0.30), 1);
  EXPECT_EQ(draw_token(logits, 3, 1.0, 0, 0.95), 2);
  // Top-2 drops id 2: p = (0.25, 0.75).
  EXPECT_EQ(draw_token(logits, 3, 1.0, 2, 0.24), 0);
  EXPECT_EQ(draw_token(logits, 3, 1.0, 2, 0.99), 1);
  // Top-1 and temperature 0 always give the most likely token.
  for (double u : {0.0, 0.5, 0.999}) {
    EXPECT_EQ(draw_token(logits, 3, 1.0, 1, u), 1);
    EXPECT_EQ(draw_token(logits, 3, 0.0, 0, u), 1);
  }
  // A high temperature flattens: p close to 1/3 each, so u = 0.34 falls on id 1.
  EXPECT_EQ(draw_token(logits, 3, 1e6, 0, 0.34), 1);
}

TEST(Sample, SamplesAreAFunctionOfTheSeedAndContinueThePrompt) {
  FLAGS_minloglevel = 1;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pn_sample_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto comm = make_single_communicator();
  Options o = test::small_lm();
  o.norm_self = o.norm_ff = o.norm_final = "power";
  o.max_update = 8;
  o.save_dir = dir.string();
  Trainer(o, *comm, test::builtin()).train();
  Trainer t(o, *comm, test::builtin());  // restores the last checkpoint
  ASSERT_TRUE(t.restored());
  SampleOptions s;
  s.count = 4;
  s.prompt = "w5 w17 nosuchword";
  s.max_len = 12;
  s.top_k = 20;
  s.seed = 7;
  const auto a = sample_text(t, s), b = sample_text(t, s);
  s.seed = 8;
  const auto c = sample_text(t, s);
  ASSERT_EQ(a.size(), 4u);
  bool any_differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(a[i].text, b[i].text);
    EXPECT_GE(a[i].tokens.size(), 1u);
    EXPECT_LE(a[i].tokens.size(), 12u);
    // The prompt as the model sees it: a word outside the vocabulary is <unk>.
    EXPECT_EQ(a[i].text.rfind("w5 w17 <unk> ", 0), 0u) << a[i].text;
    any_differs = any_differs || a[i].tokens != c[i].tokens;
  }
  EXPECT_TRUE(any_differs);  // another seed, other text
  s.temperature = 0;         // greedy: every sample the same
  const auto g = sample_text(t, s);
  for (const auto& x : g) EXPECT_EQ(x.tokens, g[0].tokens);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pn
