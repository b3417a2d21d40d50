#include "trainer/data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <zlib.h>

#include "trainer/fairseq_data.h"

namespace fs = std::filesystem;

namespace pn {

TokenStream::TokenStream(std::vector<int32_t> tokens) {
  auto owned = std::make_shared<const std::vector<int32_t>>(std::move(tokens));
  data_ = owned->data();
  n_ = int64_t(owned->size());
  owner_ = std::move(owned);
}

TokenStream::TokenStream(std::shared_ptr<const void> owner, const void* data, int width,
                         int64_t n, bool signed_ints, bool fairseq_ids)
    : owner_(std::move(owner)), data_(data), width_(width), n_(n), signed_(signed_ints),
      fairseq_(fairseq_ids) {}

std::vector<int32_t> TokenStream::to_vector() const {
  std::vector<int32_t> out(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) out[size_t(i)] = (*this)[i];
  return out;
}

int32_t Vocabulary::id(const std::string& w) const {
  auto it = index.find(w);
  return it == index.end() ? kUnk : it->second;
}

std::string vocabulary_fingerprint(const std::vector<const Vocabulary*>& vocabularies) {
  uLong c = crc32(0L, Z_NULL, 0);
  size_t n = 0;
  for (const Vocabulary* v : vocabularies) {
    for (const std::string& w : v->words)
      c = crc32(c, reinterpret_cast<const Bytef*>(w.c_str()), uInt(w.size() + 1));
    n += v->words.size();
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%zu words, crc32 %08lx", n, (unsigned long)c);
  return buf;
}

namespace {

std::vector<std::vector<std::string>> split_lines(const std::string& text) {
  std::vector<std::vector<std::string>> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> words;
    std::string w;
    while (ls >> w) words.push_back(w);
    if (!words.empty()) lines.push_back(std::move(words));
  }
  return lines;
}

std::vector<int32_t> encode(const std::vector<std::vector<std::string>>& lines,
                            const Vocabulary& v) {
  std::vector<int32_t> out;
  for (const auto& l : lines) {
    for (const auto& w : l) out.push_back(v.id(w));
    out.push_back(Vocabulary::kEos);
  }
  return out;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + p.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path find_split(const fs::path& dir, const std::string& split) {
  for (const std::string& name :
       {split + ".txt", "ptb." + split + ".txt", "wiki." + split + ".tokens", split})
    if (fs::is_regular_file(dir / name)) return dir / name;
  return {};
}

}  // namespace

Corpus corpus_from_text(const std::string& name, const std::string& train,
                        const std::string& valid, const std::string& test,
                        const VocabLimits& limits) {
  Corpus c;
  c.name = name;
  const auto train_lines = split_lines(train);
  std::map<std::string, int64_t> freq;
  for (const auto& l : train_lines)
    for (const auto& w : l) ++freq[w];
  freq.erase("<eos>");
  freq.erase("<pad>");
  freq.erase("<unk>");
  std::vector<std::pair<std::string, int64_t>> sorted(freq.begin(), freq.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  c.vocab.words = {"<pad>", "<eos>", "<unk>"};
  for (const auto& [w, n] : sorted) {
    if (limits.size > 0 && c.vocab.size() >= limits.size) break;
    if (n < limits.min_count) break;  // sorted by falling count
    c.vocab.words.push_back(w);
  }
  for (size_t i = 0; i < c.vocab.words.size(); ++i) c.vocab.index[c.vocab.words[i]] = int32_t(i);
  c.train = encode(train_lines, c.vocab);
  c.valid = encode(split_lines(valid), c.vocab);
  c.test = encode(split_lines(test), c.vocab);
  return c;
}

Corpus load_corpus(const std::string& dir_name, const VocabLimits& limits) {
  const fs::path dir(dir_name);
  if (!fs::is_directory(dir))
    throw std::runtime_error("data directory '" + dir_name +
                             "' does not exist: pass --data DIR holding train.txt, valid.txt and "
                             "test.txt (or ptb.*.txt / wiki.*.tokens), or --data builtin");
  if (is_fairseq_lm_dir(dir_name)) {
    if (limits.size > 0 || limits.min_count > 0)
      throw std::runtime_error("--vocab-size and --vocab-min-count build a text corpus's "
                               "vocabulary; '" + dir_name + "' is a fairseq data-bin with its "
                               "own dict.txt: drop them (fairseq-preprocess --nwordssrc and "
                               "--thresholdsrc set its vocabulary)");
    return load_fairseq_corpus(dir_name);
  }
  std::string text[3];
  const char* splits[3] = {"train", "valid", "test"};
  for (int i = 0; i < 3; ++i) {
    const fs::path p = find_split(dir, splits[i]);
    if (p.empty())
      throw std::runtime_error("no " + std::string(splits[i]) + " file in '" + dir_name +
                               "': expected " + splits[i] + ".txt, ptb." + splits[i] +
                               ".txt or wiki." + splits[i] + ".tokens");
    text[i] = read_file(p);
    if (text[i].find_first_not_of(" \t\r\n") == std::string::npos)
      throw std::runtime_error("'" + p.string() + "' holds no tokens: give a non-empty " +
                               splits[i] + " file");
  }
  return corpus_from_text(dir_name, text[0], text[1], text[2], limits);
}

namespace {
// The builtin source: 64 words and <eos>. The next token depends on the previous two:
//   p(w | a, b) = 0.05 [w = <eos>] + 0.475 P1[b](w) + 0.475 P2[a](w)
// where P1[b] and P2[a] spread their mass over 4 successors each. Learning P2 needs attention
// to the token two back, so the floor is reachable only by a model that uses its context.
struct MarkovSource {
  static constexpr int V = 65;  // 0 = <eos>, 1..64 = words
  std::vector<std::vector<double>> p1, p2;
  MarkovSource() : p1(V, std::vector<double>(V, 0.0)), p2(V, std::vector<double>(V, 0.0)) {
    std::mt19937_64 rng(20200721);
    std::uniform_int_distribution<int> word(1, V - 1);
    const double w[4] = {0.5, 0.25, 0.15, 0.1};
    for (int a = 0; a < V; ++a)
      for (int k = 0; k < 4; ++k) {
        p1[a][word(rng)] += w[k];
        p2[a][word(rng)] += w[k];
      }
  }
  double prob(int a, int b, int w) const {
    return (w == 0 ? 0.05 : 0.0) + 0.475 * p1[b][w] + 0.475 * p2[a][w];
  }
  // Generates n tokens of text (lines end at <eos>); adds -log p of each token to *nats.
  std::string generate(uint64_t seed, int64_t n, double* nats) const {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::string out;
    int a = 0, b = 0;
    for (int64_t i = 0; i < n; ++i) {
      double r = u(rng), acc = 0;
      int w = V - 1;
      for (int c = 0; c < V; ++c) {
        acc += prob(a, b, c);
        if (r < acc) {
          w = c;
          break;
        }
      }
      *nats -= std::log(prob(a, b, w));
      out += w == 0 ? "\n" : "w" + std::to_string(w) + " ";
      a = b;
      b = w;
    }
    return out + "\n";
  }
};
}  // namespace

Corpus builtin_corpus() {
  MarkovSource src;
  double tr = 0, va = 0, te = 0;
  const std::string train = src.generate(1, 300000, &tr);
  const std::string valid = src.generate(2, 30000, &va);
  const std::string test = src.generate(3, 30000, &te);
  Corpus c = corpus_from_text("builtin", train, valid, test);
  c.entropy_floor = va / 30000.0;
  return c;
}

SampleSet::SampleSet(const TokenStream& s, int tps, bool keep_tail)
    : stream(s), tokens_per_sample(tps) {
  const int64_t targets = int64_t(s.size()) - 1;  // the last token has no successor
  count = targets <= 0 ? 0 : keep_tail ? (targets + tps - 1) / tps : targets / tps;
}

void SampleSet::make_batch(const std::vector<int64_t>& ids, Batch* b) const {
  const int T = tokens_per_sample;
  b->nseq = int(ids.size());
  b->seq_len = T;
  b->tokens.assign(size_t(b->nseq) * T, Vocabulary::kPad);
  b->targets.assign(size_t(b->nseq) * T, Vocabulary::kPad);
  b->mask.assign(size_t(b->nseq) * T, 0);
  const int64_t last = stream.size() - 1;
  for (size_t i = 0; i < ids.size(); ++i)
    for (int t = 0; t < T; ++t) {
      const int64_t pos = ids[i] * T + t;
      if (pos >= last) break;
      b->tokens[i * T + t] = stream[pos];
      b->targets[i * T + t] = stream[pos + 1];
      b->mask[i * T + t] = 1;
    }
}

int64_t SampleOrder::sample(int64_t g) {
  const int64_t epoch = g / count;
  if (epoch != cached_epoch) {
    perm.resize(count);
    for (int64_t i = 0; i < count; ++i) perm[i] = i;
    std::mt19937_64 rng(seed * 1000003ull + uint64_t(epoch));
    // Fisher-Yates with our own index draw: std::shuffle's draws are implementation-defined.
    for (int64_t i = count - 1; i > 0; --i) std::swap(perm[i], perm[rng() % uint64_t(i + 1)]);
    cached_epoch = epoch;
  }
  return perm[g % count];
}

}  // namespace pn
