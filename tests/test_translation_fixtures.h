// Shared fixtures of the translation tests: a toy parallel corpus (the target spells the source
// word by word in another alphabet, swapping each pair of neighbours) and a tiny
// encoder-decoder configuration.
#pragma once
#include <random>
#include <string>

#include "trainer/options.h"
#include "trainer/translation_data.h"

namespace pn::test {

// n lines of 3..10 words: source "a<i> ...", target "b<i> ..." with neighbours 0-1, 2-3, ...
// swapped (a local reordering the cross-attention must learn).
inline void toy_pairs(uint64_t seed, int n, std::string* src, std::string* tgt) {
  std::mt19937_64 rng(seed);
  for (int l = 0; l < n; ++l) {
    const int len = 3 + int(rng() % 8);
    std::vector<int> w(len);
    for (int& x : w) x = int(rng() % 12);
    for (int i = 0; i < len; ++i) *src += (i ? " a" : "a") + std::to_string(w[i]);
    for (int i = 0; i < len; ++i) {
      const int j = (i % 2 == 0) ? (i + 1 < len ? i + 1 : i) : i - 1;
      *tgt += (i ? " b" : "b") + std::to_string(w[j]);
    }
    *src += "\n", *tgt += "\n";
  }
}

inline const ParallelCorpus& toy_corpus() {
  static const ParallelCorpus c = [] {
    std::string s[3], t[3];
    toy_pairs(1, 240, &s[0], &t[0]);
    toy_pairs(2, 30, &s[1], &t[1]);
    toy_pairs(3, 30, &s[2], &t[2]);
    return parallel_corpus_from_text(s[0], t[0], s[1], t[1], s[2], t[2], /*joint=*/true);
  }();
  return c;
}

// 1+1 layers, d 16, 2 heads, ffn 32, no dropout, shared embeddings, quiet.
inline Options small_mt() {
  Options o;
  o.arch = Arch::transformer;
  o.share_all_embeddings = true;
  o.encoder_layers = o.decoder_layers = 1;
  o.encoder_embed_dim = o.decoder_embed_dim = 16;
  o.encoder_attention_heads = o.decoder_attention_heads = 2;
  o.encoder_ffn_embed_dim = o.decoder_ffn_embed_dim = 32;
  o.dropout = 0.0;
  o.max_tokens = 128;
  o.max_update = 6;
  o.warmup_updates = 2;
  o.lr = 3e-3;
  o.validate_interval_updates = 0;
  o.log_interval = 1000;
  return o;
}

}  // namespace pn::test
