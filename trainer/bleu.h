// Corpus BLEU as Moses' multi-bleu.perl computes it (the IWSLT convention of fairseq papers):
// over the whole corpus, for n = 1..4, clipped n-gram matches m_n and hypothesis n-grams h_n are
// summed; p_n = m_n / h_n; BP = exp(1 - r/c) when the hypothesis length c < reference length r,
// else 1; BLEU = 100 * BP * exp(mean_n log p_n), and 0 when any p_n is 0 (no smoothing).
// Tokens are whitespace-separated; `lowercase` folds ASCII case first (multi-bleu.perl -lc).
#pragma once
#include <string>
#include <vector>

namespace pn {

struct BleuStats {
  double matches[4] = {0, 0, 0, 0}, totals[4] = {0, 0, 0, 0};
  double hyp_len = 0, ref_len = 0;
  void add(const std::vector<std::string>& hyp, const std::vector<std::string>& ref);
  double precision(int n) const { return totals[n] > 0 ? matches[n] / totals[n] : 0; }
  double brevity_penalty() const;
  double bleu() const;  // 0..100
  std::string summary() const;  // "BLEU = 27.31, 60.1/33.0/20.2/12.9 (BP=1.000, ratio=1.010, ...)"
};

std::vector<std::string> bleu_tokens(const std::string& line, bool lowercase);
// Corpus BLEU of hypothesis lines against reference lines (one reference each).
BleuStats corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                      bool lowercase = false);
// Removes subword-nmt continuation markers: "pyrami@@ de" -> "pyramide" (fairseq --remove-bpe).
std::string remove_bpe(const std::string& line, const std::string& marker = "@@ ");

}  // namespace pn
