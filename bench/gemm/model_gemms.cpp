#include "bench/gemm/model_gemms.h"

#include <stdexcept>

namespace pnbench {
namespace {

// Adds the shape, or its count to an identical shape of the same class already listed (same
// work, timed once); the layer names are joined with '+'.
void add(std::vector<Gemm>& list, const std::string& layer, const char* pass, const char* kind,
         bool ta, bool tb, int m, int n, int k, int count) {
  for (Gemm& g : list) {
    if (g.ta != ta || g.tb != tb || g.m != m || g.n != n || g.k != k) continue;
    if (std::string(g.kind) != kind) continue;
    g.count += count;
    const std::string suffix = std::string(" ") + pass;
    const std::string head = g.name.substr(0, g.name.size() - suffix.size());
    if (("+" + head + "+").find("+" + layer + "+") == std::string::npos)
      g.name = head + "+" + layer + suffix;
    return;
  }
  list.push_back({layer + " " + pass, kind, ta, tb, m, n, k, count});
}

// Linear(in, out) on `rows` rows (layers/linear.cpp): y = x W^T, dx = dy W, dW += dy^T x.
// The tied output layer is the same with in = d, out = vocabulary (layers/embedding.cpp).
void linear(std::vector<Gemm>& list, const std::string& layer, const char* kind, int in, int out,
            int rows, int count) {
  add(list, layer, "fwd", kind, false, true, rows, out, in, count);
  add(list, layer, "dX", kind, false, false, rows, in, out, count);
  add(list, layer, "dW", kind, true, false, out, in, rows, count);
}

// model/lm.cpp: blocks of fused q/k/v projection, out_proj, fc1, fc2; tied output layer.
ModelGemms lm(const std::string& name, int blocks, int d, int ffn, int vocab, int tokens) {
  ModelGemms g{name,
               std::to_string(tokens) + " tokens, " + std::to_string(blocks) + " blocks, d " +
                   std::to_string(d) + ", ffn " + std::to_string(ffn) + ", vocabulary " +
                   std::to_string(vocab) + " (tied output layer)",
               {}};
  linear(g.gemms, "qkv_proj", "attn", d, 3 * d, tokens, blocks);
  linear(g.gemms, "out_proj", "attn", d, d, tokens, blocks);
  linear(g.gemms, "fc1", "ffn", d, ffn, tokens, blocks);
  linear(g.gemms, "fc2", "ffn", ffn, d, tokens, blocks);
  linear(g.gemms, "output", "output", d, vocab, tokens, 1);
  return g;
}

// model/translation.cpp: encoder blocks (self-attention, FFN), decoder blocks (self-attention,
// cross-attention with q_proj on the target and kv_proj on the encoder output, FFN).
ModelGemms translation(const std::string& name, int enc, int dec, int d, int ffn, int vocab,
                       int src_rows, int tgt_rows) {
  ModelGemms g{name,
               std::to_string(src_rows) + " source and " + std::to_string(tgt_rows) +
                   " target rows, " + std::to_string(enc) + "+" + std::to_string(dec) +
                   " blocks, d " + std::to_string(d) + ", ffn " + std::to_string(ffn) +
                   ", joint vocabulary " + std::to_string(vocab) + " (tied output layer)",
               {}};
  linear(g.gemms, "qkv_proj", "attn", d, 3 * d, src_rows, enc);
  linear(g.gemms, "qkv_proj", "attn", d, 3 * d, tgt_rows, dec);
  linear(g.gemms, "out_proj", "attn", d, d, src_rows, enc);
  linear(g.gemms, "out_proj", "attn", d, d, tgt_rows, 2 * dec);  // self and cross
  linear(g.gemms, "q_proj", "attn", d, d, tgt_rows, dec);
  linear(g.gemms, "kv_proj", "attn", d, 2 * d, src_rows, dec);
  linear(g.gemms, "fc1", "ffn", d, ffn, src_rows, enc);
  linear(g.gemms, "fc1", "ffn", d, ffn, tgt_rows, dec);
  linear(g.gemms, "fc2", "ffn", ffn, d, src_rows, enc);
  linear(g.gemms, "fc2", "ffn", ffn, d, tgt_rows, dec);
  linear(g.gemms, "output", "output", d, vocab, tgt_rows, 1);
  return g;
}

}  // namespace

// Vocabularies as pntrain builds them (<pad>, <eos>, <unk> + words): PTB's train.txt gives
// 10001; IWSLT14 de-en trains on valid (configs/iwslt_small.ini), joint BPE: 9779.
// Translation batches hold at most max-tokens padded rows per side: 2048 is the upper bound.
ModelGemms model_gemms(const std::string& name) {
  if (name == "ptb_small") return lm(name, 2, 256, 1024, 10001, 2048);
  if (name == "ptb_wide") return lm(name, 6, 512, 2048, 10001, 2048);
  if (name == "iwslt_small") return translation(name, 3, 3, 128, 256, 9779, 2048, 2048);
  throw std::invalid_argument("unknown model '" + name +
                              "' (known: ptb_small, ptb_wide, iwslt_small)");
}

}  // namespace pnbench
