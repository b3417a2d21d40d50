#include "trainer/sample.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>

namespace pn {

int32_t draw_token(const float* logits, int vocab, double temperature, int top_k, double u) {
  // Candidates: every id, or the top_k largest logits (ties: the lower id first).
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  auto higher = [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  if (temperature <= 0) return *std::min_element(ids.begin(), ids.end(), higher);
  if (top_k > 0 && top_k < vocab) {
    std::partial_sort(ids.begin(), ids.begin() + top_k, ids.end(), higher);
    ids.resize(size_t(top_k));
    std::sort(ids.begin(), ids.end());  // draw in id order, independent of the sort's ties
  }
  // p_i = exp((l_i - max) / T) / sum; the draw is the first id whose cumulative mass exceeds u.
  double mx = -INFINITY;
  for (int32_t i : ids) mx = std::max(mx, double(logits[i]));
  std::vector<double> w(ids.size());
  double sum = 0;
  for (size_t j = 0; j < ids.size(); ++j)
    sum += w[j] = std::exp((logits[ids[j]] - mx) / temperature);
  double acc = 0;
  for (size_t j = 0; j < ids.size(); ++j) {
    acc += w[j] / sum;
    if (u < acc) return ids[j];
  }
  return ids.back();
}

std::vector<TextSample> sample_text(Trainer& trainer, const SampleOptions& o) {
  if (trainer.is_translation())
    throw std::invalid_argument("--sample needs a language model (--arch transformer_lm); "
                                "translate with --eval-only and --gen-subset instead");
  if (o.count < 1) throw std::invalid_argument("--sample must be at least 1");
  if (o.max_len < 1) throw std::invalid_argument("--max-len must be at least 1");
  if (o.temperature < 0) throw std::invalid_argument("--temperature must be >= 0 (0: greedy)");
  if (o.top_k < 0) throw std::invalid_argument("--top-k must be >= 0 (0: the whole vocabulary)");
  LanguageModel<float>& model = trainer.model();
  const Vocabulary& vocab = trainer.corpus().vocab;
  const int V = model.config.vocab, window = model.config.max_len, N = o.count;

  std::vector<int32_t> prompt = {Vocabulary::kEos};
  std::istringstream words(o.prompt);
  std::string prompt_text;
  for (std::string w; words >> w;) {
    prompt.push_back(vocab.id(w));  // as the model sees it: an unknown word is <unk>
    prompt_text += (prompt_text.empty() ? "" : " ") + vocab.words[size_t(prompt.back())];
  }
  std::vector<std::vector<int32_t>> ctx(size_t(N), prompt);
  std::vector<TextSample> out(static_cast<size_t>(N));
  std::vector<bool> done(size_t(N), false);
  std::mt19937_64 rng(o.seed);
  auto uniform = [&] { return double(rng() >> 11) * 0x1.0p-53; };  // [0, 1), 53 bits

  trainer.with_eval_state([&] {
    Batch b;
    std::vector<float> row;
    for (int step = 0; step < o.max_len; ++step) {
      // All contexts have the same length: the last `window` tokens of each, one row each.
      const int len = std::min<int>(window, int(ctx[0].size()));
      b.nseq = N, b.seq_len = len;
      b.tokens.resize(size_t(N) * len);
      b.targets.assign(size_t(N) * len, Vocabulary::kPad);
      b.mask.assign(size_t(N) * len, 1);
      for (int s = 0; s < N; ++s)
        std::copy(ctx[size_t(s)].end() - len, ctx[size_t(s)].end(),
                  b.tokens.begin() + long(size_t(s) * len));
      model.forward_logits(b);
      bool all_done = true;
      for (int s = 0; s < N; ++s) {
        const double u = uniform();  // one draw per row, finished or not: rows stay independent
        if (done[size_t(s)]) {
          ctx[size_t(s)].push_back(Vocabulary::kEos);
          continue;
        }
        const float* last =
            model.logits.data() + (size_t(s) * len + size_t(len - 1)) * model.embed.logits_ld();
        row.resize(size_t(V));
        copy_to_host(row.data(), last, size_t(V) * sizeof(float));  // the model's device
        synchronize();
        row[Vocabulary::kPad] = -INFINITY;  // padding is never a token of the text
        const int32_t t = draw_token(row.data(), V, o.temperature, o.top_k, u);
        ctx[size_t(s)].push_back(t);
        out[size_t(s)].tokens.push_back(t);
        if (t == Vocabulary::kEos) done[size_t(s)] = true;
        all_done = all_done && done[size_t(s)];
      }
      if (all_done) break;
    }
  });
  for (TextSample& s : out) {
    s.text = prompt_text;
    for (int32_t t : s.tokens)
      if (t != Vocabulary::kEos) s.text += (s.text.empty() ? "" : " ") + vocab.words[size_t(t)];
  }
  return out;
}

int print_samples(const Options& opt, Trainer& trainer, int rank) {
  if (!trainer.restored())
    throw std::invalid_argument("--sample needs a checkpoint: give --restore-file DIR or a "
                                "--save-dir that holds one");
  SampleOptions o;
  o.count = opt.sample;
  o.prompt = opt.prompt;
  o.temperature = opt.temperature;
  o.top_k = opt.top_k;
  o.max_len = opt.max_len;
  o.seed = opt.seed;
  const std::vector<TextSample> samples = sample_text(trainer, o);
  if (rank == 0)
    for (size_t i = 0; i < samples.size(); ++i)
      std::printf("sample %zu | %s\n", i + 1, samples[i].text.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace pn
