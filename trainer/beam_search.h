// Batched beam search for the translation model, as fairseq's SequenceGenerator does it:
// every sentence keeps `beam` live hypotheses; at each step the 2*beam best continuations
// (cumulative log-probability) of each sentence are ranked; an <eos> among the first `beam` of
// them finishes a hypothesis with score = sum of log-probs / length^lenpen (length counts the
// <eos>); the best non-<eos> ones continue. A sentence is done when `beam` hypotheses have
// finished; at max_len steps every live hypothesis is finished with <eos>. <pad> is never
// produced. With beam 1 this is greedy decoding.
#pragma once
#include <cstdint>
#include <vector>

#include "model/translation.h"

namespace pn {

struct GenerateOptions {
  int beam = 5;
  double lenpen = 1.0;
  double max_len_a = 0, max_len_b = 200;  // max target length = a * source length + b
  int max_tokens = 4096;                  // source tokens per decoding batch (times beam rows)
};

struct Hypothesis {
  std::vector<int32_t> tokens;  // without the final <eos>
  double score = 0;             // normalised: log-prob sum / length^lenpen
  double logprob = 0;
};

// Best hypothesis of each source sentence (srcs[i] ends in <eos>), in input order.
std::vector<Hypothesis> beam_search(TranslationModel<float>& model,
                                    const std::vector<std::vector<int32_t>>& srcs,
                                    const GenerateOptions& o);
// Greedy decoding by full forward passes over the growing prefix (no incremental caches): the
// reference that beam_search with beam 1 must reproduce.
std::vector<int32_t> greedy_decode_reference(TranslationModel<float>& model,
                                             const std::vector<int32_t>& src, int max_len);

}  // namespace pn
