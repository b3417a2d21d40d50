// fairseq-preprocess output under mpirun: a PTB and an IWSLT'14 slice written as data-bins train
// to exactly the losses of the same text at every rank count (each rank maps the same files).
#include <glog/logging.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "../fairseq_writer.h"
#include "../lm_fixtures.h"
#include "../test_translation_fixtures.h"
#include "mpi_env.h"
#include "trainer/fairseq_data.h"
#include "trainer/trainer.h"

namespace pn {
namespace {

namespace fs = std::filesystem;

// A directory named after rank 0's pid, written by rank 0 (`write` returns false without the
// shared data; every rank then learns it), removed at the end.
struct SharedDir {
  fs::path path;
  bool ok = false;
  SharedDir(const std::string& tag, const std::function<bool(const fs::path&)>& write) {
    Communicator& w = test::world();
    double pid = double(::getpid());
    w.broadcast(&pid, sizeof(pid), 0);
    path = fs::temp_directory_path() /
           ("pn_fairseq_mpi_" + tag + "_" + std::to_string(int64_t(pid)));
    double written = 0;
    if (w.rank() == 0) {
      fs::remove_all(path);
      written = write(path) ? 1 : 0;
    }
    w.broadcast(&written, sizeof(written), 0);
    ok = written > 0;
  }
  ~SharedDir() {
    test::world().barrier();
    if (test::world().rank() == 0) fs::remove_all(path);
  }
};

TEST(FairseqDataRanks, PtbDataBinTrainsToExactlyTheLossesOfTheText) {
  FLAGS_minloglevel = 1;
  SharedDir d("ptb", [](const fs::path& p) { return test::write_ptb_slice(p, 600, 80); });
  if (!d.ok) GTEST_SKIP() << "no ../shared/data/ptb";
  Options o = test::small_lm();
  o.tokens_per_sample = 32;
  o.max_tokens = 128;
  o.decoder_layers = 1;
  o.max_update = 3;
  o.validate_interval_updates = 3;
  o.norm_self = o.norm_ff = o.norm_final = "power";
  Communicator& w = test::world();
  const TrainResult a = Trainer(o, w, load_corpus((d.path / "text").string())).train();
  const TrainResult b = Trainer(o, w, load_corpus((d.path / "bin").string())).train();
  EXPECT_EQ(a.losses.size(), 3u);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.valid_nll, b.valid_nll);
}

TEST(FairseqDataRanks, IwsltDataBinTrainsToExactlyTheLossesOfTheText) {
  FLAGS_minloglevel = 1;
  SharedDir d("iwslt", [](const fs::path& p) { return test::write_iwslt_slice(p, 90, 20, true); });
  if (!d.ok) GTEST_SKIP() << "no IWSLT'14 data";
  Options o = test::small_mt();
  o.max_tokens = 256;
  o.max_update = 3;
  o.validate_interval_updates = 3;
  o.encoder_norm_self = o.encoder_norm_ff = o.encoder_norm_final = "power";
  Communicator& w = test::world();
  const TrainResult a =
      Trainer(o, w, load_parallel_corpus((d.path / "text").string(), "de", "en", true)).train();
  const TrainResult b =
      Trainer(o, w, load_parallel_corpus((d.path / "bin").string(), "de", "en", true)).train();
  EXPECT_EQ(a.losses.size(), 3u);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.valid_nll, b.valid_nll);
}

}  // namespace
}  // namespace pn
