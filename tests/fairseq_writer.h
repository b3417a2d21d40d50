// A small writer of fairseq-preprocess output for the tests, written from the format's public
// description (not from pntrain's reader):
//   dict.txt      "word count" per line, most frequent first; fairseq numbers them from 4 after
//                 <s> 0, <pad> 1, </s> 2, <unk> 3
//   P.idx         "MMIDIDX\0\0", uint64 1, uint8 dtype code, uint64 items, uint64 doc entries,
//                 int32 sizes[items], int64 byte pointers[items], int64 doc_idx[doc entries]
//   P.bin         every item's ids in order, each sentence's words then </s> (2)
// The dictionary orders words by falling training count, ties in byte order: the order
// pntrain's text path documents, so the same text gives the same ids both ways.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace pn::test {

namespace fs = std::filesystem;

// The shared corpora (../shared/data beside the repository), or "" when absent.
inline std::string shared_data_dir() {
  const fs::path p = fs::path(__FILE__).parent_path() / ".." / ".." / "shared" / "data";
  return fs::is_directory(p) ? fs::canonical(p).string() : std::string();
}

inline std::vector<std::string> head_lines(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; out.size() < n && std::getline(in, l);) out.push_back(l);
  return out;
}

inline void write_lines(const fs::path& p, const std::vector<std::string>& lines) {
  std::ofstream out(p);
  for (const auto& l : lines) out << l << '\n';
}

inline std::vector<std::string> split_words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

struct FairseqDict {
  std::vector<std::pair<std::string, int64_t>> entries;  // dict.txt order
  std::unordered_map<std::string, int32_t> id;           // fairseq ids (first word: 4)
};

inline FairseqDict build_dict(const std::vector<const std::vector<std::string>*>& texts) {
  std::map<std::string, int64_t> count;  // byte order
  for (const auto* lines : texts)
    for (const auto& l : *lines)
      for (const auto& w : split_words(l)) ++count[w];
  for (const char* special : {"<eos>", "<pad>", "<unk>"}) count.erase(special);
  FairseqDict d;
  d.entries.assign(count.begin(), count.end());
  std::stable_sort(d.entries.begin(), d.entries.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (size_t i = 0; i < d.entries.size(); ++i) d.id[d.entries[i].first] = int32_t(4 + i);
  return d;
}

inline void write_dict(const fs::path& p, const FairseqDict& d) {
  std::ofstream out(p);
  for (const auto& [w, n] : d.entries) out << w << ' ' << n << '\n';
}

// Items of fairseq ids (each line's words, then </s>); empty lines are skipped, as pntrain's
// text path skips them.
inline std::vector<std::vector<int64_t>> encode_lines(const std::vector<std::string>& lines,
                                                      const FairseqDict& d, bool skip_empty) {
  std::vector<std::vector<int64_t>> items;
  for (const auto& l : lines) {
    const auto words = split_words(l);
    if (words.empty() && skip_empty) continue;
    std::vector<int64_t> ids;
    for (const auto& w : words) {
      const auto it = d.id.find(w);
      ids.push_back(it == d.id.end() ? 3 : it->second);
    }
    ids.push_back(2);
    items.push_back(std::move(ids));
  }
  return items;
}

template <class V>
void put(std::string* out, V v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(V));
}

// Writes prefix.bin and prefix.idx with dtype code 8 (uint16, fairseq's choice below 65500
// symbols), 4 (int32), 1 (uint8) or 5 (int64).
inline void write_indexed(const std::string& prefix, const std::vector<std::vector<int64_t>>& items,
                          uint8_t dtype_code = 8) {
  const int width = dtype_code == 8 ? 2 : dtype_code == 1 ? 1 : dtype_code == 5 ? 8 : 4;
  std::string bin, idx;
  std::vector<int32_t> sizes;
  std::vector<int64_t> pointers;
  for (const auto& it : items) {
    pointers.push_back(int64_t(bin.size()));
    sizes.push_back(int32_t(it.size()));
    for (int64_t t : it) {
      if (width == 1) put(&bin, uint8_t(t));
      else if (width == 2) put(&bin, uint16_t(t));
      else if (width == 8) put(&bin, int64_t(t));
      else put(&bin, int32_t(t));
    }
  }
  idx.append("MMIDIDX\0\0", 9);
  put(&idx, uint64_t(1));
  put(&idx, dtype_code);
  put(&idx, uint64_t(sizes.size()));
  put(&idx, uint64_t(2));  // document index [0, items]: one document
  for (int32_t s : sizes) put(&idx, s);
  for (int64_t p : pointers) put(&idx, p);
  put(&idx, int64_t(0));
  put(&idx, int64_t(sizes.size()));
  std::ofstream(prefix + ".bin", std::ios::binary) << bin;
  std::ofstream(prefix + ".idx", std::ios::binary) << idx;
}

// A PTB slice as text (DIR/text/{train,valid,test}.txt) and as fairseq-preprocess
// --only-source output (DIR/bin). Returns false when the shared data is absent.
inline bool write_ptb_slice(const fs::path& dir, size_t train_lines, size_t eval_lines) {
  const std::string data = shared_data_dir();
  if (data.empty() || !fs::is_regular_file(data + "/ptb/train.txt")) return false;
  fs::create_directories(dir / "text");
  fs::create_directories(dir / "bin");
  const char* splits[3] = {"train", "valid", "test"};
  std::vector<std::string> text[3];
  for (int s = 0; s < 3; ++s) {
    text[s] = head_lines(data + "/ptb/" + splits[s] + ".txt", s == 0 ? train_lines : eval_lines);
    write_lines(dir / "text" / (std::string(splits[s]) + ".txt"), text[s]);
  }
  const FairseqDict d = build_dict({&text[0]});
  write_dict(dir / "bin" / "dict.txt", d);
  for (int s = 0; s < 3; ++s)
    write_indexed((dir / "bin" / splits[s]).string(), encode_lines(text[s], d, true));
  return true;
}

// An IWSLT'14 de-en slice as text (DIR/text/{train,valid,test}.{de,en}: the first lines of
// valid as train, the next as valid, test's first lines as test) and in fairseq's translation
// layout (DIR/bin: dict.{de,en}.txt, <split>.de-en.{de,en}.{bin,idx}), with one joint
// dictionary when `joint`. Returns false when the shared data is absent.
inline bool write_iwslt_slice(const fs::path& dir, size_t train_lines, size_t eval_lines,
                              bool joint) {
  const std::string data = shared_data_dir();
  if (data.empty() || !fs::is_regular_file(data + "/iwslt14-de-en/valid.de")) return false;
  fs::create_directories(dir / "text");
  fs::create_directories(dir / "bin");
  const char* splits[3] = {"train", "valid", "test"};
  const char* langs[2] = {"de", "en"};
  std::vector<std::string> text[3][2];
  for (int l = 0; l < 2; ++l) {
    const auto valid = head_lines(data + "/iwslt14-de-en/valid." + langs[l],
                                  train_lines + eval_lines);
    text[0][l].assign(valid.begin(), valid.begin() + long(std::min(train_lines, valid.size())));
    text[1][l].assign(valid.begin() + long(std::min(train_lines, valid.size())), valid.end());
    text[2][l] = head_lines(data + "/iwslt14-de-en/test." + langs[l], eval_lines);
    for (int s = 0; s < 3; ++s)
      write_lines(dir / "text" / (std::string(splits[s]) + "." + langs[l]), text[s][l]);
  }
  FairseqDict dicts[2];
  if (joint) {
    dicts[0] = dicts[1] = build_dict({&text[0][0], &text[0][1]});
  } else {
    dicts[0] = build_dict({&text[0][0]});
    dicts[1] = build_dict({&text[0][1]});
  }
  for (int l = 0; l < 2; ++l) {
    write_dict(dir / "bin" / (std::string("dict.") + langs[l] + ".txt"), dicts[l]);
    for (int s = 0; s < 3; ++s)
      write_indexed((dir / "bin" / (std::string(splits[s]) + ".de-en." + langs[l])).string(),
                    encode_lines(text[s][l], dicts[l], false));
  }
  return true;
}

}  // namespace pn::test
