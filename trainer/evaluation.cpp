// Evaluation: the loss of a split over every rank's share with the evaluation's norm state, and
// beam-search generation with the corpus BLEU of all ranks' sentences.
#include <algorithm>

#include "trainer/trainer.h"

namespace pn {

void Trainer::with_eval_state(const std::function<void()>& fn) {
  // Rank-local norm state (PN, local BN/PN-V) differs across ranks: evaluate every share with
  // rank 0's state (or the mean over ranks), then give each rank its own state back.
  std::vector<std::vector<double>> own;
  const auto norms = this->norms();
  if (comm_.size() > 1) {
    for (Norm<float>* n : norms)
      for (const StateTensor& t : n->state()) {
        own.push_back(read_state(t));
        std::vector<double> v = own.back();
        if (opt_.pn_eval_state == EvalState::mean) {
          comm_.allreduce_sum(v.data(), t.n);
          for (size_t i = 0; i < t.n; ++i) v[i] /= comm_.size();
        } else {
          comm_.broadcast(v.data(), t.n * sizeof(double), 0);
        }
        write_state(t, v.data());
      }
  }
  fn();
  size_t k = 0;
  for (Norm<float>* n : norms)
    for (const StateTensor& t : n->state())
      if (k < own.size()) write_state(t, own[k].data()), ++k;
}

namespace {
EvalResult per_token(const double sums[3]) {
  EvalResult e;
  e.ntokens = sums[2];
  e.loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
  e.nll = sums[2] > 0 ? sums[1] / sums[2] : 0;
  return e;
}
}  // namespace

EvalResult Trainer::evaluate(const TokenStream& stream) {
  double sums[3] = {0, 0, 0};
  Buf<double> dev_sums(3, 0.0);  // read once, after the split
  with_eval_state([&] {
    SampleSet set(stream, opt_.tokens_per_sample, /*keep_tail=*/true);
    int64_t begin, end;
    rank_share(set.count, comm_.rank(), comm_.size(), &begin, &end);
    const int64_t per_batch = std::max(1, opt_.max_tokens / opt_.tokens_per_sample);
    Batch batch;
    std::vector<int64_t> ids;
    for (int64_t s = begin; s < end; s += per_batch) {
      if (watchdog_) watchdog_->beat("evaluation");
      ids.clear();
      for (int64_t i = s; i < std::min(end, s + per_batch); ++i) ids.push_back(i);
      set.make_batch(ids, &batch);
      model().evaluate(batch, dev_sums.data());
    }
    const std::vector<double> h = dev_sums.to_host();
    std::copy(h.begin(), h.end(), sums);
  });
  comm_.allreduce_sum(sums, 3);
  return per_token(sums);
}

EvalResult Trainer::evaluate(const ParallelSplit& split) {
  // Length-sorted batches of --max-tokens; rank r takes a contiguous share of them.
  double sums[3] = {0, 0, 0};
  Buf<double> dev_sums(3, 0.0);
  with_eval_state([&] {
    const auto batches = length_batches(split, opt_.max_tokens);
    int64_t begin, end;
    rank_share(int64_t(batches.size()), comm_.rank(), comm_.size(), &begin, &end);
    ParallelBatch batch;
    for (int64_t i = begin; i < end; ++i) {
      if (watchdog_) watchdog_->beat("evaluation");
      make_parallel_batch(split, batches[size_t(i)], &batch);
      translation_model().evaluate(batch, dev_sums.data());
    }
    const std::vector<double> h = dev_sums.to_host();
    std::copy(h.begin(), h.end(), sums);
  });
  comm_.allreduce_sum(sums, 3);
  return per_token(sums);
}

GenerateResult Trainer::generate(const ParallelSplit& split, const GenerateOptions& g,
                                 bool remove_bpe_markers, bool lowercase) {
  GenerateResult out;
  const int64_t n = opt_.gen_max_sentences > 0
                        ? std::min<int64_t>(opt_.gen_max_sentences, int64_t(split.size()))
                        : int64_t(split.size());
  int64_t begin, end;
  rank_share(n, comm_.rank(), comm_.size(), &begin, &end);
  out.first = begin;
  const std::vector<std::vector<int32_t>> srcs(split.src.begin() + begin,
                                               split.src.begin() + end);
  std::vector<Hypothesis> hyps;
  with_eval_state([&] {
    hyps = beam_search(translation_model(), srcs, g);  // on the model's device
  });
  const Vocabulary& tv = parallel_corpus().tgt_vocab;
  for (int64_t i = begin; i < end; ++i) {
    std::string line;
    for (int32_t t : hyps[size_t(i - begin)].tokens)
      line += (line.empty() ? "" : " ") + tv.words[size_t(t)];
    std::string ref = split.tgt_text[size_t(i)];
    if (remove_bpe_markers) {
      line = remove_bpe(line, opt_.remove_bpe.empty() ? "@@ " : opt_.remove_bpe);
      ref = remove_bpe(ref, opt_.remove_bpe.empty() ? "@@ " : opt_.remove_bpe);
    }
    out.bleu.add(bleu_tokens(line, lowercase), bleu_tokens(ref, lowercase));
    out.hyps.push_back(std::move(line));
  }
  // BLEU's sufficient statistics add over sentences, so the corpus score is exact across ranks.
  double stats[10];
  for (int i = 0; i < 4; ++i) stats[i] = out.bleu.matches[i], stats[4 + i] = out.bleu.totals[i];
  stats[8] = out.bleu.hyp_len, stats[9] = out.bleu.ref_len;
  comm_.allreduce_sum(stats, 10);
  for (int i = 0; i < 4; ++i) out.bleu.matches[i] = stats[i], out.bleu.totals[i] = stats[4 + i];
  out.bleu.hyp_len = stats[8], out.bleu.ref_len = stats[9];
  return out;
}

}  // namespace pn
