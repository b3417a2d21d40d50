#include "trainer/translation_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "trainer/fairseq_data.h"

namespace fs = std::filesystem;

namespace pn {

namespace {

std::vector<std::string> read_lines(const fs::path& p, const std::string& hint) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read '" + p.string() + "': " + hint);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    lines.push_back(l);
  }
  return lines;
}

std::vector<std::string> text_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The Vocabulary conventions of data.cpp: <pad>, <eos>, <unk>, then words by falling frequency
// (ties in byte order), so the same text gives the same ids everywhere.
Vocabulary build_vocab(const std::vector<const std::vector<std::string>*>& sides) {
  std::map<std::string, int64_t> freq;
  for (const auto* lines : sides)
    for (const auto& l : *lines)
      for (const auto& w : words(l)) ++freq[w];
  for (const char* special : {"<pad>", "<eos>", "<unk>"}) freq.erase(special);
  std::vector<std::pair<std::string, int64_t>> sorted(freq.begin(), freq.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  Vocabulary v;
  v.words = {"<pad>", "<eos>", "<unk>"};
  for (const auto& [w, n] : sorted) v.words.push_back(w);
  for (size_t i = 0; i < v.words.size(); ++i) v.index[v.words[i]] = int32_t(i);
  return v;
}

std::vector<int32_t> encode_line(const std::string& line, const Vocabulary& v) {
  std::vector<int32_t> out;
  for (const auto& w : words(line)) out.push_back(v.id(w));
  out.push_back(Vocabulary::kEos);
  return out;
}

ParallelSplit encode_split(const std::vector<std::string>& src, const std::vector<std::string>& tgt,
                           const Vocabulary& sv, const Vocabulary& tv) {
  ParallelSplit s;
  for (size_t i = 0; i < src.size(); ++i) {
    s.src.push_back(encode_line(src[i], sv));
    s.tgt.push_back(encode_line(tgt[i], tv));
    s.tgt_text.push_back(tgt[i]);
  }
  return s;
}

ParallelCorpus build(std::vector<std::string> text[3][2], const std::string names[3][2],
                     bool joint) {
  for (int s = 0; s < 3; ++s)
    if (text[s][0].size() != text[s][1].size())
      throw std::runtime_error("'" + names[s][0] + "' has " + std::to_string(text[s][0].size()) +
                               " lines but '" + names[s][1] + "' has " +
                               std::to_string(text[s][1].size()) +
                               ": the two sides of a split must be line-aligned");
  ParallelCorpus c;
  c.joint = joint;
  if (joint) {
    c.src_vocab = build_vocab({&text[0][0], &text[0][1]});
    c.tgt_vocab = c.src_vocab;
  } else {
    c.src_vocab = build_vocab({&text[0][0]});
    c.tgt_vocab = build_vocab({&text[0][1]});
  }
  c.train = encode_split(text[0][0], text[0][1], c.src_vocab, c.tgt_vocab);
  c.valid = encode_split(text[1][0], text[1][1], c.src_vocab, c.tgt_vocab);
  c.test = encode_split(text[2][0], text[2][1], c.src_vocab, c.tgt_vocab);
  return c;
}

}  // namespace

ParallelCorpus load_parallel_corpus(const std::string& dir, const std::string& source_lang,
                                    const std::string& target_lang, bool joint,
                                    const std::string& train_subset,
                                    const std::string& valid_subset,
                                    const std::string& test_subset) {
  if (!fs::is_directory(dir))
    throw std::runtime_error("data directory '" + dir + "' does not exist: pass --data DIR "
                             "holding train.<src>, train.<tgt>, valid.* and test.* (fairseq's "
                             "prepare-iwslt14.sh output)");
  if (source_lang.empty() || target_lang.empty() || source_lang == target_lang)
    throw std::runtime_error("translation needs distinct --source-lang and --target-lang "
                             "(for example de and en)");
  if (is_fairseq_translation_dir(dir, source_lang, target_lang, train_subset))
    return load_fairseq_parallel_corpus(dir, source_lang, target_lang, joint, train_subset,
                                        valid_subset, test_subset);
  const std::string subsets[3] = {train_subset, valid_subset, test_subset};
  const std::string langs[2] = {source_lang, target_lang};
  std::string names[3][2];
  std::vector<std::string> text[3][2];
  for (int s = 0; s < 3; ++s)
    for (int l = 0; l < 2; ++l) {
      const fs::path p = fs::path(dir) / (subsets[s] + "." + langs[l]);
      names[s][l] = p.string();
      if (!fs::is_regular_file(p)) {
        std::string hint = "check --data, --source-lang and --target-lang";
        if (s == 0)
          hint = "prepare the training split with fairseq's prepare-iwslt14.sh (see README), "
                 "or train on another split with --train-subset valid";
        throw std::runtime_error("missing '" + p.string() + "': " + hint);
      }
      text[s][l] = read_lines(p, "check its permissions");
      if (text[s][l].empty())
        throw std::runtime_error("'" + p.string() + "' holds no sentences: give a non-empty file");
    }
  ParallelCorpus c = build(text, names, joint);
  c.name = dir;
  c.source_lang = source_lang;
  c.target_lang = target_lang;
  return c;
}

ParallelCorpus parallel_corpus_from_text(const std::string& train_src, const std::string& train_tgt,
                                         const std::string& valid_src, const std::string& valid_tgt,
                                         const std::string& test_src, const std::string& test_tgt,
                                         bool joint) {
  std::vector<std::string> text[3][2] = {{text_lines(train_src), text_lines(train_tgt)},
                                         {text_lines(valid_src), text_lines(valid_tgt)},
                                         {text_lines(test_src), text_lines(test_tgt)}};
  const std::string names[3][2] = {{"train source", "train target"},
                                   {"valid source", "valid target"},
                                   {"test source", "test target"}};
  ParallelCorpus c = build(text, names, joint);
  c.name = "text";
  c.source_lang = "src";
  c.target_lang = "tgt";
  return c;
}

std::vector<std::vector<int64_t>> length_batches(const ParallelSplit& split, int64_t max_tokens) {
  std::vector<int64_t> order(split.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const size_t ta = split.tgt[a].size(), tb = split.tgt[b].size();
    if (ta != tb) return ta < tb;
    return split.src[a].size() < split.src[b].size();
  });
  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> cur;
  int64_t longest = 0;
  for (int64_t i : order) {
    const int64_t len = int64_t(std::max(split.src[i].size(), split.tgt[i].size()));
    const int64_t longer = std::max(longest, len);
    if (!cur.empty() && longer * int64_t(cur.size() + 1) > max_tokens) {
      batches.push_back(std::move(cur));
      cur.clear();
      longest = 0;
    }
    cur.push_back(i);
    longest = std::max(longest, len);
  }
  if (!cur.empty()) batches.push_back(std::move(cur));
  return batches;
}

std::vector<int64_t> batch_piece(const std::vector<int64_t>& batch, int piece, int pieces) {
  int64_t b, e;
  rank_share(int64_t(batch.size()), piece, pieces, &b, &e);
  return std::vector<int64_t>(batch.begin() + b, batch.begin() + e);
}

void make_parallel_batch(const ParallelSplit& split, const std::vector<int64_t>& ids,
                         ParallelBatch* b) {
  b->ids = ids;
  if (ids.empty()) {  // one fully masked pair: the layers run, no statistic or loss sees it
    b->nseq = 1, b->src_len = 1, b->tgt_len = 1;
    b->src = {Vocabulary::kPad}, b->prev = {Vocabulary::kPad}, b->tgt = {Vocabulary::kPad};
    b->src_mask = {0}, b->tgt_mask = {0};
    return;
  }
  b->nseq = int(ids.size());
  b->src_len = b->tgt_len = 1;
  for (int64_t i : ids) {
    b->src_len = std::max(b->src_len, int(split.src[i].size()));
    b->tgt_len = std::max(b->tgt_len, int(split.tgt[i].size()));
  }
  const size_t ns = size_t(b->nseq) * b->src_len, nt = size_t(b->nseq) * b->tgt_len;
  b->src.assign(ns, Vocabulary::kPad);
  b->src_mask.assign(ns, 0);
  b->prev.assign(nt, Vocabulary::kPad);
  b->tgt.assign(nt, Vocabulary::kPad);
  b->tgt_mask.assign(nt, 0);
  for (int s = 0; s < b->nseq; ++s) {
    const auto& src = split.src[ids[s]];
    const auto& tgt = split.tgt[ids[s]];
    for (size_t t = 0; t < src.size(); ++t) {
      b->src[size_t(s) * b->src_len + t] = src[t];
      b->src_mask[size_t(s) * b->src_len + t] = 1;
    }
    for (size_t t = 0; t < tgt.size(); ++t) {
      const size_t r = size_t(s) * b->tgt_len + t;
      b->tgt[r] = tgt[t];
      b->prev[r] = t == 0 ? Vocabulary::kEos : tgt[t - 1];
      b->tgt_mask[r] = 1;
    }
  }
}

}  // namespace pn
