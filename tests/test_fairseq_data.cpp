// fairseq-preprocess output as --data: the memory-mapped indexed format's reader, its refusals,
// and training on a PTB and an IWSLT'14 slice giving exactly the losses of the same text.
#include <glog/logging.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "temp_dir.h"
#include "comm/communicator.h"
#include "fairseq_writer.h"
#include "lm_fixtures.h"
#include "test_translation_fixtures.h"
#include "trainer/fairseq_data.h"
#include "trainer/trainer.h"

namespace pn {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void patch(const std::string& file, size_t at, const std::string& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(at));
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

TEST(FairseqIndexed, ReadsItemsOfEveryIntegerWidthWithFairseqIds) {
  TempDir t("pn_fairseq_items");
  const std::vector<std::vector<int64_t>> items = {{4, 5, 2}, {3, 2}, {200, 6, 7, 2}};
  const std::map<uint8_t, int> width = {{1, 1}, {8, 2}, {4, 4}, {5, 8}};
  for (const auto& [code, bytes] : width) {
    const std::string prefix = (t.path / ("d" + std::to_string(code))).string();
    test::write_indexed(prefix, items, code);
    const FairseqIndexed d = open_fairseq_indexed(prefix);
    EXPECT_EQ(d.width, bytes);
    ASSERT_EQ(d.items(), 3);
    EXPECT_EQ(d.item(1).to_vector(), (std::vector<int32_t>{2, 1}));  // <unk> </s> -> 2 1
    EXPECT_EQ(d.all().to_vector(), (std::vector<int32_t>{3, 4, 1, 2, 1, 199, 5, 6, 1}));
    EXPECT_TRUE(d.all().memory_mapped());
  }
}

TEST(FairseqIndexed, RefusesMalformedFilesNamingTheFileAndWhatWasExpected) {
  TempDir t("pn_fairseq_bad");
  const std::vector<std::vector<int64_t>> items = {{4, 5, 2}, {6, 2}};
  const std::string p = (t.path / "train").string();
  auto fresh = [&] { test::write_indexed(p, items, 8); };
  auto open = [&] { return error_of([&] { open_fairseq_indexed(p); }); };

  fresh();
  EXPECT_EQ(open(), "");
  patch(p + ".idx", 0, "XXIDIDX");
  EXPECT_NE(open().find("'" + p + ".idx' is not a fairseq mmap index: expected the magic"),
            std::string::npos) << open();

  fresh();
  fs::resize_file(p + ".bin", fs::file_size(p + ".bin") - 2);  // one token short
  EXPECT_NE(open().find("'" + p + ".bin' is truncated: its index describes 5 tokens"),
            std::string::npos) << open();

  fresh();
  std::string ptr(8, '\0');
  ptr[0] = 40;  // item 1 at byte 40 of a 10-byte .bin
  patch(p + ".idx", 34 + 2 * 4 + 8, ptr);
  EXPECT_NE(open().find("item 1 points past the end of '" + p + ".bin'"), std::string::npos)
      << open();

  fresh();
  patch(p + ".idx", 9, std::string("\x02", 1));
  EXPECT_NE(open().find("has index version 2, expected 1"), std::string::npos) << open();

  fresh();
  patch(p + ".idx", 17, std::string("\x07", 1));  // float64
  EXPECT_NE(open().find("has dtype code 7, expected an integer token type"), std::string::npos)
      << open();

  fresh();
  fs::resize_file(p + ".idx", fs::file_size(p + ".idx") - 8);
  EXPECT_NE(open().find("truncated or padded"), std::string::npos) << open();

  fresh();
  fs::remove(p + ".bin");
  EXPECT_NE(open().find("cannot open '" + p + ".bin'"), std::string::npos) << open();
}

TEST(FairseqIndexed, RefusesIdsBeyondTheDictionary) {
  TempDir t("pn_fairseq_ids");
  std::ofstream(t.path / "dict.txt") << "a 3\nb 1\n";
  for (const char* s : {"train", "valid", "test"})
    test::write_indexed((t.path / s).string(), {{4, 5, 2}, {9, 2}});
  const std::string e = error_of([&] { load_corpus(t.path.string()); });
  EXPECT_NE(e.find("holds token id 9 (fairseq numbering), beyond the 6 symbols of"),
            std::string::npos) << e;
}

Options ptb_lm() {
  Options o = test::small_lm();
  o.tokens_per_sample = 32;
  o.max_tokens = 256;
  o.decoder_layers = 1;
  o.max_update = 4;
  o.validate_interval_updates = 4;
  return o;
}

TEST(FairseqData, PtbSliceAsDataBinTrainsToExactlyTheLossesOfTheText) {
  FLAGS_minloglevel = 1;
  TempDir t("pn_fairseq_ptb");
  if (!test::write_ptb_slice(t.path, 800, 100)) GTEST_SKIP() << "no ../shared/data/ptb";
  const Corpus text = load_corpus((t.path / "text").string());
  const Corpus bin = load_corpus((t.path / "bin").string());
  ASSERT_TRUE(bin.train.memory_mapped());
  EXPECT_EQ(bin.vocab.words, text.vocab.words);
  EXPECT_EQ(bin.train, text.train.to_vector());
  EXPECT_EQ(bin.valid, text.valid.to_vector());
  EXPECT_EQ(bin.test, text.test.to_vector());
  auto comm = make_single_communicator();
  for (const std::string norm : {"layer", "power"}) {
    Options o = ptb_lm();
    o.norm_self = o.norm_ff = o.norm_final = norm;
    const TrainResult a = Trainer(o, *comm, text).train();
    const TrainResult b = Trainer(o, *comm, bin).train();
    ASSERT_EQ(a.losses.size(), 4u);
    EXPECT_EQ(a.losses, b.losses) << norm;
    EXPECT_EQ(a.valid_nll, b.valid_nll) << norm;
  }
}

TEST(FairseqData, IwsltSliceInTheTranslationLayoutTrainsToExactlyTheLossesOfTheText) {
  FLAGS_minloglevel = 1;
  for (bool joint : {true, false}) {
    TempDir t(joint ? "pn_fairseq_iwslt_joint" : "pn_fairseq_iwslt");
    if (!test::write_iwslt_slice(t.path, 120, 30, joint)) GTEST_SKIP() << "no IWSLT'14 data";
    const ParallelCorpus text =
        load_parallel_corpus((t.path / "text").string(), "de", "en", joint);
    const ParallelCorpus bin = load_parallel_corpus((t.path / "bin").string(), "de", "en", joint);
    EXPECT_EQ(bin.src_vocab.words, text.src_vocab.words);
    EXPECT_EQ(bin.tgt_vocab.words, text.tgt_vocab.words);
    EXPECT_EQ(bin.train.src, text.train.src);
    EXPECT_EQ(bin.train.tgt, text.train.tgt);
    EXPECT_EQ(bin.valid.tgt, text.valid.tgt);
    EXPECT_EQ(bin.test.src, text.test.src);
    ASSERT_EQ(bin.train.tgt_text.size(), text.train.tgt_text.size());
    EXPECT_EQ(bin.train.tgt_text[0], text.train.tgt_text[0]);  // every word is known in train
    auto comm = make_single_communicator();
    Options o = test::small_mt();
    o.share_all_embeddings = joint;
    o.max_tokens = 512;
    o.max_update = 3;
    o.validate_interval_updates = 3;
    o.encoder_norm_self = o.encoder_norm_ff = o.encoder_norm_final = "power";
    const TrainResult a = Trainer(o, *comm, text).train();
    const TrainResult b = Trainer(o, *comm, bin).train();
    ASSERT_EQ(a.losses.size(), 3u);
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_EQ(a.valid_nll, b.valid_nll);
  }
}

}  // namespace
}  // namespace pn
