// Parallel data for translation: fairseq's prepared layout DIR/{train,valid,test}.{src,tgt}
// (tokenized, BPE'd text, one sentence per line, line i of .src translating line i of .tgt).
//
// Sentences are encoded with a Vocabulary (<pad> 0, <eos> 1, <unk> 2); every sentence ends in
// <eos>. The decoder input is <eos> followed by the target without its final <eos> (fairseq's
// prev_output_tokens), so <eos> doubles as the start symbol. Sequences are right-padded.
//
// Batching (contract §5 for padded batches): sentence pairs are sorted by (target length, source
// length, index) and cut greedily into *update batches* whose padded size
// n * max(longest source, longest target) stays within the update's global tokens,
// max_tokens * ranks * update_freq. Each epoch visits the update batches in an order drawn from
// (seed, epoch). An update batch of n pairs is cut into update_freq consecutive micro-batches and
// each of those into contiguous per-rank shares: piece j of F*R holds pairs
// [n*j/(F*R), n*(j+1)/(F*R)). Hence the training stream depends on the seed, the data and the
// global tokens per update only, never on how ranks and micro-steps split it, and similar
// lengths keep padding small while every batch still carries some.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/translation.h"
#include "trainer/data.h"

namespace pn {

struct ParallelSplit {
  std::vector<std::vector<int32_t>> src, tgt;  // token ids, each ending in <eos>
  std::vector<std::string> tgt_text;           // the raw target lines (BLEU references)
  size_t size() const { return src.size(); }
};

struct ParallelCorpus {
  std::string name, source_lang, target_lang;
  Vocabulary src_vocab, tgt_vocab;  // the same joint vocabulary under --share-all-embeddings
  bool joint = false;
  ParallelSplit train, valid, test;
};

// Reads fairseq-preprocess output when DIR holds it (dict.<lang>.txt and
// <split>.<src>-<tgt>.<lang>.bin/.idx, trainer/fairseq_data.h). Otherwise
// reads DIR/<train_subset>.<src|tgt>, DIR/<valid_subset>.*, DIR/<gen_subset>.*; builds the
// vocabularies from the training split (joint over both sides when `joint`). Throws
// std::runtime_error naming a missing file, an empty one or a line-count mismatch.
ParallelCorpus load_parallel_corpus(const std::string& dir, const std::string& source_lang,
                                    const std::string& target_lang, bool joint,
                                    const std::string& train_subset = "train",
                                    const std::string& valid_subset = "valid",
                                    const std::string& test_subset = "test");
// From in-memory text (tests): each string holds one sentence per line.
ParallelCorpus parallel_corpus_from_text(const std::string& train_src, const std::string& train_tgt,
                                         const std::string& valid_src, const std::string& valid_tgt,
                                         const std::string& test_src, const std::string& test_tgt,
                                         bool joint);

// Pairs sorted by length and cut into batches of at most `max_tokens` padded tokens
// (n * max(source length, target length)); a pair longer than max_tokens gets its own batch.
std::vector<std::vector<int64_t>> length_batches(const ParallelSplit& split, int64_t max_tokens);
// A ParallelBatch of the pairs `ids` (right-padded to the longest of them). An empty `ids`
// gives one fully masked pair of length 1, so a rank without pairs still runs the layers (and
// joins the collectives of synchronized norms) with an empty statistics set.
void make_parallel_batch(const ParallelSplit& split, const std::vector<int64_t>& ids,
                         ParallelBatch* batch);
// The pairs of piece `piece` of `pieces` of an update batch (contiguous, in order).
std::vector<int64_t> batch_piece(const std::vector<int64_t>& batch, int piece, int pieces);

}  // namespace pn
