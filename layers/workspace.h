// Workspace<T>: the memory a layer needs only while one of its calls runs, shared by every layer
// of a model. A model's layers run one at a time, so this memory is one layer's, not the sum
// over layers: at GPT-2 small (16 x 1024 tokens, d 768, 12 layers, fp32 activations) the
// gradients of the attention's and the feed-forward's inner activations alone are about 6 GB
// when every layer keeps its own.
#pragma once
#include <cstddef>

#include "kernels/buffer.h"

namespace pn {

template <class T>
struct Workspace {
  Buf<T> qkv;           // an attention's q|k|v where its backward reads them from `saved` instead
  Buf<T> dqkv, dq, dkv, dctx, attn_scratch;  // an attention backward's inner gradients
  Buf<T> dhidden;       // a feed-forward backward's gradient of its hidden layer
  Buf<T> branch;        // a block branch's output, consumed by the residual add that follows

  // The first n elements of b, growing it where it is shorter. It never shrinks, so a later,
  // smaller call keeps the memory and nothing is zeroed again between calls; callers overwrite
  // what they take.
  static T* take(Buf<T>& b, size_t n) {
    if (b.size() < n) b.resize(n);
    return b.data();
  }
};

}  // namespace pn
