// fairseq-preprocess output as pntrain data (--data DIR holding fairseq's data-bin).
//
// Layout, detected by the files present:
//   language model (fairseq-preprocess --only-source):  DIR/dict.txt, DIR/<split>.{bin,idx}
//   translation:  DIR/dict.<lang>.txt, DIR/<split>.<src>-<tgt>.<lang>.{bin,idx}
// Each <prefix>.idx/.bin pair is fairseq's memory-mapped indexed dataset:
//   .idx  9-byte magic "MMIDIDX\0\0", uint64 version (1), uint8 dtype code, uint64 N (items),
//         uint64 M (document-index entries), int32 sizes[N] (tokens per item), int64
//         pointers[N] (byte offset of each item in .bin), int64 doc_idx[M]; all little-endian
//   .bin  the items' tokens, raw integers of the dtype (1 uint8, 2 int8, 3 int16, 4 int32,
//         5 int64, 8 uint16, 9 uint32, 10 uint64)
// An item is one sentence ending in </s>. The .bin is memory-mapped and the LM's token streams
// are read in place: no rank copies the corpus (only the index's sizes and pointers, 12 bytes an
// item). Translation splits are decoded into per-sentence vectors, as the text path holds them.
//
// Dictionary: fairseq's ids are <s> 0, <pad> 1, </s> 2, <unk> 3, then dict.txt's lines ("word
// count", in order). pntrain's are <pad> 0, <eos> 1, <unk> 2, then the same words, so fairseq id
// f is pntrain id f - 1 (<s>, which fairseq-preprocess never writes, reads as <unk>). A dict.txt
// listing words by falling training frequency (ties in byte order), as pntrain's text path
// orders them, gives exactly the ids of the same corpus read as text.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/data.h"
#include "trainer/translation_data.h"

namespace pn {

// A read-only memory mapping of a whole file (empty files map to nothing).
struct MappedFile {
  std::string path;
  const char* data = nullptr;
  size_t size = 0;
  explicit MappedFile(const std::string& path);  // throws std::runtime_error naming the file
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
};

// One indexed dataset (prefix.idx + prefix.bin), validated on open.
struct FairseqIndexed {
  std::string prefix;
  int dtype_code = 0, width = 0;
  bool is_signed = false;
  std::vector<int32_t> sizes;     // tokens per item
  std::vector<int64_t> pointers;  // byte offset of each item in .bin
  std::shared_ptr<const MappedFile> bin;
  int64_t items() const { return int64_t(sizes.size()); }
  // Item i (fairseq ids mapped to pntrain ids), read in place.
  TokenStream item(int64_t i) const;
  // Every item in order as one stream (the items must be contiguous in .bin, as fairseq writes).
  TokenStream all() const;
};

// Opens and checks prefix.idx and prefix.bin. Throws std::runtime_error naming the file and
// what was expected: a wrong magic, a version other than 1, an unknown or non-integer dtype
// code, a truncated .idx or .bin, or an index entry pointing past the end of the .bin.
FairseqIndexed open_fairseq_indexed(const std::string& prefix);
// Reads fairseq's dict.txt into pntrain's id order (<pad>, <eos>, <unk>, then its words).
Vocabulary read_fairseq_dictionary(const std::string& path);

// True when DIR holds dict.txt and train.idx (the LM layout).
bool is_fairseq_lm_dir(const std::string& dir);
// Reads DIR/dict.txt and DIR/{train,valid,test}.{idx,bin}. Throws naming a missing file.
Corpus load_fairseq_corpus(const std::string& dir);

// True when DIR holds dict.<src>.txt and <train_subset>.<src>-<tgt>.<src>.idx.
bool is_fairseq_translation_dir(const std::string& dir, const std::string& source_lang,
                                const std::string& target_lang, const std::string& train_subset);
// Reads the translation layout. `joint` (--share-all-embeddings) needs identical dictionaries.
ParallelCorpus load_fairseq_parallel_corpus(const std::string& dir, const std::string& source_lang,
                                            const std::string& target_lang, bool joint,
                                            const std::string& train_subset,
                                            const std::string& valid_subset,
                                            const std::string& test_subset);

}  // namespace pn
