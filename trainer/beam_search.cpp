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
    // Rows a*K .. a*K+K-1 of the decoder state belong to sentence active[a]; a finished
    // sentence leaves the state, so the batch shrinks as sentences end.
    std::vector<int> active(S);
    std::iota(active.begin(), active.end(), 0);
    std::vector<int32_t> tokens(N, eos);
    std::vector<double> scores(N, 0.0);
    std::vector<std::vector<int32_t>> seqs(N);
    std::vector<std::vector<Hypothesis>> finished(S);
    std::vector<char> done(S, 0);
    lp.resize(size_t(N) * V);
    std::vector<Candidate> cand;
    std::vector<int32_t> top;
    std::vector<int> from(N), select;
    std::vector<int32_t> next_tokens(N);
    std::vector<double> next_scores(N);
    const double kDead = -std::numeric_limits<double>::infinity();
    for (int step = 0; step <= ML; ++step) {
      const int A = int(active.size());
      model.decode_step(&st, tokens.data(), step, lp.data());
      for (int a = 0; a < A; ++a) {
        const int s = active[a];
        for (int k = 0; k < K; ++k) {  // rows left unfilled below never win
          from[a * K + k] = a * K + k;
          next_tokens[a * K + k] = eos;
          next_scores[a * K + k] = kDead;
        }
        const bool force_eos = step >= max_len[s];
        cand.clear();
        // At step 0 the K rows of a sentence are identical: only the first one expands.
        for (int k = 0; k < (step == 0 ? 1 : K); ++k) {
          const int r = a * K + k;
          if (scores[r] == kDead) continue;
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
          std::nth_element(top.begin(), top.begin() + (m - 1), top.end(), [&](int x, int y) {
            return row[x] != row[y] ? row[x] > row[y] : x < y;
          });
          for (size_t i = 0; i < m; ++i) cand.push_back({scores[r] + row[top[i]], r, top[i]});
        }
        const size_t keep = std::min(cand.size(), size_t(2 * K));
        auto better = [](const Candidate& x, const Candidate& y) {
          if (x.score != y.score) return x.score > y.score;
          if (x.row != y.row) return x.row < y.row;
          return x.token < y.token;
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
          const int r = a * K + live++;
          from[r] = c.row;
          next_tokens[r] = c.token;
          next_scores[r] = c.score;
        }
        if (int(finished[s].size()) >= K || force_eos || live == 0) done[s] = 1;
      }
      // The next state: the unfinished sentences' new beams, in order.
      select.clear();
      std::vector<int> still;
      for (int a = 0; a < A; ++a)
        if (!done[active[a]]) {
          still.push_back(active[a]);
          for (int k = 0; k < K; ++k) select.push_back(a * K + k);
        }
      if (still.empty()) break;
      const int rows = int(select.size());
      std::vector<std::vector<int32_t>> new_seqs(rows);
      std::vector<int> state_from(rows);
      tokens.resize(rows), scores.resize(rows);
      for (int r = 0; r < rows; ++r) {
        const int old = select[r];
        state_from[r] = from[old];
        new_seqs[r] = seqs[from[old]];
        new_seqs[r].push_back(next_tokens[old]);
        tokens[r] = next_tokens[old];
        scores[r] = next_scores[old];
      }
      seqs.swap(new_seqs);
      active.swap(still);
      model.reorder(&st, state_from, step + 1);
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
    model.forward_logits(b);
    if (step == max_len) break;
    const float* row = model.logits.data() + size_t(step) * model.target_embedding().logits_ld();
    int32_t best = -1;
    for (int v = 0; v < V; ++v)
      if (v != Vocabulary::kPad && (best < 0 || row[v] > row[best])) best = int32_t(v);
    if (best == Vocabulary::kEos) break;
    out.push_back(best);
  }
  return out;
}

}  // namespace pn
