// The device path against the CPU: the same training runs on the CPU and on a device, for every
// norm and both architectures, compared update by update.
//
// The device is `cuda`: a GPU where one is visible, and in the emulation build (build/emu) the
// CUDA emulation on the CPU, whose device memory the host cannot read (a wiring mistake faults);
// skipped with the runtime's reason elsewhere, failed under PN_CUDA_REQUIRED=1. With TF32 off:
// losses within 1e-4 relative over the first 10 updates and every running statistic within 1e-5
// after update 1.
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/device.h"
#include "kernels/kernels.h"
#include "launcher/programs/openblas_core.h"
#include "lm_fixtures.h"
#include "model/lm.h"
#include "test_translation_fixtures.h"
#include "trainer/options.h"
#include "trainer/trainer.h"

namespace pn {
namespace {

// Skips (or, under PN_CUDA_REQUIRED=1, fails) when `device` cannot run here.
#define PN_REQUIRE_DEVICE(device)                                                          \
  do {                                                                                     \
    if ((device) == Device::CUDA) {                                                        \
      const std::string why_ = cuda_unavailable_reason();                                  \
      if (!why_.empty()) {                                                                 \
        const char* req_ = std::getenv("PN_CUDA_REQUIRED");                                \
        if (req_ && std::string(req_) == "1") FAIL() << "PN_CUDA_REQUIRED=1: " << why_;    \
        GTEST_SKIP() << "no usable GPU: " << why_;                                         \
      }                                                                                    \
    }                                                                                      \
  } while (0)

struct RunResult {
  std::vector<double> losses;
  std::vector<std::vector<double>> state;  // every norm's running state, in model order
  std::vector<std::string> state_names;    // running_mean, running_var, ... of each
  double valid_nll = 0;
  std::vector<std::string> hyps;  // translation: beam search over the test split
  int padded_vocab = 0;           // the output layer's rows (layers/embedding.h)
  bool padding_zero = true;       // its padded rows in the parameters and gradients
};

void read_output_padding(Trainer& t, RunResult* r) {
  const Embedding<float>& e =
      t.is_translation() ? t.translation_model().target_embedding() : t.model().embed;
  const ParamSpec& s = t.params().specs[size_t(e.table)];
  r->padded_vocab = e.padded_vocab;
  for (const std::vector<float>& b : {t.params().data.to_host(), t.params().grad.to_host()})
    for (size_t i = s.offset + s.numel; i < s.offset + s.numel + s.reserve; ++i)
      r->padding_zero = r->padding_zero && b[i] == 0.0f;
}

void read_norm_state(Trainer& t, RunResult* r) {
  for (Norm<float>* n : t.norms())
    for (const StateTensor& s : n->state()) {
      r->state.push_back(read_state(s));
      r->state_names.push_back(s.name);
    }
}

// Trains o on `device` (the LM on the builtin corpus, or translation on the toy corpus).
RunResult train_on(Device device, const Options& o) {
  DeviceScope scope(device);
  auto comm = make_single_communicator();
  RunResult r;
  auto finish = [&](Trainer& t) {
    const TrainResult tr = t.train();
    r.losses = tr.losses;
    read_norm_state(t, &r);
    read_output_padding(t, &r);
    r.valid_nll = tr.valid_nll;
  };
  if (o.arch == Arch::transformer) {
    Trainer t(o, *comm, test::toy_corpus());
    finish(t);
    GenerateOptions g;
    g.beam = 2;
    r.hyps = t.generate(test::toy_corpus().test, g, false, false).hyps;
  } else {
    Trainer t(o, *comm, test::builtin());
    finish(t);
  }
  return r;
}

void expect_same_run(Device device, const RunResult& dev, const RunResult& cpu, double loss_rtol,
                     double state_atol, const std::string& what) {
  // A GPU's output layer runs over the vocabulary padded to 64 rows, zeros throughout; the
  // CPU's over the vocabulary.
  const int m = device == Device::CUDA ? 64 : 1;
  EXPECT_EQ(dev.padded_vocab, (cpu.padded_vocab + m - 1) / m * m) << what;
  EXPECT_TRUE(dev.padding_zero) << what;
  ASSERT_EQ(dev.losses.size(), cpu.losses.size()) << what;
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    EXPECT_NEAR(dev.losses[i], cpu.losses[i], loss_rtol * std::fabs(cpu.losses[i]))
        << what << ": update " << i + 1;
  }
  ASSERT_EQ(dev.state.size(), cpu.state.size()) << what;
  for (size_t k = 0; k < cpu.state.size(); ++k) {
    ASSERT_EQ(dev.state[k].size(), cpu.state[k].size()) << what << ": state " << k;
    // The largest difference of each state tensor, so that a failure names every tensor off.
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < cpu.state[k].size(); ++i) {
      const double diff = std::fabs(dev.state[k][i] - cpu.state[k][i]);
      if (diff > worst) worst = diff, at = i;
    }
    EXPECT_LE(worst, state_atol) << what << ": state " << k << " (" << cpu.state_names[k]
                                 << ") differs most at [" << at << "]: " << dev.state[k][at]
                                 << " on the device, " << cpu.state[k][at] << " on the CPU";
  }
}

// Where every reader of the residual stream subtracts a batch mean (BN everywhere), a constant
// per-feature shift of the stream is invisible to the loss, so the gradients of the biases that
// set it are 0 up to rounding, and Adam with a tiny eps moves them by about lr on the sign of
// that rounding: the running means then part by ~lr per update between any two summation
// orders (seen on an H100 with eps 1e-8: 2.4e-3 after 10 updates, losses within 1e-4). An eps
// far above the rounding and far below the real gradients keeps those biases still.
constexpr double kAdamEps = 1e-6;

void set_norm(Options* o, const char* kind) { o->norm_self = o->norm_ff = o->norm_final = kind; }

// A norm setting of the comparison: the kind and what it changes in the options.
struct NormCase {
  std::string name;
  std::function<void(Options*)> apply;
};
// Every norm of the registry, then settings of some.
const std::vector<NormCase> kNormCases = [] {
  std::vector<NormCase> cases;
  for (const NormInfo& n : norm_registry())
    cases.push_back({n.name, [kind = n.name](Options* o) { set_norm(o, kind.c_str()); }});
  cases.insert(cases.end(), {
    {"power_authors_prescaled",
     [](Options* o) {
       set_norm(o, "power");
       o->pn_variant = PnVariant::authors;
       o->norm_prescale_groups = 2;
     }},
    {"batch_ghost_stats_accumulation",
     [](Options* o) {
       set_norm(o, "batch");
       o->stats_batch_tokens = 64;
       o->update_freq = 2;
     }},
    {"power_probed",
     [](Options* o) {
       set_norm(o, "power");
       o->probe_norm_stats = "all";
     }},
  });
  return cases;
}();

class DeviceLm : public ::testing::TestWithParam<std::tuple<Device, int>> {};

TEST_P(DeviceLm, TrainsAsTheCpu) {
  FLAGS_minloglevel = 1;
  const Device device = std::get<0>(GetParam());
  PN_REQUIRE_DEVICE(device);
  const NormCase& c = kNormCases[std::get<1>(GetParam())];
  Options o = test::small_lm();
  o.max_tokens = 256;
  o.max_update = 10;
  o.validate_interval_updates = 10;  // the evaluation path and its norm state too
  c.apply(&o);
  o.warmup_updates = 4;  // PN's warmup ends inside the run
  o.adam_eps = kAdamEps;
  const RunResult cpu = train_on(Device::CPU, o);
  const RunResult dev = train_on(device, o);
  expect_same_run(device, dev, cpu, 1e-4, 1e-3, c.name);
  // Every running statistic after update 1 (before errors could compound).
  o.max_update = 1;
  o.validate_interval_updates = 0;
  const RunResult cpu1 = train_on(Device::CPU, o), dev1 = train_on(device, o);
  expect_same_run(device, dev1, cpu1, 1e-4, 1e-5, std::string(c.name) + " after update 1");
}

std::string device_case_name(const ::testing::TestParamInfo<std::tuple<Device, int>>& info) {
  return device_name(std::get<0>(info.param)) + "_" + kNormCases[std::get<1>(info.param)].name;
}

INSTANTIATE_TEST_SUITE_P(Norms, DeviceLm,
                         ::testing::Combine(::testing::Values(Device::CUDA),
                                            ::testing::Range(0, int(std::size(kNormCases)))),
                         device_case_name);

class DeviceRuns : public ::testing::TestWithParam<Device> {};

TEST_P(DeviceRuns, TranslationTrainsAsTheCpu) {
  FLAGS_minloglevel = 1;
  const Device device = GetParam();
  PN_REQUIRE_DEVICE(device);
  for (const char* enc : {"batch", "power"}) {
    Options o = test::small_mt();
    o.encoder_norm_self = o.encoder_norm_ff = o.encoder_norm_final = enc;
    o.max_update = 10;
    o.dropout = 0.0;
    o.validate_interval_updates = 10;
    o.adam_eps = kAdamEps;
    const RunResult cpu = train_on(Device::CPU, o), dev = train_on(device, o);
    expect_same_run(device, dev, cpu, 1e-4, 1e-3, std::string("translation, encoder ") + enc);
    ASSERT_FALSE(cpu.hyps.empty());
  }
}

TEST_P(DeviceRuns, RepeatsItselfBitForBit) {
  FLAGS_minloglevel = 1;
  const Device device = GetParam();
  PN_REQUIRE_DEVICE(device);
  Options o = test::small_lm();
  set_norm(&o, "power");
  o.dropout = 0.1;
  o.max_update = 8;
  const RunResult a = train_on(device, o), b = train_on(device, o);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.state, b.state);
}

// A checkpoint written on the device resumes on the CPU (and the other way round) with the
// losses of the uninterrupted run.
TEST_P(DeviceRuns, CheckpointsMoveBetweenDevices) {
  FLAGS_minloglevel = 1;
  const Device device = GetParam();
  PN_REQUIRE_DEVICE(device);
  namespace fs = std::filesystem;
  for (const bool device_first : {true, false}) {
    const fs::path dir = fs::temp_directory_path() /
                         ("pn_device_ck_" + device_name(device) + (device_first ? "_a" : "_b"));
    fs::remove_all(dir);
    Options o = test::small_lm();
    set_norm(&o, "power");
    o.warmup_updates = 3;
    o.max_update = 8;
    const RunResult straight = train_on(device_first ? Device::CPU : device, o);
    o.save_dir = dir.string();
    o.max_update = 4;
    train_on(device_first ? device : Device::CPU, o);
    o.max_update = 8;
    const RunResult resumed = train_on(device_first ? Device::CPU : device, o);
    ASSERT_EQ(resumed.losses.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      const double want = straight.losses[4 + i];
      EXPECT_NEAR(resumed.losses[i], want, 1e-4 * std::fabs(want)) << "update " << 5 + i;
    }
    fs::remove_all(dir);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceRuns, ::testing::Values(Device::CUDA),
                         [](const ::testing::TestParamInfo<Device>& i) {
                           return device_name(i.param);
                         });

// What makes wiring mistakes fail on the device: element access of a device buffer throws, and
// (in the emulation, whose fresh device memory holds NaN bytes) a kernel reading unwritten memory
// reads NaN. A host read of device memory faults (tests/cuda/test_cuda_edges.cpp).
TEST(Devices, ElementAccessOfADeviceBufferThrows) {
  PN_REQUIRE_DEVICE(Device::CUDA);
  DeviceScope scope(Device::CUDA);
  Buf<float> b(4);
  EXPECT_THROW(b[0], std::logic_error);
}

TEST(Devices, FreshMemoryIsPoisonAndResizeZeroesNewElements) {
  PN_REQUIRE_DEVICE(Device::CUDA);
  DeviceScope scope(Device::CUDA);
#ifdef PN_CUDA_EMULATE
  float* raw = static_cast<float*>(device_alloc(4 * sizeof(float)));
  float host[4];
  copy_to_host(host, raw, sizeof host);
  synchronize();
  EXPECT_TRUE(std::isnan(host[0]));
  device_free(Device::CUDA, raw);
#endif
  Buf<float> b;
  b.resize(3);
  EXPECT_EQ(b.to_host(), std::vector<float>(3, 0.0f));  // as std::vector::resize
}

// configs/default.ini of this checkout: PN_SOURCE_DIR from the environment (a test binary moved
// to another machine, as `pn gpu-check` does), else the source directory it was built from.
std::string default_config() {
  const char* env = std::getenv("PN_SOURCE_DIR");
  const std::string path = std::string(env ? env : PN_SOURCE_DIR) + "/configs/default.ini";
  if (!std::filesystem::exists(path))
    throw std::runtime_error(path + " not found: set PN_SOURCE_DIR to the repository root");
  return path;
}

// --precision bf16 on a GPU: 200 updates of configs/default.ini end within 1% of the fp32 loss
// (the mean of the last 20 updates) for every norm (LN, RMS, group, BN, PN-V, PN in the paper's
// and the authors' forms); tf32 too for LN and PN.
TEST(Devices, CudaBf16AndTf32TrackFp32) {
  PN_REQUIRE_DEVICE(Device::CUDA);
  FLAGS_minloglevel = 1;
  const std::vector<std::vector<std::string>> norms = {
      {"--norm", "layer"},  {"--norm", "rms"},     {"--norm", "group"},
      {"--norm", "batch"},  {"--norm", "power_v"}, {"--norm", "power"},
      {"--norm", "power", "--pn-variant", "authors"}};
  for (const auto& norm : norms) {
    std::vector<std::string> args = {"pntrain", "--config", default_config(),
                                     "--max-update", "200", "--validate-interval-updates", "0"};
    args.insert(args.end(), norm.begin(), norm.end());
    const std::string name = norm.size() > 2 ? "power (authors)" : norm[1];
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    Options o;
    std::string help;
    ASSERT_TRUE(parse_options(int(argv.size()), argv.data(), &o, &help));
    const bool with_tf32 = name == "layer" || name == "power";
    double tail[3] = {0, 0, 0};
    const GemmMath maths[3] = {GemmMath::fp32, GemmMath::bf16, GemmMath::tf32};
    for (int m = 0; m < (with_tf32 ? 3 : 2); ++m) {
      DeviceScope scope(Device::CUDA, 0, maths[m]);
      auto comm = make_single_communicator();
      Trainer t(o, *comm, test::builtin());
      const TrainResult r = t.train();
      ASSERT_EQ(r.losses.size(), 200u) << name << " " << gemm_math_name(maths[m]);
      for (size_t i = 180; i < 200; ++i) tail[m] += r.losses[i] / 20;
    }
    EXPECT_NEAR(tail[1], tail[0], 0.01 * tail[0]) << name << ": bf16 against fp32";
    if (with_tf32) {
      EXPECT_NEAR(tail[2], tail[0], 0.01 * tail[0]) << name << ": tf32 against fp32";
    }
  }
}

// --attention cudnn against materialized on a GPU with bf16 GEMMs: a small LM (d 64, 2 heads of
// 32) trains to the same loss within 2% over 20 updates of 256 tokens, and the losses differ
// somewhere (cuDNN's attention ran).
TEST(Devices, CudaFusedAttentionTrainsAsMaterialized) {
  PN_REQUIRE_DEVICE(Device::CUDA);
  Options o = test::small_lm();
  o.decoder_embed_dim = 64, o.decoder_attention_heads = 2, o.max_update = 20, o.max_tokens = 256;
  // What each path keeps for the backward of one 16-token sequence (d 64, 2 heads): the
  // probabilities (2 x 16 x 16), or the log-sum-exps (2 x 16) and bf16 qkv and ctx.
  const Attention paths[2] = {Attention::materialized, Attention::cudnn};
  const size_t saved[2] = {512, 32 + 16 * 192 / 2 + 16 * 64 / 2};
  std::vector<double> losses[2];
  for (int p = 0; p < 2; ++p) {
    DeviceScope scope(Device::CUDA, 0, GemmMath::bf16);
    current_context().attention = paths[p];
    ASSERT_EQ(k::attention_saved_size(1, 16, 64, 2), saved[p]);
    // cuDNN's backward reads its bf16 copy: the fp32 q|k|v is the workspace's, shared by the layers.
    EXPECT_EQ(k::attention_backward_reads_qkv<float>(1, 16, 64, 2), p != 1);
    auto comm = make_single_communicator();
    Trainer t(o, *comm, test::builtin());
    losses[p] = t.train().losses;
    ASSERT_EQ(losses[p].size(), 20u);
  }
  double tail[2] = {0, 0};
  for (int p = 0; p < 2; ++p)
    for (size_t i = 15; i < 20; ++i) tail[p] += losses[p][i] / 5;
  EXPECT_NEAR(tail[1], tail[0], 0.02 * tail[0]);
  EXPECT_NE(losses[1], losses[0]) << "cuDNN's attention did not run";
}

// A StepGraph on a GPU: the first call runs and, having allocated nothing, is captured; later
// calls replay it, reading the inputs uploaded before each (y = 2x of this call's x); memory
// allocated between calls makes the next call run and capture again; a call that touches the
// host inside the capture ends the graphs for good, its eager run's work kept.
TEST(Devices, StepGraphReplaysReadingLiveInputs) {
  PN_REQUIRE_DEVICE(Device::CUDA);
  DeviceScope scope(Device::CUDA);
  current_context().cuda_graphs = true;
  const size_t n = 1000;
  Buf<float> x(n), y(n);
  StepGraph graph;
  const auto work = [&] { k::add<float>(x.data(), x.data(), n, y.data()); };
  for (int call = 1; call <= 4; ++call) {
    x.from_host(std::vector<float>(n, float(call)));
    graph.run({int64_t(n)}, work);
    if (call == 3) {
      Buf<float> grown(n);  // an allocation and a release: the graph is stale from here
    }
    const std::vector<float> got = y.to_host();
    EXPECT_EQ(got.front(), 2.0f * call) << "call " << call;
    EXPECT_EQ(got.back(), 2.0f * call) << "call " << call;
  }
  EXPECT_EQ(graph.captures(), 2);  // at call 1, and at call 4 after the allocation
  EXPECT_EQ(graph.replays(), 2);   // calls 2 and 3
  EXPECT_FALSE(graph.given_up());

  StepGraph syncing;
  std::vector<float> host(n, 0.0f);
  const auto reads_back = [&] {
    k::add<float>(x.data(), x.data(), n, y.data());
    copy_to_host(host.data(), y.data(), n * sizeof(float));
    synchronize();
  };
  x.from_host(std::vector<float>(n, 5.0f));
  syncing.run({int64_t(n)}, reads_back);
  EXPECT_TRUE(syncing.given_up());
  EXPECT_EQ(syncing.captures(), 0);
  EXPECT_EQ(host.front(), 10.0f);  // the eager run happened
  x.from_host(std::vector<float>(n, 6.0f));
  syncing.run({int64_t(n)}, reads_back);  // eager from now on
  EXPECT_EQ(host.back(), 12.0f);
  EXPECT_FALSE(capturing_step_graph());
}

// --cuda-graphs on against off: 8 updates of a small LM with dropout 0.3 (masks drawn from the
// seed each replay reads from the device), PN with its warmup counter on the device, two
// micro-steps per update and a validation every 3 updates (whose larger batches make the graph
// captured again), fp32 and then bf16 with cuDNN's attention: every loss, validation and running
// statistic equal to the bit, and the micro-steps replayed.
TEST(Devices, CudaGraphsTrainAsLaunchByLaunch) {
  PN_REQUIRE_DEVICE(Device::CUDA);
  FLAGS_minloglevel = 1;
  Options o = test::small_lm();
  set_norm(&o, "power");
  o.dropout = 0.3, o.update_freq = 2, o.max_update = 8, o.validate_interval_updates = 3;
  o.pn_warmup = 6;  // micro-steps
  Corpus corpus = test::builtin();
  std::vector<int32_t> valid = corpus.valid.to_vector();
  valid.resize(2048);  // a few batches: the emulation is slow
  corpus.valid = TokenStream(valid);
  for (GemmMath math : {GemmMath::fp32, GemmMath::bf16}) {
    RunResult runs[2];
    int64_t replays[2] = {0, 0}, captures[2] = {0, 0};
    for (int on = 0; on < 2; ++on) {
      o.cuda_graphs = on ? "on" : "off";
      DeviceScope scope(Device::CUDA, 0, math);
      auto comm = make_single_communicator();
      Trainer t(o, *comm, corpus);
      const TrainResult tr = t.train();
      runs[on].losses = tr.losses;
      runs[on].valid_nll = tr.valid_nll;
      read_norm_state(t, &runs[on]);
      replays[on] = t.model().step_graph.replays();
      captures[on] = t.model().step_graph.captures();
      EXPECT_FALSE(t.model().step_graph.given_up()) << gemm_math_name(math);
    }
    const std::string what = std::string("graphs on against off, ") + gemm_math_name(math);
    ASSERT_EQ(runs[1].losses.size(), 8u) << what;
    EXPECT_EQ(runs[1].losses, runs[0].losses) << what;
    EXPECT_EQ(runs[1].valid_nll, runs[0].valid_nll) << what;
    EXPECT_EQ(runs[1].state, runs[0].state) << what;
    EXPECT_EQ(replays[0], 0) << what;
    EXPECT_EQ(captures[0], 0) << what;
    EXPECT_GE(captures[1], 1) << what;
    EXPECT_GE(replays[1], 8) << what;  // of the 16 micro-steps
  }
}

// A GPU at bf16 keeps a norm's output and the feed-forward's hidden layer only as their bf16
// rounding (k::gemm_inputs_in_bf16, layers/gemm_input.h), and the loss writes its gradient only
// as its bf16 rounding: the GEMMs read the rounding they would otherwise make at each call and
// the ReLU's mask comes from it, and without dropout the norms write the residual stream's
// gradient in bf16 for the projections that read it; so 12 updates of a small LM (PN without
// dropout on cuDNN's attention, LN with dropout 0.1 on the materialized attention, LN without
// dropout on cuDNN's) and 6 of a small translation model give
// every loss equal to the bit with the rounding at each call (Context::gemm_inputs_bf16 off),
// where the feed-forward's GEMM writes fp32 and a pass rounds it. Where cuBLASLt's epilogue
// writes the rounding itself (Context::gemm_bf16_outputs, the default) it may sum in another
// order and add the bias in bf16: every loss within 1e-3 of the others.
TEST(Devices, CudaBf16KeptGemmInputsAreTheRoundingAtEachCall) {
  PN_REQUIRE_DEVICE(Device::CUDA);
  FLAGS_minloglevel = 1;
  for (int variant = 0; variant < 4; ++variant) {
    const bool mt = variant == 2;
    Options o = mt ? test::small_mt() : test::small_lm();
    if (!mt) {
      o.decoder_embed_dim = 64, o.decoder_attention_heads = 2, o.max_update = 12;
      o.max_tokens = 256, o.dropout = variant == 1 ? 0.1 : 0.0;
      o.norm_self = o.norm_ff = o.norm_final = variant == 0 ? "power" : "layer";
    }
    SCOPED_TRACE(mt ? "translation" : o.norm_self + (o.dropout > 0 ? ", dropout" : ", no dropout"));
    std::vector<double> losses[3];
    for (int kept = 0; kept < 3; ++kept) {  // off; kept, rounding pass; kept, the epilogue's
      DeviceScope scope(Device::CUDA, 0, GemmMath::bf16);
      current_context().gemm_inputs_bf16 = kept >= 1;
      current_context().gemm_bf16_outputs = kept == 2;
      current_context().attention =
          variant == 0 || variant == 3 ? Attention::cudnn : Attention::materialized;
      EXPECT_EQ(k::gemm_inputs_in_bf16<float>(), kept >= 1);
      EXPECT_FALSE(k::gemm_inputs_in_bf16<double>());
      auto comm = make_single_communicator();
      if (mt) {
        Trainer t(o, *comm, test::toy_corpus());
        losses[kept] = t.train().losses;
      } else {
        Trainer t(o, *comm, test::builtin());
        losses[kept] = t.train().losses;
      }
    }
    ASSERT_EQ(losses[0].size(), size_t(o.max_update));
    EXPECT_EQ(losses[1], losses[0]);
    ASSERT_EQ(losses[2].size(), losses[0].size());
    for (size_t i = 0; i < losses[0].size(); ++i)
      EXPECT_NEAR(losses[2][i], losses[0][i], 1e-3 * losses[0][i]) << "update " << i + 1;
  }
  DeviceScope fp32(Device::CUDA, 0, GemmMath::fp32);
  EXPECT_FALSE(k::gemm_inputs_in_bf16<float>()) << "fp32 GEMMs read no bf16 input";
}

// The most memory held at once over one training step of an LM of `layers` layers on the CPU
// (d 64, 2 heads, FFN 256, 2 x 128 tokens, dropout 0.1), and its parameter count.
std::pair<size_t, size_t> peak_of_one_step(int layers) {
  const int nseq = 2, T = 128, rows = nseq * T;
  auto comm = make_single_communicator();
  Batch batch;
  batch.nseq = nseq, batch.seq_len = T;
  for (int i = 0; i < rows; ++i) {
    batch.tokens.push_back(1 + i % 40);
    batch.targets.push_back(1 + (i * 7) % 40);
    batch.mask.push_back(1);
  }
  synchronize();
  cpu_buffers_reset_peak();
  ModelConfig c;
  c.vocab = 48, c.layers = layers, c.dim = 64, c.heads = 2, c.ffn_dim = 256;
  c.max_len = T, c.dropout = 0.1;
  LanguageModel<float> m(c, 1, comm.get());
  m.forward_backward(batch, 1.0f, 7);  // returns the loss sums: synchronised
  return {cpu_buffers_peak_bytes(), m.params.size()};
}

// A layer keeps for the backward only what the backward reads (its norms' outputs, mid, ctx,
// what the attention saves, q|k|v where the attention backward reads them, the hidden layer,
// the dropout masks, the norms' statistics, its parameters and their gradients); the gradients
// of its inner activations, the branch outputs and q|k|v where cuDNN's backward reads its own
// bf16 copy are the model's one Workspace. Measured as the device's peak memory over one step
// of a 3-layer model less that of a 1-layer one: two layers' worth of exactly those buffers.
// Every layer keeping its own transients would add about 80% to the activations.
// On the CPU (fp32, materialized attention), whose buffers count their bytes as glibc rounds them.
TEST(Devices, ALayerKeepsOnlyWhatItsBackwardReads) {
  const int nseq = 2, T = 128, d = 64, H = 2, ffn = 256, rows = nseq * T;
  const size_t n = size_t(rows) * d, f = sizeof(float);
  // Not on a GPU: its static scratch pools and the bf16 weight copy keep the sizes that earlier
  // work in the process left them, so the difference depends on what ran before.
  const auto [peak1, params1] = peak_of_one_step(1);
  const auto [peak3, params3] = peak_of_one_step(3);
  // One buffer of `bytes`: 64-byte multiples (and up to 64 bytes of glibc's).
  auto block = [](size_t bytes) { return (bytes + 63) / 64 * 64; };
  EXPECT_TRUE(k::attention_backward_reads_qkv<float>(nseq, T, d, H));
  const size_t per_layer = block(n * f) * 4                  // x, norm output a, mid, norm output b
                           + block(3 * n * f)                // q|k|v
                           + block(n * f)                    // ctx
                           + block(k::attention_saved_size(nseq, T, d, H) * f)
                           + block(size_t(rows) * ffn * f)  // the hidden layer
                           + block(n) * 2                   // the two dropout masks
                           + block(size_t(rows) * f) * 4;   // two norms' mean and rstd
  const size_t param_bytes = (params3 - params1) * 2 * f;  // values and gradients
  const double measured = double(peak3) - double(peak1);
  const double expected = double(2 * per_layer + param_bytes);
  EXPECT_NEAR(measured, expected, 8192) << "peak " << peak1 << " -> " << peak3 << " bytes";
}

TEST(Devices, Tf32NeedsAGpuAndBf16RunsEverywhere) {
  for (Device d : {Device::CPU}) {
    try {
      DeviceScope scope(d, 0, GemmMath::tf32);
      ADD_FAILURE() << "tf32 accepted on the " << device_name(d);
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("needs a GPU"), std::string::npos) << e.what();
    }
    EXPECT_EQ(current_device(), Device::CPU);  // a refused scope leaves the context alone
    DeviceScope scope(d, 0, GemmMath::bf16);
    EXPECT_EQ(current_context().gemm_math, GemmMath::bf16);
    EXPECT_NE(device_summary().find("GEMMs in bf16"), std::string::npos) << device_summary();
  }
  EXPECT_EQ(current_context().gemm_math, GemmMath::fp32);
}

TEST(Devices, CudaWithoutAGpuSaysWhy) {
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "a GPU is visible here";
  try {
    resolve_device("cuda", false);
    FAIL() << "--device cuda was accepted without a GPU";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
  }
  EXPECT_EQ(resolve_device("auto", false), Device::CPU);
}

// OpenBLAS's pre-AVX2 fallback cores (what 0.3.21 runs on CPUs newer than its table) are
// replaced by the newest core this CPU's instructions allow; a core OpenBLAS recognised is kept.
// The flags are masked with PN_CPU_WITHOUT to see every branch on any machine.
TEST(OpenBlasCore, AFallbackCoreGivesWayToTheCpusOwn) {
  EXPECT_EQ(better_core_than("Haswell"), "");
  EXPECT_EQ(better_core_than("SkylakeX"), "");
  EXPECT_EQ(better_core_than("Zen"), "");
  const bool avx512 = cpu_has("avx512f") && cpu_has("avx512bw") && cpu_has("avx512vl") &&
                      cpu_has("avx512dq");
  const bool avx2 = cpu_has("avx2") && cpu_has("fma");
  EXPECT_EQ(better_core_than("Prescott"), avx512 ? "SkylakeX" : avx2 ? "Haswell" : "");
  setenv("PN_CPU_WITHOUT", "avx512f", 1);
  EXPECT_EQ(better_core_than("PRESCOTT"), avx2 ? "Haswell" : "");
  setenv("PN_CPU_WITHOUT", "avx512f,avx2", 1);
  EXPECT_EQ(better_core_than("Nehalem"), "");
  unsetenv("PN_CPU_WITHOUT");
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);  // the user's choice stands
  EXPECT_EQ(openblas_better_core(), "");
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace
}  // namespace pn
