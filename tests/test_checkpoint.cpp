// Checkpoints (SPEC 6): bit-for-bit resume, verified loads, atomic saves.
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "temp_dir.h"
#include "lm_fixtures.h"
#include "trainer/checkpoint.h"
#include "trainer/trainer.h"

namespace fs = std::filesystem;

namespace pn {
namespace {

Options ckpt_options(const std::string& dir) {
  Options o = test::small_lm();
  o.decoder_layers = 1;
  o.dropout = 0.1;  // dropout masks must also resume identically
  o.max_tokens = 64;
  o.save_dir = dir;
  return o;
}

// Nothing learns (lr 1e-12, no dropout): after the first validation none improves, so
// --patience decides exactly when training ends.
Options patience_options(const std::string& dir) {
  Options o = ckpt_options(dir);
  o.dropout = 0.0;
  o.lr = 1e-12;
  o.lr_scheduler = "fixed";
  o.warmup_updates = 0;
  o.validate_interval_updates = 1;
  o.patience = 2;
  return o;
}

const Corpus& corpus() {
  static const Corpus c = [] {
    std::string train;
    for (int i = 0; i < 20; ++i) train += "the cat sat on the mat and the dog ran off\n";
    return corpus_from_text("t", train, "the cat\n", "the dog\n");
  }();
  return c;
}

using test::TempDir;

TEST(Checkpoint, ResumeContinuesBitForBit) {
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  TempDir a("pn_ckpt_a"), b("pn_ckpt_b");
  Options straight = ckpt_options(a.path.string());
  straight.max_update = 6;
  Trainer t1(straight, *comm, corpus());
  t1.train();

  Options first = ckpt_options(b.path.string());
  first.max_update = 3;
  Trainer t2(first, *comm, corpus());
  t2.train();
  EXPECT_TRUE(fs::exists(b.path / "checkpoint_3" / "DONE"));
  Options second = first;
  second.max_update = 6;
  Trainer t3(second, *comm, corpus());  // restores the last checkpoint of save_dir
  EXPECT_EQ(t3.start_update(), 3);
  t3.train();
  EXPECT_EQ(t1.model().params.data, t3.model().params.data);  // exact equality
}

TEST(Checkpoint, CorruptTruncatedAndForeignCheckpointsAreRefused) {
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  TempDir d("pn_ckpt_c");
  Options o = ckpt_options(d.path.string());
  o.max_update = 2;
  Trainer(o, *comm, corpus()).train();
  const fs::path model = d.path / "checkpoint_2" / "model.bin";
  std::vector<char> bytes;
  {
    std::ifstream in(model, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Restoring with options `opts` must fail with a message holding every one of `words`.
  auto expect_refused = [&](const Options& opts, std::vector<std::string> words) {
    try {
      Trainer t(opts, *comm, corpus());
      ADD_FAILURE() << "accepted a checkpoint that should be refused (" << words[0] << ")";
    } catch (const std::runtime_error& e) {
      for (const std::string& w : words)
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
    }
  };
  auto write_model = [&](const std::vector<char>& content) {
    std::ofstream(model, std::ios::binary | std::ios::trunc).write(content.data(), content.size());
  };
  std::vector<char> flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;
  write_model(flipped);
  expect_refused(o, {"corrupt"});
  write_model(std::vector<char>(bytes.begin(), bytes.begin() + bytes.size() - 100));
  expect_refused(o, {"truncated"});
  write_model(bytes);
  Options other = o;
  other.decoder_ffn_embed_dim = 48;
  expect_refused(other, {"another model shape", "fc1.weight"});
  Trainer ok(o, *comm, corpus());  // the intact file loads again
  EXPECT_EQ(ok.start_update(), 2);
}

TEST(Checkpoint, FailedSaveLeavesThePreviousOneIntact) {
  FLAGS_minloglevel = 2;
  auto comm = make_single_communicator();
  TempDir d("pn_ckpt_d");
  Options o = ckpt_options(d.path.string());
  o.max_update = 2;
  Trainer(o, *comm, corpus()).train();
  std::ofstream(d.path / "checkpoint_4") << "in the way";  // the next save cannot make its dir
  o.max_update = 4;
  Trainer t(o, *comm, corpus());
  t.train();  // warns, does not throw
  EXPECT_EQ(last_checkpoint(d.path.string()), (d.path / "checkpoint_2").string());
  Trainer again(o, *comm, corpus());
  EXPECT_EQ(again.start_update(), 2);
}

TEST(Checkpoint, KeepLastPrunesOlderCheckpoints) {
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  TempDir d("pn_ckpt_e");
  Options o = ckpt_options(d.path.string());
  o.max_update = 5;
  o.save_interval_updates = 1;
  o.keep_last = 2;
  Trainer(o, *comm, corpus()).train();
  EXPECT_FALSE(fs::exists(d.path / "checkpoint_3"));
  EXPECT_TRUE(fs::exists(d.path / "checkpoint_4" / "DONE"));
  EXPECT_TRUE(fs::exists(d.path / "checkpoint_5" / "DONE"));
}

TEST(Evaluation, ResumedRunKeepsTheBestValidationAndThePatienceCount) {
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  TempDir d("pn_ckpt_p");
  Options o = patience_options(d.path.string());
  o.max_update = 2;  // best at 1, no gain at 2: interrupted with one validation without gain
  Trainer first(o, *comm, corpus());
  first.train();
  Options rest = o;
  rest.max_update = 10;
  Trainer resumed(rest, *comm, corpus());
  EXPECT_EQ(resumed.start_update(), 2);
  const TrainResult r = resumed.train();
  // As an uninterrupted run: the second validation without gain (update 3) stops it, and
  // checkpoint_best stays the one of update 1.
  EXPECT_TRUE(fs::exists(d.path / "checkpoint_3" / "DONE"));
  EXPECT_FALSE(fs::exists(d.path / "checkpoint_4"));
  Options best = o;
  best.restore_file = (d.path / "checkpoint_best").string();
  Trainer from_best(best, *comm, corpus());
  EXPECT_EQ(from_best.start_update(), 1);
  EXPECT_GT(r.best_valid_nll, 0);
}

}  // namespace
}  // namespace pn

namespace pn {
namespace {

TEST(Evaluation, PatienceStopsEarlyAndKeepsTheBestCheckpoint) {
  FLAGS_minloglevel = 1;
  auto comm = make_single_communicator();
  TempDir d("pn_ckpt_f");
  Options o = patience_options(d.path.string());
  o.max_update = 10;
  Trainer t(o, *comm, corpus());
  const TrainResult r = t.train();
  EXPECT_EQ(r.updates, 3);  // best at 1, no gain at 2 and 3
  EXPECT_TRUE(fs::exists(d.path / "checkpoint_best" / "DONE"));
  EXPECT_TRUE(fs::exists(d.path / "checkpoint_3" / "DONE"));  // saved when stopping
  Options best = o;
  best.restore_file = (d.path / "checkpoint_best").string();
  Trainer from_best(best, *comm, corpus());
  EXPECT_TRUE(from_best.restored());
  EXPECT_EQ(from_best.start_update(), 1);
}

}  // namespace
}  // namespace pn
