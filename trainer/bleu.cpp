#include "trainer/bleu.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <stdexcept>

namespace pn {

std::vector<std::string> bleu_tokens(const std::string& line, bool lowercase) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) {
    if (lowercase)
      for (char& c : w) c = char(std::tolower(static_cast<unsigned char>(c)));
    out.push_back(std::move(w));
  }
  return out;
}

void BleuStats::add(const std::vector<std::string>& hyp, const std::vector<std::string>& ref) {
  hyp_len += double(hyp.size());
  ref_len += double(ref.size());
  for (int n = 1; n <= 4; ++n) {
    // Clipping: a hypothesis n-gram matches at most as often as the reference holds it.
    std::map<std::vector<std::string>, int> ref_counts;
    for (size_t i = 0; i + n <= ref.size(); ++i)
      ++ref_counts[std::vector<std::string>(ref.begin() + i, ref.begin() + i + n)];
    std::map<std::vector<std::string>, int> hyp_counts;
    for (size_t i = 0; i + n <= hyp.size(); ++i)
      ++hyp_counts[std::vector<std::string>(hyp.begin() + i, hyp.begin() + i + n)];
    for (const auto& [gram, count] : hyp_counts) {
      auto it = ref_counts.find(gram);
      if (it != ref_counts.end()) matches[n - 1] += std::min(count, it->second);
    }
    if (hyp.size() >= size_t(n)) totals[n - 1] += double(hyp.size() - n + 1);
  }
}

double BleuStats::brevity_penalty() const {
  if (hyp_len <= 0) return 0;
  return hyp_len < ref_len ? std::exp(1.0 - ref_len / hyp_len) : 1.0;
}

double BleuStats::bleu() const {
  double log_sum = 0;
  for (int n = 0; n < 4; ++n) {
    if (matches[n] <= 0 || totals[n] <= 0) return 0;  // multi-bleu.perl: no smoothing
    log_sum += std::log(matches[n] / totals[n]);
  }
  return 100.0 * brevity_penalty() * std::exp(log_sum / 4);
}

std::string BleuStats::summary() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "BLEU = %.2f, %.1f/%.1f/%.1f/%.1f (BP=%.3f, ratio=%.3f, hyp_len=%.0f, "
                "ref_len=%.0f)",
                bleu(), 100 * precision(0), 100 * precision(1), 100 * precision(2),
                100 * precision(3), brevity_penalty(), ref_len > 0 ? hyp_len / ref_len : 0.0,
                hyp_len, ref_len);
  return buf;
}

BleuStats corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                      bool lowercase) {
  if (hyps.size() != refs.size())
    throw std::invalid_argument("BLEU needs one reference per hypothesis: " +
                                std::to_string(hyps.size()) + " hypotheses, " +
                                std::to_string(refs.size()) + " references");
  BleuStats s;
  for (size_t i = 0; i < hyps.size(); ++i)
    s.add(bleu_tokens(hyps[i], lowercase), bleu_tokens(refs[i], lowercase));
  return s;
}

std::string remove_bpe(const std::string& line, const std::string& marker) {
  // fairseq: (line + " ").replace(marker, "").rstrip(); a marker at the very end is dropped too.
  std::string s = line + " ", out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, marker.size(), marker) == 0) {
      i += marker.size();
    } else {
      out += s[i++];
    }
  }
  while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) out.pop_back();
  return out;
}

}  // namespace pn
