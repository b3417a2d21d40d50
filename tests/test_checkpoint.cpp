// Checkpoints (contract §6): bit-for-bit resume, verified loads, atomic saves.
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
  o.lr_scheduler = LrScheduler::fixed;
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

// Runs o for 6 updates straight, and for 3 then resumed to 6 (each in a save dir of its own):
// the parameters must end bit for bit the same. Returns the straight run's (host copy, specs).
std::pair<std::vector<float>, std::vector<ParamSpec>> resumes_bit_for_bit(Options o) {
  auto comm = make_single_communicator();
  TempDir a("pn_ckpt_a"), b("pn_ckpt_b");
  o.save_dir = a.path.string();
  o.max_update = 6;
  Trainer t1(o, *comm, corpus());
  t1.train();

  Options first = o;
  first.save_dir = b.path.string();
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
  return {t1.model().params.data.to_host(), t1.model().params.specs};
}

TEST(Checkpoint, ResumeContinuesBitForBit) {
  FLAGS_minloglevel = 1;
  resumes_bit_for_bit(ckpt_options(""));
}

// DyT's a is a parameter: trained (it leaves its initial value), saved and restored with the
// others, so that a resumed run continues bit for bit.
TEST(Checkpoint, DytAlphaIsTrainedSavedAndRestored) {
  FLAGS_minloglevel = 1;
  Options o = ckpt_options("");
  o.norm_self = o.norm_ff = o.norm_final = "dyt";
  const auto [params, specs] = resumes_bit_for_bit(o);
  int alphas = 0;
  for (const ParamSpec& p : specs)
    if (p.name.size() > 6 && p.name.compare(p.name.size() - 6, 6, ".alpha") == 0) {
      ++alphas;
      EXPECT_NE(params[p.offset], 0.5f) << p.name;
    }
  EXPECT_EQ(alphas, 3);  // the block's two norms and the final one
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

namespace pn {
namespace {

// The bytes of a file, and a copy with one byte changed.
std::vector<char> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const fs::path& p, const std::vector<char>& b) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(b.data(), std::streamsize(b.size()));
}

TEST(CheckpointFile, EveryDamagedPartIsReportedAsCorruptNamingTheFile) {
  TempDir d("pn_ckpt_damage");
  const fs::path path = d.path / "model.bin";
  CheckpointFile f;
  f.header = {{"update", 12}, {"config", {{"decoder-embed-dim", 32}}}};
  f.payload.assign(64, 'x');
  write_checkpoint_file(path.string(), f);
  const std::vector<char> good = file_bytes(path);
  const size_t header_len = f.header.dump().size();
  // Layout: magic (8), header length (8), header JSON, payload length (8), payload, CRC32 (4).
  const std::vector<std::pair<std::string, size_t>> parts = {
      {"magic", 3},
      {"header length", 8},
      {"header JSON (unparsable)", 16},
      {"header JSON (a digit)", 16 + f.header.dump().find("32")},
      {"payload length", 16 + header_len},
      {"payload", 24 + header_len + 10},
      {"CRC32", good.size() - 2}};
  const std::string named = "checkpoint file '" + path.string() + "' is corrupt";
  for (const auto& [part, at] : parts) {
    std::vector<char> bad = good;
    bad[at] = part == "header JSON (unparsable)" ? '#' : part == "header JSON (a digit)" ? '7'
                                                                                         : char(bad[at] ^ 0x5a);
    write_bytes(path, bad);
    for (int reader = 0; reader < 2; ++reader) {
      try {
        if (reader == 0) read_checkpoint_file(path.string());
        else read_checkpoint_header(path.string());
        ADD_FAILURE() << part << ": damage not found";
      } catch (const CorruptCheckpoint& e) {
        EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << part << ": " << e.what();
        EXPECT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
      }
    }
  }
  write_bytes(path, good);
  EXPECT_EQ(read_checkpoint_file(path.string()).header, f.header);
  // The model flags that a resume reads first are verified too.
  std::vector<char> bad = good;
  bad[16 + f.header.dump().find("32")] = '6';
  write_bytes(path, bad);
  EXPECT_THROW(checkpoint_flags(d.path.string()), CorruptCheckpoint);
}

// Trains 4 updates into dir, saving checkpoint_2 and checkpoint_4.
Options saved_at_2_and_4(const std::string& dir, Communicator& comm) {
  Options o = ckpt_options(dir);
  o.max_update = 4;
  o.save_interval_updates = 2;
  o.validate_interval_updates = 2;  // and checkpoint_best
  Trainer(o, comm, corpus()).train();
  return o;
}

TEST(Checkpoint, ResumeFallsBackToTheNewestCheckpointThatVerifies) {
  FLAGS_minloglevel = 2;
  auto comm = make_single_communicator();
  TempDir d("pn_ckpt_fallback");
  const Options o = saved_at_2_and_4(d.path.string(), *comm);
  const std::string newest = (d.path / "checkpoint_4").string(),
                    older = (d.path / "checkpoint_2").string();
  std::vector<char> model = file_bytes(newest + "/model.bin");
  model[model.size() / 2] ^= 0x01;
  write_bytes(newest + "/model.bin", model);
  const ResumePoint r = checkpoint_to_resume(d.path.string());
  EXPECT_EQ(r.dir, older);
  EXPECT_NE(r.warning.find(newest + "/model.bin' is corrupt (CRC32 mismatch)"), std::string::npos)
      << r.warning;
  EXPECT_NE(r.warning.find("resuming from " + older), std::string::npos) << r.warning;
  Trainer resumed(o, *comm, corpus());  // from --save-dir: the older one
  EXPECT_EQ(resumed.start_update(), 2);
  Options explicit_restore = o;
  explicit_restore.restore_file = newest;
  try {
    Trainer refused(explicit_restore, *comm, corpus());
    ADD_FAILURE() << "an explicit --restore-file of a corrupt checkpoint was accepted";
  } catch (const CorruptCheckpoint& e) {
    EXPECT_NE(std::string(e.what()).find("model.bin' is corrupt"), std::string::npos) << e.what();
  }
  // A damaged rank file fails verification too; with none left, the resume is refused.
  std::vector<char> rank = file_bytes(older + "/rank0.bin");
  rank[rank.size() - 1] ^= 0x01;
  write_bytes(older + "/rank0.bin", rank);
  try {
    checkpoint_to_resume(d.path.string());
    ADD_FAILURE() << "resumed with no checkpoint that verifies";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(newest + "/model.bin' is corrupt"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("holds no older checkpoint that verifies"),
              std::string::npos) << e.what();
  }
}

TEST(Checkpoint, RestoreFileThatDoesNotExistNamesTheCheckpointsBesideIt) {
  FLAGS_minloglevel = 2;
  auto comm = make_single_communicator();
  TempDir d("pn_ckpt_missing");
  auto message = [](const fs::path& dir) {
    try {
      check_checkpoint_dir(dir.string());
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string none = message(d.path / "checkpoint_9");
  EXPECT_NE(none.find("there is no checkpoint there"), std::string::npos) << none;
  EXPECT_NE(none.find("holds no checkpoint"), std::string::npos) << none;
  EXPECT_NE(message(d.path / "nowhere" / "checkpoint_9").find("does not exist either"),
            std::string::npos);
  saved_at_2_and_4(d.path.string(), *comm);
  const std::string held = message(d.path / "checkpoint_9");
  EXPECT_NE(held.find("--restore-file '" + (d.path / "checkpoint_9").string() +
                      "': there is no checkpoint there"), std::string::npos) << held;
  EXPECT_NE(held.find("holds checkpoint_2, checkpoint_4 and checkpoint_best"), std::string::npos)
      << held;
  EXPECT_EQ(message(d.path / "checkpoint_4"), "accepted");
  fs::remove(d.path / "checkpoint_4" / "DONE");
  EXPECT_NE(message(d.path / "checkpoint_4").find("no DONE marker"), std::string::npos);
}

}  // namespace
}  // namespace pn
