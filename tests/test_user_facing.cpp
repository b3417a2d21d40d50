// What a new user meets first: flag names and their fairseq meanings, --help, the learning-rate
// schedules (against values computed by hand), and checkpoints that carry their configuration.
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kernels/cpu/cpu_features.h"
#include "temp_dir.h"
#include "lm_fixtures.h"
#include "trainer/checkpoint.h"
#include "trainer/options.h"
#include "trainer/schedule.h"
#include "trainer/trainer.h"

namespace fs = std::filesystem;

namespace pn {
namespace {

Options parse(std::vector<std::string> args) {
  args.insert(args.begin(), "pntrain");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Options o;
  std::string help;
  EXPECT_TRUE(parse_options(int(argv.size()), argv.data(), &o, &help));
  return o;
}

std::string parse_error(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Flags, OnlyWholeNamesAndFairseqMeanings) {
  // fairseq's --save-interval is epochs; it no longer becomes --save-interval-updates.
  Options o = parse({"--save-interval", "1"});
  EXPECT_EQ(o.save_interval, 1);
  EXPECT_EQ(o.save_interval_updates, 0);
  EXPECT_NE(parse_error({"--save-interval-upd", "1"}).find("did you mean --save-interval-updates"),
            std::string::npos);
  EXPECT_NE(parse_error({"--dropuot", "0.1"}).find("did you mean --dropout"), std::string::npos);
  EXPECT_NE(parse_error({"--num-workers", "4"}).find("pntrain has no --num-workers"),
            std::string::npos);
  EXPECT_NE(parse_error({"--batch-size", "8"}).find("--max-tokens"), std::string::npos);
  o = parse({"--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9", "--optimizer", "adam"});
  EXPECT_DOUBLE_EQ(o.adam_beta1, 0.9);
  EXPECT_DOUBLE_EQ(o.adam_beta2, 0.98);
  EXPECT_DOUBLE_EQ(o.adam_eps, 1e-9);
  EXPECT_NE(parse_error({"--adam-betas", "0.9"}).find("'(0.9, 0.98)'"), std::string::npos);
  EXPECT_EQ(parse({"--cpu"}).device, "cpu");
  o = parse({"--bf16", "--cpu"});
  EXPECT_EQ(o.precision, "bf16");
  // A CPU without the bf16 instructions is told which flag it lacks, before any work (the mask
  // makes any CPU one), and how to run bf16's numerics anyway; PN_BF16_EMULATE=1 is that way.
  setenv("PN_CPU_WITHOUT", "avx2,avx512_bf16", 1);
  EXPECT_FALSE(cpu_has("avx512_bf16"));
  try {
    validate_options(o);
    ADD_FAILURE() << "bf16 on a CPU without AVX512_BF16 was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string why = e.what();
    EXPECT_NE(why.find("needs the AVX512_BF16 instructions"), std::string::npos) << why;
    EXPECT_NE(why.find("no avx512_bf16 among the flags"), std::string::npos) << why;
    EXPECT_NE(why.find("PN_BF16_EMULATE=1"), std::string::npos) << why;
  }
  setenv("PN_BF16_EMULATE", "1", 1);
  EXPECT_NO_THROW(validate_options(o));
  unsetenv("PN_BF16_EMULATE");
  unsetenv("PN_CPU_WITHOUT");
  if (cpu_has("avx512_bf16")) {
    EXPECT_NO_THROW(validate_options(o));
  }
  // tf32 is a tensor-core format: the CPU has none.
  try {
    validate_options(parse({"--precision", "tf32", "--cpu"}));
    ADD_FAILURE() << "tf32 on the CPU was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tf32 needs a GPU"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(cpu_has("sse2") && cpu_has("fpu"));  // flags are read (x86-64 has both)
  // tf32 and bf16 pass the flag checks where a GPU is asked for.
  EXPECT_NO_THROW(validate_options(parse({"--precision", "tf32", "--device", "cuda"})));
  EXPECT_NO_THROW(validate_options(parse({"--bf16", "--device", "cuda"})));
  EXPECT_EQ(parse({"--log-format", "json"}).log_format, LogFormat::json);
  EXPECT_THROW(validate_options(parse({"--log-format", "tqdm"})), std::invalid_argument);
  EXPECT_EQ(parse({"--lr-scheduler", "cosine"}).lr_scheduler, LrScheduler::cosine);
}

TEST(Flags, MaxTokensIsRoundedToWholeSamplesAndSaysSo) {
  Options o = parse({"--max-tokens", "1000", "--tokens-per-sample", "64"});
  EXPECT_EQ(o.max_tokens, 960);
  ASSERT_EQ(o.notes.size(), 1u);
  EXPECT_NE(o.notes[0].find("rounded down to 960"), std::string::npos);
  EXPECT_TRUE(parse({"--max-tokens", "1024"}).notes.empty());
}

TEST(Flags, TheLastOfARepeatedFlagWinsAndIsNamed) {
  Options o = parse({"--lr", "0.1", "--max-update", "7", "--lr", "0.002", "--cpu", "--cpu"});
  EXPECT_DOUBLE_EQ(o.lr, 0.002);
  EXPECT_EQ(o.max_update, 7);
  EXPECT_EQ(o.device, "cpu");
  ASSERT_EQ(o.notes.size(), 2u);
  EXPECT_EQ(o.notes[0], "--lr is given 2 times: the last one wins (--lr 0.002)");
  EXPECT_EQ(o.notes[1], "--cpu is given 2 times: the last one wins (--cpu)");
  // In a config file too; the command line still wins over the file.
  test::TempDir tmp("pn_repeated");
  const std::string ini = (tmp.path / "run.ini").string();
  std::ofstream(ini) << "lr = 0.1\nlr = 0.003\nmax-update = 5\ndropout = 0.2\n";
  o = parse({"--config", ini, "--dropout", "0.3", "--dropout", "0.4"});
  EXPECT_DOUBLE_EQ(o.lr, 0.003);
  EXPECT_EQ(o.max_update, 5);
  EXPECT_DOUBLE_EQ(o.dropout, 0.4);
  ASSERT_EQ(o.notes.size(), 2u);
  EXPECT_EQ(o.notes[0], "--dropout is given 2 times: the last one wins (--dropout 0.4)");
  EXPECT_EQ(o.notes[1], "--lr is given 2 times in '" + ini + "': the last one wins (--lr 0.003)");
}

// --norm on the command line sets every place the config file names (the command line wins);
// a place named on the command line beside it, or in the file beside the file's own --norm,
// keeps its own.
TEST(Flags, NormOnTheCommandLineWinsOverTheConfigsPlaces) {
  test::TempDir tmp("pn_norm_places");
  const std::string ini = (tmp.path / "mt.ini").string();
  std::ofstream(ini) << "encoder-norm-self = power\ndecoder-norm-ff = layer\nnorm-final = rms\n";
  Options o = parse({"--config", ini, "--norm", "batch"});
  EXPECT_EQ(o.encoder_norm_self, "batch");
  EXPECT_EQ(o.decoder_norm_ff, "batch");
  EXPECT_EQ(o.norm_final, "batch");
  EXPECT_EQ(o.norm_self, "batch");
  o = parse({"--config", ini, "--norm", "batch", "--decoder-norm-ff", "group"});
  EXPECT_EQ(o.decoder_norm_ff, "group");
  EXPECT_EQ(o.encoder_norm_self, "batch");
  o = parse({"--config", ini});  // the file alone: its places as written
  EXPECT_EQ(o.encoder_norm_self, "power");
  EXPECT_EQ(o.norm_final, "rms");
  std::ofstream(ini) << "norm = power_v\nnorm-final = layer\n";
  o = parse({"--config", ini});
  EXPECT_EQ(o.norm_self, "power_v");
  EXPECT_EQ(o.norm_final, "layer");
  o = parse({"--norm", "batch", "--norm-final", "power"});
  EXPECT_EQ(o.norm_ff, "batch");
  EXPECT_EQ(o.norm_final, "power");
}

TEST(Flags, HelpShowsDefaultsAsWrittenAndChoices) {
  std::vector<std::string> args = {"pntrain", "--help"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Options o;
  std::string help;
  EXPECT_FALSE(parse_options(2, argv.data(), &o, &help));
  EXPECT_NE(help.find("--dropout arg (=0.1)"), std::string::npos);
  EXPECT_EQ(help.find("0.10000000000000001"), std::string::npos);
  EXPECT_NE(help.find("--norm-eps arg (=1e-05)"), std::string::npos);
  // Choices may wrap: compare without the line breaks and indentation.
  std::string flat;
  for (char c : help) {
    const bool space = c == ' ' || c == '\n';
    if (!space || (!flat.empty() && flat.back() != ' ')) flat += space ? ' ' : c;
  }
  std::string norms;  // the registry's names (layers/norms/norms.inc)
  for (const std::string& k : norm_kinds()) norms += (norms.empty() ? "" : ", ") + k;
  EXPECT_NE(flat.find("(choices: " + norms + ")"), std::string::npos) << norms;
  EXPECT_NE(norms.find("layer, rms"), std::string::npos);
  EXPECT_NE(flat.find("(choices: inverse_sqrt, fixed, cosine, polynomial_decay)"),
            std::string::npos);
}

TEST(Flags, StatisticsBatchFollowsRanksSyncGroupsAndGhostGroups) {
  Options o;
  o.max_tokens = 2048;
  EXPECT_EQ(statistics_batch_tokens(o, "sync_batch", 4), 8192);   // all 4 ranks
  EXPECT_EQ(statistics_batch_tokens(o, "batch", 4), 2048);         // the rank's own
  EXPECT_EQ(statistics_batch_tokens(o, "layer", 4), 0);            // no batch statistics
  o.sync_group_size = 2;
  EXPECT_EQ(statistics_batch_tokens(o, "sync_power", 4), 4096);
  EXPECT_EQ(statistics_batch_tokens(o, "power", 4), 2048);
  o.tokens_per_sample = 64;
  o.stats_batch_tokens = 512;  // 4 ghost groups
  EXPECT_EQ(statistics_batch_tokens(o, "sync_power_v", 4), 1024);
  EXPECT_EQ(statistics_batch_tokens(o, "batch", 4), 512);
}

TEST(Flags, SyncGroupSizeMustDivideTheWorld) {
  EXPECT_EQ(sync_group_error(0, 4), "");
  EXPECT_EQ(sync_group_error(2, 4), "");
  EXPECT_EQ(sync_group_error(4, 4), "");
  const std::string e = sync_group_error(3, 4);
  EXPECT_NE(e.find("--sync-group-size 3"), std::string::npos) << e;
  EXPECT_NE(e.find("world size 4"), std::string::npos) << e;
  EXPECT_NE(e.find("1, 2, 4"), std::string::npos) << e;
  EXPECT_NE(sync_group_error(8, 4), "");
  // At one process the group is the process: K = 1 only (0: the default).
  auto single = make_single_communicator();
  EXPECT_EQ(make_group_communicator(*single, 0)->size(), 1);
  EXPECT_THROW(make_group_communicator(*single, 2), std::invalid_argument);
  Options bad;
  bad.sync_group_size = -1;
  EXPECT_THROW(validate_options(bad), std::invalid_argument);
}

TEST(Schedule, CosineAgainstValuesByHand) {
  Schedule s;
  s.scheduler = LrScheduler::cosine;
  s.lr = 1.0, s.min_lr = 0.1, s.warmup_updates = 10, s.lr_period_updates = 100,
  s.lr_shrink = 0.5;
  EXPECT_NEAR(learning_rate(s, 5), 0.5, 1e-12);    // warmup 0 -> 1 over 10 updates
  EXPECT_NEAR(learning_rate(s, 10), 1.0, 1e-12);   // period start: lr
  EXPECT_NEAR(learning_rate(s, 60), 0.55, 1e-12);  // mid-period: (1 + 0.1) / 2
  EXPECT_NEAR(learning_rate(s, 110), 0.5, 1e-12);  // second period, shrunk by 0.5
  EXPECT_NEAR(learning_rate(s, 160), 0.275, 1e-12);  // (0.5 + 0.05) / 2
  // t_mult 2: periods of 10, 20, 40 updates.
  Schedule m;
  m.scheduler = LrScheduler::cosine;
  m.lr = 1.0, m.min_lr = 0.0, m.warmup_updates = 0, m.lr_period_updates = 10, m.t_mult = 2,
  m.lr_shrink = 1.0;
  EXPECT_NEAR(learning_rate(m, 5), 0.5, 1e-12);                       // half of period 0
  EXPECT_NEAR(learning_rate(m, 15), 0.5 * (1 + std::sqrt(0.5)), 1e-12);  // quarter of period 1
  EXPECT_NEAR(learning_rate(m, 20), 0.5, 1e-12);                      // half of period 1
  // Without --lr-period-updates the one period spans max_update - warmup.
  Schedule one = s;
  one.lr_period_updates = -1, one.max_update = 110;
  EXPECT_NEAR(learning_rate(one, 60), 0.55, 1e-12);
}

TEST(Schedule, PolynomialDecayAgainstValuesByHand) {
  Schedule s;
  s.scheduler = LrScheduler::polynomial_decay;
  s.lr = 1.0, s.end_learning_rate = 0.1, s.power = 2, s.warmup_updates = 10,
  s.total_num_update = 110;
  EXPECT_NEAR(learning_rate(s, 5), 0.5, 1e-12);     // warmup from 0
  EXPECT_NEAR(learning_rate(s, 10), 1.0, 1e-12);
  EXPECT_NEAR(learning_rate(s, 60), 0.325, 1e-12);  // 0.9 * 0.5^2 + 0.1
  EXPECT_NEAR(learning_rate(s, 110), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(s, 500), 0.1, 1e-12);
  s.power = 1;
  EXPECT_NEAR(learning_rate(s, 35), 0.775, 1e-12);  // 0.9 * 0.75 + 0.1
  // The older schedules keep their values.
  EXPECT_DOUBLE_EQ(learning_rate(LrScheduler::inverse_sqrt, 1e-3, 0, 100, 400), 5e-4);
}

const Corpus& corpus_of(const std::string& pet) {
  static std::map<std::string, Corpus> cache;
  auto it = cache.find(pet);
  if (it == cache.end()) {
    std::string train;
    for (int i = 0; i < 20; ++i) train += "the " + pet + " sat on the mat and the dog ran off\n";
    it = cache.emplace(pet, corpus_from_text(pet, train, "the dog\n", "the dog\n")).first;
  }
  return it->second;
}

using test::TempDir;

Options small(const std::string& dir) {
  Options o = test::small_lm();
  o.decoder_layers = 1;
  o.max_tokens = 64;
  o.max_update = 2;
  o.norm_self = o.norm_ff = "power";
  o.save_dir = dir;
  return o;
}

TEST(CheckpointConfig, FlagsComeFromTheCheckpointAndDisagreementIsRefused) {
  FLAGS_minloglevel = 2;
  auto comm = make_single_communicator();
  TempDir d("pn_user_cfg");
  Options trained = small(d.path.string());
  Trainer(trained, *comm, corpus_of("cat")).train();
  const std::string ck = (d.path / "checkpoint_2").string();
  const auto stored = checkpoint_flags(ck);
  ASSERT_FALSE(stored.empty());
  // One stored form: the options, every flag's value as text, and nothing else.
  const nlohmann::json header = read_checkpoint_header(ck + "/model.bin");
  EXPECT_TRUE(header.contains("options"));
  EXPECT_FALSE(header.contains("config"));
  EXPECT_FALSE(header.contains("flags"));
  EXPECT_EQ(stored.at("decoder-embed-dim"), "32");
  EXPECT_EQ(stored.count("save-dir"), 0u);

  Options eval;  // nothing but the checkpoint
  eval.eval_only = true;
  eval.restore_file = ck;
  take_checkpoint_flags(stored, ck, &eval);
  EXPECT_EQ(eval.decoder_embed_dim, 32);
  EXPECT_EQ(eval.decoder_layers, 1);
  EXPECT_EQ(eval.norm_self, "power");
  EXPECT_EQ(eval.tokens_per_sample, 16);
  Trainer t(eval, *comm, corpus_of("cat"));
  EXPECT_EQ(t.start_update(), 2);

  Options clash;
  clash.decoder_embed_dim = 64;
  clash.given.insert("decoder-embed-dim");
  try {
    take_checkpoint_flags(stored, ck, &clash);
    ADD_FAILURE() << "a disagreeing flag was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--decoder-embed-dim 64"), std::string::npos) << m;
    EXPECT_NE(m.find("trained with --decoder-embed-dim 32"), std::string::npos) << m;
  }
  Options same;  // a given flag that agrees is fine
  same.decoder_embed_dim = 32;
  same.given.insert("decoder-embed-dim");
  EXPECT_NO_THROW(take_checkpoint_flags(stored, ck, &same));

  Options other_lr;  // a training flag given otherwise: applied, with one note naming both
  other_lr.lr = 0.001;
  other_lr.given.insert("lr");
  take_checkpoint_flags(stored, ck, &other_lr);
  EXPECT_EQ(other_lr.lr, 0.001);
  ASSERT_EQ(other_lr.notes.size(), 1u);
  EXPECT_NE(other_lr.notes[0].find("--lr 0.001 (the checkpoint's run: 0.003)"), std::string::npos)
      << other_lr.notes[0];
}

// Checkpoints written before "options" was the one stored form kept "config" (the model and data
// flags as JSON values), "flags" (the given flags as written) and "options": they still give the
// run's flags.
TEST(CheckpointConfig, OlderHeadersGiveTheSameFlags) {
  const nlohmann::json old = {
      {"config", {{"decoder-embed-dim", 32}, {"norm-eps", 1e-5}, {"norm-self", "power"},
                  {"share-all-embeddings", false}, {"data", "/abs/corpus"}}},
      {"flags", {{"lr", "3e-3"}, {"decoder-embed-dim", "32"}, {"norm", "power"},
                 {"adam-betas", "(0.8, 0.9)"}}},
      {"options", {{"lr", "0.003"}, {"decoder-embed-dim", "32"}, {"norm", "power"},
                   {"adam-betas", "(0.8, 0.9)"}, {"adam-betas-1", "0.9"}, {"dropout", "0.1"},
                   {"data", "corpus"}}}};
  const auto stored = stored_flags(old);
  EXPECT_EQ(stored.at("lr"), "0.003");  // the value the run took
  EXPECT_EQ(stored.at("data"), "/abs/corpus");
  EXPECT_EQ(stored.at("norm-eps"), "1e-05");
  EXPECT_EQ(stored.at("share-all-embeddings"), "false");
  EXPECT_EQ(stored.count("dropout"), 0u);  // not given: the default then and now
  Options o;
  take_checkpoint_flags(stored, "old", &o);
  EXPECT_EQ(o.lr, 0.003);
  EXPECT_EQ(o.decoder_embed_dim, 32);
  EXPECT_EQ(o.norm_self, "power");
  EXPECT_EQ(o.norm_eps, 1e-5);
  EXPECT_EQ(o.data, "/abs/corpus");
  EXPECT_EQ(o.adam_beta1, 0.8);  // fairseq's spelling applied
  EXPECT_EQ(o.adam_beta2, 0.9);
  EXPECT_TRUE(o.notes.empty());
  // "config" alone (the oldest form with flags), and a header with none.
  EXPECT_EQ(stored_flags({{"config", {{"decoder-layers", 3}}}}).at("decoder-layers"), "3");
  EXPECT_TRUE(stored_flags(nlohmann::json::object()).empty());
}

TEST(CheckpointConfig, AnotherVocabularyOfTheSameSizeIsRefused) {
  FLAGS_minloglevel = 2;
  auto comm = make_single_communicator();
  TempDir d("pn_user_vocab");
  Options o = small(d.path.string());
  Trainer(o, *comm, corpus_of("cat")).train();
  ASSERT_EQ(corpus_of("cat").vocab.size(), corpus_of("cow").vocab.size());
  try {
    Trainer t(o, *comm, corpus_of("cow"));
    ADD_FAILURE() << "a checkpoint of another vocabulary was restored";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("another vocabulary"), std::string::npos) << e.what();
  }
}

TEST(CheckpointConfig, OlderCheckpointsWithoutConfigurationStillLoad) {
  FLAGS_minloglevel = 2;
  auto comm = make_single_communicator();
  TempDir d("pn_user_old");
  Options o = small(d.path.string());
  Trainer(o, *comm, corpus_of("cat")).train();
  const std::string model = (d.path / "checkpoint_2" / "model.bin").string();
  CheckpointFile f = read_checkpoint_file(model);
  f.header.erase("options");
  f.header.erase("vocab");
  write_checkpoint_file(model, f);
  EXPECT_TRUE(checkpoint_flags((d.path / "checkpoint_2").string()).empty());
  Trainer t(o, *comm, corpus_of("cat"));
  EXPECT_EQ(t.start_update(), 2);
}

TEST(Checkpoint, UnwritableSaveDirIsFoundAtStartup) {
  TempDir d("pn_user_probe");
  std::ofstream(d.path / "file") << "x";
  EXPECT_THROW(check_writable_dir((d.path / "file" / "ck").string(), 0), std::invalid_argument);
  EXPECT_NO_THROW(check_writable_dir((d.path / "ok").string(), 0));
  EXPECT_TRUE(fs::is_directory(d.path / "ok"));
  EXPECT_TRUE(fs::is_empty(d.path / "ok"));  // the probe file is gone
}

}  // namespace
}  // namespace pn
