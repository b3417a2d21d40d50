#include "trainer/fairseq_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace pn {

MappedFile::MappedFile(const std::string& p) : path(p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("cannot open '" + p + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("cannot stat '" + p + "': " + err);
  }
  size = size_t(st.st_size);
  if (size > 0) {
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      throw std::runtime_error("cannot memory-map '" + p + "': " + err);
    }
    data = static_cast<const char*>(m);
  }
  ::close(fd);  // the mapping stays valid
}

MappedFile::~MappedFile() {
  if (data) ::munmap(const_cast<char*>(data), size);
}

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

template <class V>
V read_le(const char* p) {  // the format is little-endian, as is every host pntrain runs on
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// Byte width and signedness of fairseq's integer dtype codes; width 0 for any other code.
void dtype_of(int code, int* width, bool* is_signed) {
  switch (code) {
    case 1: *width = 1, *is_signed = false; return;  // uint8
    case 2: *width = 1, *is_signed = true; return;   // int8
    case 3: *width = 2, *is_signed = true; return;   // int16
    case 4: *width = 4, *is_signed = true; return;   // int32
    case 5: *width = 8, *is_signed = true; return;   // int64
    case 8: *width = 2, *is_signed = false; return;  // uint16 (fairseq's choice below 65500 words)
    case 9: *width = 4, *is_signed = false; return;  // uint32
    case 10: *width = 8, *is_signed = true; return;  // uint64 (ids beyond 2^63 are refused anyway)
    default: *width = 0;
  }
}

std::string refuse_hint() {
  return "; re-create it with fairseq-preprocess (--dataset-impl mmap) or copy it again";
}

}  // namespace

FairseqIndexed open_fairseq_indexed(const std::string& prefix) {
  FairseqIndexed d;
  d.prefix = prefix;
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  MappedFile idx(idx_path);
  if (idx.size < 9 || std::memcmp(idx.data, kMagic, 9) != 0)
    throw std::runtime_error("'" + idx_path + "' is not a fairseq mmap index: expected the magic "
                             "\"MMIDIDX\\0\\0\" at its start" + refuse_hint());
  if (idx.size < kHeaderBytes)
    throw std::runtime_error("'" + idx_path + "' is truncated: its header needs " +
                             std::to_string(kHeaderBytes) + " bytes, the file has " +
                             std::to_string(idx.size) + refuse_hint());
  const uint64_t version = read_le<uint64_t>(idx.data + 9);
  if (version != 1)
    throw std::runtime_error("'" + idx_path + "' has index version " + std::to_string(version) +
                             ", expected 1 (fairseq's MMIDIDX version)" + refuse_hint());
  d.dtype_code = int(uint8_t(idx.data[17]));
  dtype_of(d.dtype_code, &d.width, &d.is_signed);
  if (d.width == 0)
    throw std::runtime_error("'" + idx_path + "' has dtype code " + std::to_string(d.dtype_code) +
                             ", expected an integer token type (1 uint8, 2 int8, 3 int16, 4 int32, "
                             "5 int64, 8 uint16, 9 uint32, 10 uint64)" + refuse_hint());
  const uint64_t n = read_le<uint64_t>(idx.data + 18), m = read_le<uint64_t>(idx.data + 26);
  // Compare counts before multiplying, so that a corrupt count cannot overflow the product.
  const uint64_t room = idx.size - kHeaderBytes;
  const bool fits = n <= room / 12 && m <= (room - 12 * n) / 8;
  if (!fits || kHeaderBytes + 12 * n + 8 * m != idx.size)
    throw std::runtime_error(
        "'" + idx_path + "' has " + std::to_string(idx.size) + " bytes but its header announces " +
        std::to_string(n) + " items and " + std::to_string(m) + " document entries (" +
        (fits ? "expected " + std::to_string(kHeaderBytes + 12 * n + 8 * m) + " bytes"
              : std::string("more bytes than the file has")) +
        "): truncated or padded" + refuse_hint());
  d.sizes.resize(n);
  d.pointers.resize(n);
  if (n > 0) {
    std::memcpy(d.sizes.data(), idx.data + kHeaderBytes, 4 * n);
    std::memcpy(d.pointers.data(), idx.data + kHeaderBytes + 4 * n, 8 * n);
  }
  for (uint64_t j = 0; j < m; ++j) {
    const int64_t doc = read_le<int64_t>(idx.data + kHeaderBytes + 12 * n + 8 * j);
    if (doc < 0 || uint64_t(doc) > n)
      throw std::runtime_error("'" + idx_path + "' document index entry " + std::to_string(j) +
                               " is " + std::to_string(doc) + ", expected 0.." +
                               std::to_string(n) + refuse_hint());
  }
  d.bin = std::make_shared<const MappedFile>(bin_path);
  const int64_t bin_size = int64_t(d.bin->size);
  int64_t tokens = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (d.sizes[i] < 0)
      throw std::runtime_error("'" + idx_path + "' item " + std::to_string(i) + " has size " +
                               std::to_string(d.sizes[i]) + refuse_hint());
    tokens += d.sizes[i];
  }
  if (tokens * d.width > bin_size)
    throw std::runtime_error("'" + bin_path + "' is truncated: its index describes " +
                             std::to_string(tokens) + " tokens of " + std::to_string(d.width) +
                             " bytes (" + std::to_string(tokens * d.width) +
                             " bytes), the file has " + std::to_string(bin_size) + refuse_hint());
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t p = d.pointers[i], end = p + int64_t(d.sizes[i]) * d.width;
    if (p < 0 || p % d.width != 0 || end > bin_size)
      throw std::runtime_error("'" + idx_path + "' item " + std::to_string(i) +
                               " points past the end of '" + bin_path + "' (bytes " +
                               std::to_string(p) + ".." + std::to_string(end) + ", the file has " +
                               std::to_string(bin_size) + ", expected aligned offsets within it)" +
                               refuse_hint());
  }
  return d;
}

TokenStream FairseqIndexed::item(int64_t i) const {
  return TokenStream(bin, bin->data + pointers[size_t(i)], width, sizes[size_t(i)], is_signed,
                     /*fairseq_ids=*/true);
}

TokenStream FairseqIndexed::all() const {
  int64_t tokens = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (pointers[i] != (pointers.empty() ? 0 : pointers[0]) + tokens * width)
      throw std::runtime_error("'" + prefix + ".idx' item " + std::to_string(i) +
                               " does not follow the previous one in '" + prefix +
                               ".bin': expected contiguous items, as fairseq-preprocess writes");
    tokens += sizes[i];
  }
  const char* start = bin->data + (pointers.empty() ? 0 : pointers[0]);
  return TokenStream(bin, start, width, tokens, is_signed, /*fairseq_ids=*/true);
}

Vocabulary read_fairseq_dictionary(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the fairseq dictionary '" + path + "'");
  Vocabulary v;
  v.words = {"<pad>", "<eos>", "<unk>"};
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    // "word count" or "word count #fairseq:overwrite"; the word is everything before the count.
    std::string rest = line;
    const std::string flag = " #fairseq:overwrite";
    if (rest.size() > flag.size() &&
        rest.compare(rest.size() - flag.size(), flag.size(), flag) == 0)
      rest.resize(rest.size() - flag.size());
    const size_t space = rest.rfind(' ');
    const std::string count = space == std::string::npos ? "" : rest.substr(space + 1);
    if (space == std::string::npos || space == 0 || count.empty() ||
        count.find_first_not_of("0123456789") != std::string::npos)
      throw std::runtime_error("'" + path + "' line " + std::to_string(line_no) +
                               " is not \"<word> <count>\": give fairseq-preprocess's dict.txt");
    v.words.push_back(rest.substr(0, space));
  }
  for (size_t i = 0; i < v.words.size(); ++i)
    if (!v.index.emplace(v.words[i], int32_t(i)).second)
      throw std::runtime_error("'" + path + "' lists '" + v.words[i] +
                               "' twice (or a special symbol): give fairseq-preprocess's dict.txt");
  return v;
}

namespace {

// Every id of the stream must name a dictionary entry (the .bin and dict.txt belong together).
void check_ids(const TokenStream& s, const Vocabulary& v, const std::string& bin_path,
               const std::string& dict_path) {
  for (int64_t i = 0; i < s.size(); ++i) {
    const int32_t id = s[i];
    if (id < 0 || id >= v.size())
      throw std::runtime_error("'" + bin_path + "' holds token id " + std::to_string(id + 1) +
                               " (fairseq numbering), beyond the " + std::to_string(v.size() + 1) +
                               " symbols of '" + dict_path +
                               "': the .bin and the dictionary come from different runs");
  }
}

void require(const fs::path& p, const std::string& hint) {
  if (!fs::is_regular_file(p))
    throw std::runtime_error("missing '" + p.string() + "' in a fairseq data directory: " + hint);
}

}  // namespace

bool is_fairseq_lm_dir(const std::string& dir) {
  return fs::is_regular_file(fs::path(dir) / "dict.txt") &&
         fs::is_regular_file(fs::path(dir) / "train.idx");
}

Corpus load_fairseq_corpus(const std::string& dir) {
  Corpus c;
  c.name = dir;
  const std::string dict = (fs::path(dir) / "dict.txt").string();
  c.vocab = read_fairseq_dictionary(dict);
  TokenStream* streams[3] = {&c.train, &c.valid, &c.test};
  const char* splits[3] = {"train", "valid", "test"};
  for (int s = 0; s < 3; ++s) {
    const fs::path prefix = fs::path(dir) / splits[s];
    for (const char* ext : {".idx", ".bin"})
      require(prefix.string() + ext, std::string("fairseq-preprocess --only-source writes ") +
                                         splits[s] + ".bin and " + splits[s] + ".idx");
    const FairseqIndexed d = open_fairseq_indexed(prefix.string());
    *streams[s] = d.all();
    if (streams[s]->empty())
      throw std::runtime_error("'" + prefix.string() + ".bin' holds no tokens: give a non-empty " +
                               splits[s] + " split");
    check_ids(*streams[s], c.vocab, prefix.string() + ".bin", dict);
  }
  return c;
}

bool is_fairseq_translation_dir(const std::string& dir, const std::string& source_lang,
                                const std::string& target_lang, const std::string& train_subset) {
  const fs::path d(dir);
  return fs::is_regular_file(d / ("dict." + source_lang + ".txt")) &&
         fs::is_regular_file(d / (train_subset + "." + source_lang + "-" + target_lang + "." +
                                  source_lang + ".idx"));
}

ParallelCorpus load_fairseq_parallel_corpus(const std::string& dir, const std::string& source_lang,
                                            const std::string& target_lang, bool joint,
                                            const std::string& train_subset,
                                            const std::string& valid_subset,
                                            const std::string& test_subset) {
  const fs::path d(dir);
  const std::string langs[2] = {source_lang, target_lang};
  std::string dict_paths[2];
  Vocabulary vocabs[2];
  for (int l = 0; l < 2; ++l) {
    dict_paths[l] = (d / ("dict." + langs[l] + ".txt")).string();
    require(dict_paths[l], "fairseq-preprocess writes dict.<lang>.txt for both languages");
    vocabs[l] = read_fairseq_dictionary(dict_paths[l]);
  }
  if (joint && vocabs[0].words != vocabs[1].words)
    throw std::runtime_error("--share-all-embeddings needs one joint vocabulary, but '" +
                             dict_paths[0] + "' and '" + dict_paths[1] +
                             "' differ: preprocess with --joined-dictionary, or drop the flag");
  ParallelCorpus c;
  c.name = dir;
  c.source_lang = source_lang;
  c.target_lang = target_lang;
  c.joint = joint;
  c.src_vocab = vocabs[0];
  c.tgt_vocab = vocabs[1];
  const std::string subsets[3] = {train_subset, valid_subset, test_subset};
  ParallelSplit* splits[3] = {&c.train, &c.valid, &c.test};
  for (int s = 0; s < 3; ++s) {
    FairseqIndexed sides[2];
    for (int l = 0; l < 2; ++l) {
      const std::string prefix =
          (d / (subsets[s] + "." + source_lang + "-" + target_lang + "." + langs[l])).string();
      for (const char* ext : {".idx", ".bin"})
        require(prefix + ext, "fairseq-preprocess writes <split>.<src>-<tgt>.<lang>.bin/.idx "
                              "(check --source-lang, --target-lang and the --*-subset flags)");
      sides[l] = open_fairseq_indexed(prefix);
      if (sides[l].items() == 0)
        throw std::runtime_error("'" + prefix + ".idx' holds no sentences: give a non-empty file");
    }
    if (sides[0].items() != sides[1].items())
      throw std::runtime_error("'" + sides[0].prefix + ".idx' has " +
                               std::to_string(sides[0].items()) + " sentences but '" +
                               sides[1].prefix + ".idx' has " + std::to_string(sides[1].items()) +
                               ": the two sides of a split must be aligned");
    ParallelSplit& out = *splits[s];
    for (int64_t i = 0; i < sides[0].items(); ++i) {
      for (int l = 0; l < 2; ++l) {
        const TokenStream t = sides[l].item(i);
        check_ids(t, vocabs[l], sides[l].prefix + ".bin", dict_paths[l]);
        (l == 0 ? out.src : out.tgt).push_back(t.to_vector());
      }
      // The BLEU reference: the target's words without the closing </s>.
      std::string line;
      const auto& tgt = out.tgt.back();
      const size_t words = !tgt.empty() && tgt.back() == Vocabulary::kEos ? tgt.size() - 1
                                                                           : tgt.size();
      for (size_t k = 0; k < words; ++k)
        line += (line.empty() ? "" : " ") + vocabs[1].words[size_t(tgt[k])];
      out.tgt_text.push_back(std::move(line));
    }
  }
  return c;
}

}  // namespace pn
