#include "trainer/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "trainer/data.h"

namespace pn {

namespace {

ParallelBatch source_batch(const std::vector<std::vector<int32_t>>& srcs,
                           const std::vector<int64_t>& ids) {
  ParallelBatch b;
  b.nseq = int(ids.size());
  b.src_len = 1;
  for (int64_t i : ids) b.src_len = std::max(b.src_len, int(srcs[i].size()));
  b.src.assign(size_t(b.nseq) * b.src_len, Vocabulary::kPad);
  b.src_mask.assign(b.src.size(), 0);
  for (int s = 0; s < b.nseq; ++s)
    for (size_t t = 0; t < srcs[ids[s]].size(); ++t) {
      b.src[size_t(s) * b.src_len + t] = srcs[ids[s]][t];
      b.src_mask[size_t(s) * b.src_len + t] = 1;
    }
  b.ids = ids;
  return b;
}

int max_target_len(const GenerateOptions& o, size_t src_tokens, int model_positions) {
  // src_tokens counts the source's words (without <eos>); the cap leaves a position for <eos>.
  const int want = int(o.max_len_a * double(src_tokens) + o.max_len_b);
  return std::max(1, std::min(want, model_positions - 1));
}

struct Candidate {
  double score;
  int row;
  int32_t token;
};

}  // namespace

std::vector<Hypothesis> beam_search(TranslationModel<float>& model,
                                    const std::vector<std::vector<int32_t>>& srcs,
                                    const GenerateOptions& o) {
  if (o.beam < 1) throw std::invalid_argument("--beam must be at least 1");
  const int K = o.beam, V = model.config.tgt_vocab;
  const int32_t eos = Vocabulary::kEos, pad = Vocabulary::kPad;
  std::vector<Hypothesis> results(srcs.size());
  // Batches of similar source lengths, at most max_tokens source tokens (padded) each.
  std::vector<int64_t> order(srcs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return srcs[a].size() < srcs[b].size(); });
  std::vector<std::vector<int64_t>> batches;
  for (size_t i = 0; i < order.size();) {
    std::vector<int64_t> ids;
    size_t longest = 0;
    while (i < order.size()) {
      const size_t l = std::max(longest, srcs[order[i]].size());
      if (!ids.empty() && int64_t(l * (ids.size() + 1)) > o.max_tokens) break;
      ids.push_back(order[i++]);
      longest = l;
    }
    batches.push_back(std::move(ids));
  }
  typename TranslationModel<float>::DecodeState st;
  std::vector<float> lp;
  for (const auto& ids : batches) {
    const ParallelBatch b = source_batch(srcs, ids);
    const int S = b.nseq, N = S * K;
    std::vector<int> max_len(S);
    int ML = 1;
    for (int s = 0; s < S; ++s) {
      max_len[s] = max_target_len(o, srcs[ids[s]].size() - 1, model.config.max_len);
      ML = std::max(ML, max_len[s]);
    }
    model.begin_decode(b, K, ML + 1, &st);
    std::vector<int32_t> tokens(N, eos);
    std::vector<double> scores(N, 0.0);
    std::vector<std::vector<int32_t>> seqs(N);
    std::vector<std::vector<Hypothesis>> finished(S);
    std::vector<char> done(S, 0);
    lp.resize(size_t(N) * V);
    std::vector<Candidate> cand;
    std::vector<int32_t> top;
    std::vector<int> from(N);
    std::vector<int32_t> next_tokens(N);
    std::vector<double> next_scores(N);
    for (int step = 0; step <= ML; ++step) {
      model.decode_step(&st, tokens.data(), step, lp.data());
      for (int s = 0; s < S; ++s) {
        for (int k = 0; k < K; ++k) {  // finished sentences keep their rows, unused
          from[s * K + k] = s * K + k;
          next_tokens[s * K + k] = eos;
          next_scores[s * K + k] = scores[s * K + k];
        }
        if (done[s]) continue;
        const bool force_eos = step >= max_len[s];
        cand.clear();
        // At step 0 the K rows of a sentence are identical: only the first one expands.
        for (int k = 0; k < (step == 0 ? 1 : K); ++k) {
          const int r = s * K + k;
          const float* row = lp.data() + size_t(r) * V;
          if (force_eos) {
            cand.push_back({scores[r] + row[eos], r, eos});
            continue;
          }
          // Only a row's 2K best tokens can be among the sentence's 2K best continuations.
          top.clear();
          for (int v = 0; v < V; ++v)
            if (v != pad) top.push_back(v);
          const size_t m = std::min(top.size(), size_t(2 * K));
          std::nth_element(top.begin(), top.begin() + (m - 1), top.end(), [&](int a, int c) {
            return row[a] != row[c] ? row[a] > row[c] : a < c;
          });
          for (size_t i = 0; i < m; ++i) cand.push_back({scores[r] + row[top[i]], r, top[i]});
        }
        const size_t keep = std::min(cand.size(), size_t(2 * K));
        auto better = [](const Candidate& a, const Candidate& c) {
          if (a.score != c.score) return a.score > c.score;
          if (a.row != c.row) return a.row < c.row;
          return a.token < c.token;
        };
        std::partial_sort(cand.begin(), cand.begin() + keep, cand.end(), better);
        int live = 0;
        for (size_t i = 0; i < keep && live < K; ++i) {
          const Candidate& c = cand[i];
          if (c.token == eos) {
            // Only an <eos> among the K best finishes a hypothesis (fairseq's rule).
            if (i < size_t(K) && int(finished[s].size()) < K) {
              Hypothesis h;
              h.tokens = seqs[c.row];
              h.logprob = c.score;
              h.score = c.score / std::pow(double(step + 1), o.lenpen);
              finished[s].push_back(std::move(h));
            }
            continue;
          }
          const int r = s * K + live++;
          from[r] = c.row;
          next_tokens[r] = c.token;
          next_scores[r] = c.score;
        }
        if (int(finished[s].size()) >= K || force_eos || live == 0) done[s] = 1;
      }
      std::vector<std::vector<int32_t>> new_seqs(N);
      for (int r = 0; r < N; ++r) {
        new_seqs[r] = seqs[from[r]];
        new_seqs[r].push_back(next_tokens[r]);
      }
      seqs.swap(new_seqs);
      tokens = next_tokens;
      scores = next_scores;
      if (std::all_of(done.begin(), done.end(), [](char d) { return d != 0; })) break;
      model.reorder(&st, from, step + 1);
    }
    for (int s = 0; s < S; ++s) {
      auto& f = finished[s];
      if (f.empty()) continue;  // cannot happen: <eos> is forced at max_len
      const auto best = std::max_element(f.begin(), f.end(), [](const auto& a, const auto& c) {
        return a.score < c.score;
      });
      results[ids[s]] = *best;
    }
  }
  return results;
}

std::vector<int32_t> greedy_decode_reference(TranslationModel<float>& model,
                                             const std::vector<int32_t>& src, int max_len) {
  const int V = model.config.tgt_vocab;
  std::vector<int32_t> out;
  for (int step = 0; step <= max_len; ++step) {
    ParallelBatch b = source_batch({src}, {0});
    b.tgt_len = step + 1;
    b.prev.assign(size_t(b.tgt_len), Vocabulary::kEos);
    for (int t = 0; t < step; ++t) b.prev[size_t(t) + 1] = out[size_t(t)];
    b.tgt.assign(size_t(b.tgt_len), Vocabulary::kEos);
    b.tgt_mask.assign(size_t(b.tgt_len), 1);
    model.evaluate(b);  // leaves the logits of every position in model.logits
    if (step == max_len) break;
    const float* row = model.logits.data() + size_t(step) * V;
    int32_t best = -1;
    for (int v = 0; v < V; ++v)
      if (v != Vocabulary::kPad && (best < 0 || row[v] > row[best])) best = int32_t(v);
    if (best == Vocabulary::kEos) break;
    out.push_back(best);
  }
  return out;
}

}  // namespace pn
