// Shared fixtures of the trainer-level tests: a small LM that trains in milliseconds and the
// builtin corpus, built once per test binary.
#pragma once
#include "trainer/data.h"
#include "trainer/options.h"

namespace pn::test {

// 2 blocks, d 32, 4 heads, ffn 64, 16-token samples, no dropout, no validation, quiet logs.
inline Options small_lm() {
  Options o;
  o.tokens_per_sample = 16;
  o.decoder_layers = 2;
  o.decoder_embed_dim = 32;
  o.decoder_attention_heads = 4;
  o.decoder_ffn_embed_dim = 64;
  o.dropout = 0.0;
  o.max_update = 6;
  o.warmup_updates = 2;
  o.lr = 3e-3;
  o.validate_interval_updates = 0;
  o.log_interval = 1000;
  return o;
}

inline const Corpus& builtin() {
  static const Corpus c = builtin_corpus();
  return c;
}

}  // namespace pn::test
