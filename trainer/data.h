// Language-modelling data: a vocabulary built from the training text, token streams cut into
// samples of tokens_per_sample, and the world-size-independent order of docs/contract.md §5.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/lm.h"

namespace pn {

struct Vocabulary {
  static constexpr int32_t kPad = 0, kEos = 1, kUnk = 2;
  std::vector<std::string> words;  // index -> word; 0 <pad>, 1 <eos>, 2 <unk>, then by frequency
  std::unordered_map<std::string, int32_t> index;
  int size() const { return int(words.size()); }
  int32_t id(const std::string& w) const;
};

// "N words, crc32 XXXXXXXX" over the words of the vocabularies in index order: the same data
// gives the same ids. Checkpoints store it to recognise their data.
std::string vocabulary_fingerprint(const std::vector<const Vocabulary*>& vocabularies);

// A read-only token stream: ids held in memory (text corpora), or read in place from a
// memory-mapped fairseq .bin file (trainer/fairseq_data.h) of 1, 2, 4 or 8-byte integers whose
// fairseq id f is pntrain id f - 1 (fairseq's <s> = 0, never written by fairseq-preprocess,
// reads as <unk>). Copies share the tokens.
class TokenStream {
 public:
  TokenStream() = default;
  TokenStream(std::vector<int32_t> tokens);  // NOLINT: implicit, text corpora and tests
  TokenStream(std::shared_ptr<const void> owner, const void* data, int width, int64_t n,
              bool signed_ints, bool fairseq_ids);
  int64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int32_t operator[](int64_t i) const {
    int64_t raw;
    switch (width_) {
      case 1: raw = signed_ ? int64_t(static_cast<const int8_t*>(data_)[i])
                            : int64_t(static_cast<const uint8_t*>(data_)[i]); break;
      case 2: raw = signed_ ? int64_t(static_cast<const int16_t*>(data_)[i])
                            : int64_t(static_cast<const uint16_t*>(data_)[i]); break;
      case 4: raw = signed_ ? int64_t(static_cast<const int32_t*>(data_)[i])
                            : int64_t(static_cast<const uint32_t*>(data_)[i]); break;
      default: raw = static_cast<const int64_t*>(data_)[i]; break;
    }
    if (!fairseq_) return int32_t(raw);
    return raw == 0 ? Vocabulary::kUnk : int32_t(raw - 1);
  }
  std::vector<int32_t> to_vector() const;
  bool memory_mapped() const { return fairseq_; }
  friend bool operator==(const TokenStream& a, const std::vector<int32_t>& b) {
    return a.to_vector() == b;
  }

 private:
  std::shared_ptr<const void> owner_;  // keeps the vector or the mapping alive
  const void* data_ = nullptr;
  int width_ = 4;
  int64_t n_ = 0;
  bool signed_ = true, fairseq_ = false;
};

// What a text corpus's vocabulary keeps of train's words (--vocab-size, --vocab-min-count):
// words by falling count (ties in byte order, so every rank builds the same one), at most `size`
// entries with the three special ones, each seen at least `min_count` times; 0: no limit.
struct VocabLimits {
  int size = 0, min_count = 0;
};

struct Corpus {
  std::string name;  // directory or "builtin"
  Vocabulary vocab;
  TokenStream train, valid, test;  // token streams, <eos> after every line
  double entropy_floor = -1;  // nats/token of the best possible model on valid (builtin only)
};

// Reads DIR/{train,valid,test}.txt (or ptb.*.txt, wiki.*.tokens), or fairseq-preprocess output
// (dict.txt and {train,valid,test}.{bin,idx}, trainer/fairseq_data.h) when DIR holds it.
// Throws std::runtime_error naming the missing or empty file and the fix.
Corpus load_corpus(const std::string& dir, const VocabLimits& limits = {});
// The embedded corpus: text from a fixed second-order Markov source, so its entropy is known.
Corpus builtin_corpus();
// Builds a corpus from in-memory text (one sentence per line), the vocabulary from train.
Corpus corpus_from_text(const std::string& name, const std::string& train,
                        const std::string& valid, const std::string& test,
                        const VocabLimits& limits = {});

// Samples of one token stream: sample s covers inputs stream[s*T, s*T+T) and targets shifted
// by one. With `keep_tail` the last, shorter sample is kept and padded (masked).
struct SampleSet {
  TokenStream stream;
  int tokens_per_sample = 0;
  int64_t count = 0;
  SampleSet() = default;
  SampleSet(const TokenStream& s, int tps, bool keep_tail);
  // Appends samples[ids] as rows of a batch (resets the batch first).
  void make_batch(const std::vector<int64_t>& ids, Batch* batch) const;
};

// The infinite training sample stream: epoch e is a permutation of all samples drawn from
// (seed, e). Global sample g is epoch g / count, position g % count.
struct SampleOrder {
  int64_t count = 0;
  uint64_t seed = 0;
  int64_t cached_epoch = -1;
  std::vector<int64_t> perm;
  SampleOrder(int64_t n, uint64_t s) : count(n), seed(s) {}
  int64_t sample(int64_t g);
};

// The rows [begin, end) of a micro-batch of n samples that rank r of R takes (contract §5 and 7).
inline void rank_share(int64_t n, int rank, int world, int64_t* begin, int64_t* end) {
  *begin = n * rank / world;
  *end = n * (rank + 1) / world;
}

// The global sample indices (positions in the update stream, from `first`) that rank r of R
// takes from a micro-batch of n samples cut into `groups` consecutive statistics groups (ghost
// statistics; 1 = no groups): its share of each group in turn, so that group g on every rank
// holds what micro-step g of group-sized gradient accumulation would give it.
inline void rank_samples(int64_t first, int64_t n, int groups, int rank, int world,
                         std::vector<int64_t>* out) {
  out->clear();
  const int64_t per_group = n / groups;
  for (int g = 0; g < groups; ++g) {
    int64_t b, e;
    rank_share(per_group, rank, world, &b, &e);
    for (int64_t i = b; i < e; ++i) out->push_back(first + g * per_group + i);
  }
}

}  // namespace pn
