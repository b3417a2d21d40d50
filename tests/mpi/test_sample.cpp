// Text from a language model at any rank count: every rank computes the same samples, and they
// equal one process's from the same checkpoint (PN, rank-local state, evaluated with the mean).
#include <glog/logging.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "../lm_fixtures.h"
#include "mpi_env.h"
#include "trainer/sample.h"

namespace pn {
namespace {

TEST(SampleRanks, EveryRankAndOneProcessDrawTheSameText) {
  FLAGS_minloglevel = 1;
  namespace fs = std::filesystem;
  Communicator& w = test::world();
  double pid = double(::getpid());
  w.broadcast(&pid, sizeof(pid), 0);
  const fs::path dir =
      fs::temp_directory_path() / ("pn_sample_mpi_" + std::to_string(int64_t(pid)));
  Options o = test::small_lm();
  o.norm_self = o.norm_ff = o.norm_final = "power";
  o.max_update = 10;
  o.save_dir = dir.string();
  o.pn_eval_state = EvalState::mean;
  Trainer(o, w, test::builtin()).train();
  SampleOptions s;
  s.count = 3;
  s.max_len = 10;
  s.seed = 11;
  Trainer ranks(o, w, test::builtin());
  const auto a = sample_text(ranks, s);
  auto single = make_single_communicator();
  Trainer one(o, *single, test::builtin());  // restores the mean of the saved ranks' state
  const auto b = sample_text(one, s);
  double sum = 0, mismatch = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "sample " << i;
    mismatch += a[i].tokens != b[i].tokens;
    for (int32_t t : a[i].tokens) sum = sum * 31 + t;
  }
  double lo = sum, hi = sum;
  w.allreduce_max(&hi, 1);
  lo = -lo;
  w.allreduce_max(&lo, 1);
  EXPECT_EQ(hi, -lo);  // the same text on every rank
  w.barrier();
  if (w.rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace pn
