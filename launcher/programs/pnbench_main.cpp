// pnbench: one point of a scaling benchmark. Under `mpirun -np R` it trains --warmup + --measure
// updates of the pntrain model (every pntrain flag applies), reads back rank 0's per-update
// metrics (tokens_per_s and the `time` split the trainer writes) and appends one CSV row of
// medians over the measured updates. `launcher/pn bench` (launcher/analysis/bench.py) calls it once per
// norm, rank count and mode, then plots the CSV.
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "kernels/device.h"
#include "launcher/programs/openblas_core.h"
#include "trainer/data.h"
#include "trainer/options.h"
#include "trainer/trainer.h"

namespace po = boost::program_options;

namespace {

struct BenchOptions {
  std::string mode = "strong";  // strong: --tokens over all ranks; weak: --tokens per rank
  int tokens = 2048;            // tokens per micro-step (see mode)
  int warmup = 3;               // updates trained but not measured
  int measure = 10;             // updates whose medians are reported
  std::string csv;              // appended to; the header is written when the file is new
  bool verbose = false;         // pntrain's progress lines and model summary
  bool split_wait = false;      // barrier before each statistics all-reduce, timed apart
  bool probe = false;           // every other update, time probe all-reduces in training
  bool predict = false;         // measure all-reduce cost over message sizes instead of training
  std::string predict_out = "pnbench_predict";  // where --predict writes and reads its CSVs
};

// Column order of the CSV; bench.py and the README name the same columns.
const std::vector<std::string> kColumns = {
    "norm", "device", "mode", "ranks", "cores", "threads", "oversubscribed", "tokens_per_rank",
    "update_freq", "tokens_per_update", "warmup_updates", "measured_updates", "tokens_per_s",
    "speedup", "efficiency", "update_ms", "compute_ms", "stats_allreduce_ms", "grad_allreduce_exposed_ms",
    "optimizer_ms", "other_ms", "sync_group_size", "stats_allreduces_per_update",
    "stats_bytes_per_update", "grad_allreduce_ms", "stats_wait_ms", "stats_transfer_ms", "note"};

const char* kUsage =
    "pnbench: one point of a strong or weak scaling benchmark of pntrain\n\n"
    "Usage: [mpirun -np R] pnbench [pnbench options] [pntrain options]\n\n"
    "Trains --warmup + --measure updates with the given pntrain options (any flag of\n"
    "`pntrain --help`, and --config FILE), then rank 0 appends one row to --csv with the medians\n"
    "over the measured updates. pnbench sets --max-tokens (from --tokens and --mode), --max-update\n"
    "(warmup + measure) and --validate-interval-updates 0; giving --max-tokens, --max-update,\n"
    "--save-dir, --restore-file or --eval-only on the command line is an error (values from a\n"
    "--config file are overridden). --metrics FILE keeps the per-update JSON lines.\n\n"
    "--device auto|cpu|cuda chooses the device as in pntrain (each rank on its node-local\n"
    "GPU; ranks sum through NCCL).\n\n"
    "Columns: norm, device (cpu or cuda), mode, ranks, cores (of rank 0's node), threads (per rank), oversubscribed\n"
    "(1 when a node runs more ranks than it has cores: such timings are not scaling figures),\n"
    "tokens_per_rank (--max-tokens), update_freq, tokens_per_update (target tokens over all\n"
    "ranks), warmup_updates, measured_updates, tokens_per_s (median), speedup (tokens_per_s /\n"
    "tokens_per_s of the 1-rank row of the same norm and device with tokens_per_rank = --tokens and the\n"
    "same update_freq, the last one already in the CSV; empty when there is none), efficiency\n"
    "(speedup / ranks: 1 when every added rank brings its own cores or GPU),\n"
    "and the median per-update time split of rank 0 in ms: update_ms (wall time of the update),\n"
    "compute_ms (forward + backward minus the statistics all-reduces), stats_allreduce_ms\n"
    "(the all-reduces of synchronized norms), grad_allreduce_exposed_ms (the gradient\n"
    "all-reduce time not hidden behind the backward), optimizer_ms, other_ms (update_ms minus\n"
    "the four parts: batching, gradient zeroing), sync_group_size (ranks per statistics group,\n"
    "--sync-group-size), stats_allreduces_per_update and stats_bytes_per_update (the\n"
    "synchronized norms' all-reduces of one update on rank 0 and the bytes it summed in them;\n"
    "0 without synchronized norms or at one rank), grad_allreduce_ms (the gradient all-reduce\n"
    "measured alone after the run: the same buckets, blocking, median of 5; its exposed part\n"
    "above is what the overlap leaves), stats_wait_ms and stats_transfer_ms (with\n"
    "--split-stats-wait: stats_allreduce_ms split into the barrier wait for the group's slowest\n"
    "rank and the all-reduces after it; empty otherwise), note.\n\n"
    "Run `launcher/pn bench --help` for the driver that loops over norms and rank counts.\n\n"
    "pnbench options";

po::options_description describe(BenchOptions& b) {
  po::options_description d(kUsage);
  d.add_options()("help,h", "print this help and pntrain's")(
      "mode", po::value(&b.mode)->default_value(b.mode),
      "strong: --tokens per micro-step over all ranks (each rank takes tokens / R); weak: "
      "--tokens per rank")("tokens", po::value(&b.tokens)->default_value(b.tokens),
                           "tokens per micro-step, over all ranks (strong) or per rank (weak)")(
      "warmup", po::value(&b.warmup)->default_value(b.warmup),
      "updates trained before the measured ones (page faults, allocator, thread start)")(
      "measure", po::value(&b.measure)->default_value(b.measure),
      "updates whose medians are reported")("csv", po::value(&b.csv),
                                            "CSV file to append the row to (rank 0)")(
      "verbose", po::bool_switch(&b.verbose), "print pntrain's model summary and progress lines")(
      "split-stats-wait", po::bool_switch(&b.split_wait),
      "meet at a barrier before each statistics all-reduce and time it apart: stats_wait_ms is "
      "the wait for the sync group's slowest rank, stats_transfer_ms the all-reduces alone "
      "(what an alpha-beta model predicts); costs one barrier per all-reduce (host "
      "communicators only)")(
      "probe-allreduce", po::bool_switch(&b.probe),
      "with --split-stats-wait: every other update, each statistics all-reduce is preceded by "
      "a probe all-reduce timed after the barrier (8 B to 16 KiB, one size per update, "
      "cycling): what an all-reduce costs in the cache state that training leaves. Per size, "
      "seconds per all-reduce are appended to PREDICT_OUT/allreduce_in_training.csv, which "
      "launcher/analysis/predict.py checks the measured updates (those in between) against; language "
      "model only")(
      "predict", po::bool_switch(&b.predict),
      "no training: time the all-reduce of this job's sync groups (--sync-group-size; the "
      "statistics' path: blocking, host memory) over message sizes from 8 bytes to the gradient "
      "bucket (--bucket-mb), and one update's statistics all-reduces of the --norm* model "
      "replayed; append them to PREDICT_OUT/allreduce.csv and replay.csv, then run "
      "launcher/analysis/predict.py: the alpha-beta fit per job and group size, its check against the "
      "replay and against the statistics time of --csv's rows, and the predicted share of an "
      "update at 8 to 1024 GPUs (table and PNG)")(
      "predict-out", po::value(&b.predict_out)->default_value(b.predict_out),
      "directory of --predict's CSVs and plot");
  return d;
}

// A flag of pntrain that pnbench decides itself, given on the command line.
std::string forbidden_flag(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    for (const char* f : {"--max-tokens", "--max-update", "--save-dir", "--restore-file",
                          "--eval-only"})
      if (a == f || a.rfind(std::string(f) + "=", 0) == 0) return f;
  return "";
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Medians over the measured updates of rank 0's metrics file.
struct Medians {
  int updates = 0;
  double tokens_per_s = NAN, ntokens = NAN, update_s = NAN, compute_s = NAN, stats_s = NAN,
         grad_s = NAN, optimizer_s = NAN, other_s = NAN;
  double stats_wait_s = NAN, stats_transfer_s = NAN;  // --split-stats-wait only
};

Medians read_medians(const std::string& path, int first_update, bool odd_updates_only) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read back the metrics file '" + path + "'");
  std::vector<double> tps, ntok, wall, compute, stats, grad, optim, other, wait, transfer;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    // Validation lines have no "time"; updates before first_update are warm-up.
    if (!j.contains("time") || j["update"].get<int64_t>() < first_update) continue;
    if (odd_updates_only && j["update"].get<int64_t>() % 2 == 0) continue;  // probed
    const auto& t = j["time"];
    // A GPU run has no host-timed forward and backward (reports.cpp): compute is then unknown.
    const double fwd_bwd = t.contains("forward_s")
                               ? t["forward_s"].get<double>() + t["backward_s"].get<double>()
                               : NAN;
    const double s = t["stats_comm_s"].get<double>(), g = t["grad_comm_s"].get<double>(),
                 o = t["optimizer_s"].get<double>(), w = j["wall_s"].get<double>();
    tps.push_back(j["tokens_per_s"].get<double>());
    ntok.push_back(j["ntokens"].get<double>());
    wall.push_back(w);
    compute.push_back(fwd_bwd - s);
    stats.push_back(s);
    grad.push_back(g);
    optim.push_back(o);
    other.push_back(w - fwd_bwd - g - o);
    if (t.contains("stats_wait_s")) {
      wait.push_back(t["stats_wait_s"].get<double>());
      transfer.push_back(s - wait.back());
    }
  }
  Medians m;
  m.updates = int(tps.size());
  m.tokens_per_s = median(tps), m.ntokens = median(ntok), m.update_s = median(wall);
  m.compute_s = median(compute), m.stats_s = median(stats), m.grad_s = median(grad);
  m.optimizer_s = median(optim), m.other_s = median(other);
  m.stats_wait_s = median(wait), m.stats_transfer_s = median(transfer);
  return m;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

std::string join(const std::vector<std::string>& v, char sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? std::string(1, sep) : "") + v[i];
  return out;
}

// tokens_per_s of the last 1-rank row of this norm with tokens_per_rank = tokens and this
// update_freq; NaN when the CSV holds none. Throws when the file has other columns.
double baseline_tokens_per_s(const std::string& csv, const std::string& norm,
                             const std::string& device, int tokens, int update_freq) {
  std::ifstream in(csv);
  std::string header;
  if (!in || !std::getline(in, header) || header.empty()) return NAN;
  if (header != join(kColumns, ','))
    throw std::runtime_error("the CSV file '" + csv + "' has other columns than pnbench writes (" +
                             header + "): give a new --csv file");
  auto col = [](const std::string& name) {
    return size_t(std::find(kColumns.begin(), kColumns.end(), name) - kColumns.begin());
  };
  double found = NAN;
  for (std::string line; std::getline(in, line);) {
    const std::vector<std::string> f = split(line, ',');
    if (f.size() != kColumns.size()) continue;
    if (f[col("norm")] == norm && f[col("device")] == device && f[col("ranks")] == "1" &&
        f[col("tokens_per_rank")] == std::to_string(tokens) &&
        f[col("update_freq")] == std::to_string(update_freq))
      found = std::stod(f[col("tokens_per_s")]);
  }
  return found;
}

// The norm column: one name when every place has the same norm.
std::string norm_label(const pn::Options& o) {
  if (o.norm_self == o.norm_ff && o.norm_ff == o.norm_final) return o.norm_self;
  return o.norm_self + "/" + o.norm_ff + "/" + o.norm_final;  // no commas: a CSV field
}

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A CSV file opened to append to, with `header` written first when the file is new or empty;
// `fix` ends the error that names it.
std::ofstream append_csv(const std::string& path, const std::string& header,
                         const std::string& fix) {
  const bool fresh = !std::filesystem::exists(path) || std::filesystem::file_size(path) == 0;
  std::ofstream out(path, std::ios::app);
  if (!out) throw std::runtime_error("cannot write the CSV file '" + path + "': " + fix);
  if (fresh) out << header << '\n';
  return out;
}

void append_row(const std::string& csv, const std::vector<std::string>& row) {
  append_csv(csv, join(kColumns, ','), "check that its directory exists and is writable")
      << join(row, ',') << '\n';
}

// The gradient all-reduce alone: the trainer's buckets of the n-float gradient (bucket_mb MB;
// 0: one), summed over every rank one after the other, blocking, in host memory (also for a
// GPU run: the host path of the communicator); the median of 5 after one warm-up. 0 at one rank.
double time_gradient_allreduce(pn::Communicator& comm, size_t n, double bucket_mb) {
  if (comm.size() == 1) return 0;
  const size_t per = bucket_mb > 0 ? std::max<size_t>(1, size_t(bucket_mb * 262144.0)) : n;
  std::vector<float> grad(n, 1.0f);
  std::vector<double> times;
  for (int rep = 0; rep < 6; ++rep) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t begin = 0; begin < n; begin += per)
      comm.allreduce_sum(grad.data() + begin, std::min(per, n - begin));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    comm.allreduce_max(&s, 1);  // the slowest rank's
    if (rep > 0) times.push_back(s);
  }
  return median(times);
}

// --predict timings on a machine shared with other work: each rank times every call on its own,
// and a timing is the slowest rank's 20th percentile, the cost when the ranks run rather than
// wait for the scheduler (the median of such a machine measures its other users).
double low_quantile(std::vector<double> v, pn::Communicator& comm) {
  std::sort(v.begin(), v.end());
  double q = v[v.size() / 5];
  comm.allreduce_max(&q, 1);
  return q;
}

// --predict: seconds per all-reduce of each message size within this rank's sync group
// (Communicator::allreduce_sum of doubles, the statistics' path), after a few warm-up calls.
std::vector<std::pair<size_t, double>> sweep_allreduce(pn::Communicator& comm,
                                                       pn::Communicator& group, size_t max_bytes) {
  std::vector<size_t> sizes;
  for (size_t b = 8; b < max_bytes; b *= 4) sizes.push_back(b);
  sizes.push_back(max_bytes);
  std::vector<std::pair<size_t, double>> out;
  for (size_t bytes : sizes) {
    std::vector<double> buf(std::max<size_t>(1, bytes / 8), 1.0);
    const int calls = bytes <= 65536 ? 200 : bytes <= (1 << 20) ? 40 : 15;
    for (int i = 0; i < 3; ++i) group.allreduce_sum(buf.data(), buf.size());
    comm.barrier();
    std::vector<double> per_call;
    for (int i = 0; i < calls; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      group.allreduce_sum(buf.data(), buf.size());
      per_call.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    out.emplace_back(buf.size() * 8, low_quantile(per_call, comm));
  }
  return out;
}

// The statistics all-reduces (doubles each) of one micro-step of the language model that `opt`
// describes, as pntrain packs them: sync_batch [count | sum x | sum x^2] then
// [sum dy | sum dy x], sync_power_v and sync_power [count | sum x^2] then [sum g xh].
std::vector<size_t> statistics_messages(const pn::Options& opt) {
  const int d = opt.decoder_embed_dim;
  std::vector<size_t> doubles;
  for (int l = 0; l <= opt.decoder_layers; ++l)
    for (const std::string& kind : l < opt.decoder_layers
                                       ? std::vector<std::string>{opt.norm_self, opt.norm_ff}
                                       : std::vector<std::string>{opt.norm_final}) {
      const pn::NormKind k = pn::parse_norm_kind(kind);
      if (k == pn::NormKind::sync_batch)
        doubles.insert(doubles.end(), {size_t(1 + 2 * d), size_t(2 * d)});
      if (k == pn::NormKind::sync_power_v || k == pn::NormKind::sync_power)
        doubles.insert(doubles.end(), {size_t(1 + d), size_t(d)});
    }
  return doubles;
}

// --predict: those of one update (one micro-step), replayed back to back over this job's sync
// groups. Seconds per update (60 replays, low_quantile as the sweep) and the message count and
// bytes; zeros without synchronized norms.
struct Replay {
  int messages = 0;
  size_t bytes = 0;
  double seconds = 0;
};
Replay replay_statistics(pn::Communicator& comm, pn::Communicator& group,
                         const pn::Options& opt) {
  const std::vector<size_t> doubles = statistics_messages(opt);
  Replay r;
  r.messages = int(doubles.size());
  for (size_t n : doubles) r.bytes += 8 * n;
  if (doubles.empty()) return r;
  std::vector<double> buf(*std::max_element(doubles.begin(), doubles.end()), 1.0);
  std::vector<double> times;
  comm.barrier();
  for (int rep = 0; rep < 63; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t n : doubles) group.allreduce_sum(buf.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep >= 3) times.push_back(s);
  }
  r.seconds = low_quantile(times, comm);
  return r;
}

// --probe-allreduce: per probe size, the median over its probed updates of the update's probe
// seconds (summed as the statistics time is), divided by the all-reduces per update: seconds per
// all-reduce, appended to DIR/allreduce_in_training.csv and printed.
// In-training calibration (--probe-allreduce, on the statistics communicator under
// --split-stats-wait): of every two runs of `period` blocking all-reduces (one update's
// statistics), the second's calls each first sum a probe message of the next size in `sizes`,
// timed after the barrier as (bytes, seconds): what an all-reduce costs in the cache state that
// training leaves, which back-to-back calls do not see. The first run of each two is measured as
// usual. One probed update probes one size (the next, cycling) at all of its all-reduces, so that
// its probes add up as the update's statistics all-reduces do. A probe is the communicator's own
// allreduce_sum, called from its after_barrier hook with the barrier off; the counts it adds to
// the communicator's are taken back out, and its time is the collective time it adds.
struct AllreduceProbes {
  pn::Communicator& comm;
  int64_t period;
  std::vector<size_t> sizes;
  int64_t calls = 0;
  bool inside = false;
  std::vector<double> message;
  std::vector<std::pair<size_t, double>> times;

  AllreduceProbes(pn::Communicator& c, int64_t p, std::vector<size_t> s)
      : comm(c), period(p), sizes(std::move(s)) {
    comm.after_barrier = [this] { before_sum(); };
  }
  ~AllreduceProbes() { comm.after_barrier = nullptr; }
  void before_sum() {
    if (inside || (calls++ / period) % 2 == 0) return;
    const int64_t k = int64_t(times.size()) / period;
    message.assign(std::max<size_t>(1, sizes[k % sizes.size()] / 8), 1.0);
    const int64_t count = comm.allreduce_count, bytes = comm.allreduce_bytes;
    const double t0 = comm.collective_seconds;
    inside = true;
    comm.wait_apart = false;
    comm.allreduce_sum(message.data(), message.size());
    comm.wait_apart = true;
    inside = false;
    comm.allreduce_count = count, comm.allreduce_bytes = bytes;
    times.emplace_back(message.size() * 8, comm.collective_seconds - t0);
  }
};

void write_probes(const std::string& dir, const std::string& norm, const pn::Communicator& comm,
                  int group_size, double stats_bytes_per_update, bool oversubscribed,
                  const std::vector<std::pair<size_t, double>>& probes, size_t per_update) {
  namespace fs = std::filesystem;
  std::map<size_t, std::vector<double>> sums;  // bytes -> per probed update
  for (size_t i = 0; i + per_update <= probes.size(); i += per_update) {
    double sum = 0;
    for (size_t j = i; j < i + per_update; ++j) sum += probes[j].second;
    sums[probes[i].first].push_back(sum / double(per_update));
  }
  fs::create_directories(dir);
  const std::string path = (fs::path(dir) / "allreduce_in_training.csv").string();
  std::ofstream out = append_csv(path,
                                 "norm,ranks,sync_group_size,stats_bytes_per_update,bytes,"
                                 "seconds,updates,oversubscribed",
                                 "check --predict-out");
  std::string line = "pnbench | probe all-reduces in training, us each:";
  for (const auto& [bytes, secs] : sums) {
    out << norm << ',' << comm.size() << ',' << group_size << ',' << fixed(stats_bytes_per_update, 0)
        << ',' << bytes << ',' << median(secs) << ',' << secs.size() << ',' << oversubscribed
        << '\n';
    line += " " + std::to_string(bytes) + " B " + fixed(1e6 * median(secs), 1) + ";";
  }
  std::printf("%s -> %s\n", line.c_str(), path.c_str());
}

int run_predict(const BenchOptions& b, const pn::Options& opt, const std::string& csv,
                pn::Communicator& comm) {
  const size_t max_bytes = size_t(std::max(1.0, opt.bucket_mb * 1048576.0));
  // Over the sync groups of this job (--sync-group-size; all ranks by default): the
  // communicator, and the company of other ranks, that the statistics all-reduces have.
  std::unique_ptr<pn::Communicator> group = pn::make_group_communicator(comm, opt.sync_group_size);
  const auto sweep = sweep_allreduce(comm, *group, max_bytes);
  const Replay replay = replay_statistics(comm, *group, opt);
  const int K = group->size();
  if (comm.rank() != 0) return 0;
  namespace fs = std::filesystem;
  fs::create_directories(b.predict_out);
  const std::string path = (fs::path(b.predict_out) / "allreduce.csv").string();
  std::ofstream out = append_csv(path, "ranks,sync_group_size,bytes,seconds,oversubscribed",
                                 "check --predict-out");
  const int cores = pn::hardware_cores();
  for (const auto& [bytes, secs] : sweep) {
    out << comm.size() << ',' << K << ',' << bytes << ',' << secs << ','
        << (comm.local_size() > cores) << '\n';
    std::printf("pnbench | predict | %d ranks in groups of %d | all-reduce of %zu bytes: %.2f us\n",
                comm.size(), K, bytes, 1e6 * secs);
  }
  out.close();
  if (replay.messages > 0) {
    const std::string rpath = (fs::path(b.predict_out) / "replay.csv").string();
    std::ofstream rout =
        append_csv(rpath, "norm,ranks,sync_group_size,messages,bytes,seconds,oversubscribed",
                   "check --predict-out");
    rout << norm_label(opt) << ',' << comm.size() << ',' << K
         << ',' << replay.messages << ',' << replay.bytes << ',' << replay.seconds << ','
         << (comm.local_size() > cores) << '\n';
    std::printf("pnbench | predict | %d ranks | %s statistics of one update replayed in sync "
                "groups of %d: %d all-reduces, %zu bytes, %.3f ms\n",
                comm.size(), norm_label(opt).c_str(), K,
                replay.messages, replay.bytes, 1e3 * replay.seconds);
  }
  // The fit, the check and the scale-out table: launcher/analysis/predict.py (matplotlib for the plot).
  const fs::path helper = fs::path(PN_SOURCE_DIR) / "launcher" / "analysis" / "predict.py";
  if (!fs::exists(helper)) {
    std::printf("pnbench | predict | %s is missing: wrote %s only\n", helper.string().c_str(),
                path.c_str());
    return 0;
  }
  const char* python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  std::string cmd = std::string(python) + " '" + helper.string() + "' --sweep '" + path +
                    "' --out '" + b.predict_out + "'";
  if (!csv.empty()) cmd += " --bench '" + csv + "'";
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) throw std::runtime_error("launcher/analysis/predict.py failed (exit " + std::to_string(rc) + ")");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  pn::rerun_with_openblas_core(argv);  // before MPI and any thread: OpenBLAS's kernels
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  std::unique_ptr<pn::Communicator> comm = pn::make_communicator(&argc, &argv);
  comm->program = "pnbench";  // errors say pnbench: error: ...
  FLAGS_minloglevel = 1;  // warnings and errors; --verbose turns rank 0's progress lines on
  try {
    BenchOptions b;
    po::options_description desc = describe(b);
    po::variables_map vm;
    std::vector<std::string> rest;
    try {
      const po::parsed_options parsed =
          po::command_line_parser(argc, argv).options(desc).allow_unregistered().run();
      rest = po::collect_unrecognized(parsed.options, po::include_positional);
      po::store(parsed, vm);
      po::notify(vm);
    } catch (const po::error& e) {
      throw std::invalid_argument(std::string(e.what()) + " (see pnbench --help)");
    }
    // pntrain's own parser reads everything pnbench does not know.
    std::vector<char*> train_argv = {argv[0]};
    for (std::string& a : rest) train_argv.push_back(a.data());
    if (vm.count("help")) {
      char help_flag[] = "--help";
      std::vector<char*> help_argv = {argv[0], help_flag};
      pn::Options unused;
      std::string train_help;
      pn::parse_options(2, help_argv.data(), &unused, &train_help);
      if (comm->rank() == 0)
        std::cout << desc << "\npntrain options (all accepted):\n" << train_help << std::endl;
      return 0;
    }
    if (b.mode != "strong" && b.mode != "weak")
      throw std::invalid_argument("--mode '" + b.mode + "': give strong or weak");
    if (b.warmup < 0 || b.measure < 1)
      throw std::invalid_argument("--warmup must be >= 0 and --measure >= 1");
    if (const std::string f = forbidden_flag(rest); !f.empty())
      throw std::invalid_argument(f + " is set by pnbench: use --tokens and --mode for the " +
                                  "batch, --warmup and --measure for the updates");
    pn::Options opt;
    std::string unused_help;
    pn::parse_options(int(train_argv.size()), train_argv.data(), &opt, &unused_help);
    const int R = comm->size();
    if (b.predict) return run_predict(b, opt, b.csv, *comm);
    if (b.mode == "strong" && b.tokens % R != 0)
      throw std::invalid_argument("--tokens " + std::to_string(b.tokens) + " (strong scaling) " +
                                  "is not divisible by " + std::to_string(R) +
                                  " ranks: give a multiple of every rank count");
    opt.max_tokens = b.mode == "strong" ? b.tokens / R : b.tokens;
    if (opt.max_tokens < opt.tokens_per_sample)  // else validate_options names --max-tokens
      throw std::invalid_argument(
          "--tokens " + std::to_string(b.tokens) + " gives " + std::to_string(opt.max_tokens) +
          " tokens per rank at " + std::to_string(R) + " ranks (" + b.mode + " scaling), less " +
          "than one sample (--tokens-per-sample " + std::to_string(opt.tokens_per_sample) +
          "): raise --tokens or lower --tokens-per-sample");
    opt.max_update = b.warmup + b.measure;
    opt.validate_interval_updates = 0;
    opt.save_dir.clear();
    opt.restore_file.clear();
    opt.eval_only = false;
    const bool own_metrics = opt.metrics.empty();
    if (own_metrics)  // only rank 0 writes it; the name is only used there
      opt.metrics = (std::filesystem::temp_directory_path() /
                     ("pnbench." + std::to_string(getpid()) + ".jsonl"))
                        .string();
    pn::validate_options(opt);
    if (const std::string e = pn::sync_group_error(opt.sync_group_size, R); !e.empty())
      throw std::invalid_argument(e);
    if (b.verbose && comm->rank() == 0) FLAGS_minloglevel = 0;

    const int cores = pn::hardware_cores();
    const int threads = opt.threads > 0 ? opt.threads : std::max(1, cores / comm->local_size());
    pn::set_num_threads(threads);
    // Oversubscribed when any node runs more ranks than it has cores.
    double over = comm->local_size() > cores ? 1.0 : 0.0;
    comm->allreduce_max(&over, 1);
    const bool oversubscribed = over > 0;

    // --device as pntrain: each rank on its node-local GPU, ranks talking through NCCL.
    const pn::Device device = pn::resolve_device(opt.device, comm->rank() == 0);
    const std::string device_label = pn::device_name(device);
    if (R > 1) pn::set_error_context("rank " + std::to_string(comm->rank()));
    if (device == pn::Device::CUDA && b.split_wait)
      throw std::invalid_argument("--split-stats-wait times host all-reduces; on --device cuda "
                                  "the statistics are summed on the GPU's stream: drop the flag");
    if (b.probe && !b.split_wait)
      throw std::invalid_argument("--probe-allreduce times its probes after the barrier of "
                                  "--split-stats-wait: add --split-stats-wait");
    if (b.probe && (opt.arch != pn::Arch::transformer_lm || statistics_messages(opt).empty() || R == 1))
      throw std::invalid_argument("--probe-allreduce needs statistics all-reduces of the "
                                  "language model: --arch transformer_lm, a sync_* norm and "
                                  "more than one rank");
    if (device == pn::Device::CUDA) comm = pn::make_device_communicator(std::move(comm));
    pn::Corpus corpus = opt.data == "builtin" ? pn::builtin_corpus() : pn::load_corpus(opt.data);
    double stats_per_update = 0, stats_bytes_per_update = 0, grad_allreduce_s = 0;
    std::vector<std::pair<size_t, double>> probes;  // rank 0's, after the warm-up updates
    size_t probe_period = 0;
    {
      pn::DeviceScope scope(device, comm->local_rank(), pn::parse_gemm_math(opt.precision));
      if (comm->rank() == 0 && device != pn::Device::CPU)
        std::printf("pnbench | device: %s\n", pn::device_summary().c_str());
      pn::Trainer trainer(opt, *comm, std::move(corpus));
      pn::Communicator& stats = trainer.stats_communicator();
      const bool counted = &stats != comm.get();  // one rank: no statistics all-reduce at all
      stats.wait_apart = b.split_wait && counted;
      std::unique_ptr<AllreduceProbes> probing;
      if (b.probe && counted)
        // Dense where the statistics are (d = 64 to 1024: 0.5 to 16 KiB), so that each of
        // their messages lies between two probes; Open MPI's shared-memory eager limit is 4 KiB.
        probing = std::make_unique<AllreduceProbes>(
            stats, int64_t(statistics_messages(opt).size()) * opt.update_freq,
            std::vector<size_t>{8, 512, 1024, 2048, 4096, 8192, 16384});
      trainer.train();
      if (probing) {
        if (stats.allreduce_count != probing->period * opt.max_update)
          throw std::runtime_error(
              "--probe-allreduce: " + std::to_string(stats.allreduce_count) +
              " statistics all-reduces in " + std::to_string(opt.max_update) +
              " updates, not the model's " + std::to_string(probing->period) +
              " per update, so probed and measured updates mixed: drop --probe-allreduce");
        probe_period = size_t(probing->period);
        const size_t warm = b.warmup / 2 * probe_period;  // the probes of warm-up updates
        const auto& times = probing->times;
        probes.assign(times.begin() + std::min(warm, times.size()), times.end());
      }
      stats_per_update = counted ? double(stats.allreduce_count) / opt.max_update : 0;
      stats_bytes_per_update = counted ? double(stats.allreduce_bytes) / opt.max_update : 0;
      grad_allreduce_s = time_gradient_allreduce(*comm, trainer.params().size(), opt.bucket_mb);
    }  // the trainer closes the metrics file
    if (comm->rank() == 0) {
      Medians m = read_medians(opt.metrics, b.warmup + 1, !probes.empty());
      if (own_metrics) std::filesystem::remove(opt.metrics);
      if (m.updates == 0)
        throw std::runtime_error("no measured update in the metrics (every update skipped as "
                                 "NaN?): check the pntrain options");
      const std::string norm = norm_label(opt);
      double base = R == 1 ? m.tokens_per_s : NAN;
      if (R > 1 && !b.csv.empty())
        base = baseline_tokens_per_s(b.csv, norm, device_label, b.tokens, opt.update_freq);
      const double speedup = m.tokens_per_s / base, efficiency = speedup / R;
      // Rank 0 knows its own node; another node may be the oversubscribed one.
      const std::string crowded =
          comm->local_size() > cores ? std::to_string(comm->local_size()) + " ranks on " +
                                           std::to_string(cores) + " cores"
                                     : "another node runs more ranks than it has cores";
      const std::string note =
          oversubscribed ? "oversubscribed: " + crowded + "; not a scaling figure" : "";
      if (oversubscribed)
        LOG(WARNING) << "more ranks than cores on a node (" << crowded << "): these timings "
                     << "show that it runs, they are not scaling figures";
      std::printf("pnbench | %s | %s | %s | %d ranks x %d threads | %.0f tokens/update | %.0f tok/s "
                  "| speedup %s | efficiency %s | update %.2f ms = compute %.2f + stats "
                  "all-reduce %.2f + grad all-reduce exposed %.2f + optimizer %.2f + other "
                  "%.2f | sync group %d: %.0f stats all-reduces, %.0f bytes per update | grad "
                  "all-reduce alone %.2f ms%s\n",
                  norm.c_str(), device_label.c_str(), b.mode.c_str(), R, threads, m.ntokens, m.tokens_per_s,
                  std::isfinite(speedup) ? fixed(speedup, 3).c_str() : "n/a",
                  std::isfinite(efficiency) ? fixed(efficiency, 3).c_str() : "n/a",
                  1e3 * m.update_s, 1e3 * m.compute_s, 1e3 * m.stats_s, 1e3 * m.grad_s,
                  1e3 * m.optimizer_s, 1e3 * m.other_s, pn::sync_group_ranks(opt, R),
                  stats_per_update, stats_bytes_per_update, 1e3 * grad_allreduce_s,
                  oversubscribed ? " | OVERSUBSCRIBED" : "");
      if (!(stats_per_update > 0)) m.stats_wait_s = m.stats_transfer_s = NAN;  // no split
      if (std::isfinite(m.stats_wait_s))
        std::printf("pnbench | stats all-reduce %.2f ms: wait for the group's slowest rank "
                    "%.2f ms, transfer after it %.2f ms (medians of each)\n",
                    1e3 * m.stats_s, 1e3 * m.stats_wait_s, 1e3 * m.stats_transfer_s);
      if (!probes.empty()) write_probes(b.predict_out, norm, *comm, pn::sync_group_ranks(opt, R),
                                        stats_bytes_per_update, oversubscribed, probes,
                                        probe_period);
      if (!b.csv.empty())
        append_row(b.csv,
                   {norm, device_label, b.mode, std::to_string(R), std::to_string(cores),
                    std::to_string(threads), oversubscribed ? "1" : "0",
                    std::to_string(opt.max_tokens), std::to_string(opt.update_freq),
                    fixed(m.ntokens, 0), std::to_string(b.warmup), std::to_string(m.updates),
                    fixed(m.tokens_per_s, 1), fixed(speedup, 4), fixed(efficiency, 4), fixed(1e3 * m.update_s, 3),
                    fixed(1e3 * m.compute_s, 3), fixed(1e3 * m.stats_s, 3),
                    fixed(1e3 * m.grad_s, 3), fixed(1e3 * m.optimizer_s, 3),
                    fixed(1e3 * m.other_s, 3), std::to_string(pn::sync_group_ranks(opt, R)),
                    fixed(stats_per_update, 1), fixed(stats_bytes_per_update, 0),
                    fixed(1e3 * grad_allreduce_s, 3), fixed(1e3 * m.stats_wait_s, 3),
                    fixed(1e3 * m.stats_transfer_s, 3), note});
    }
  } catch (const std::exception& e) {
    comm->abort(e.what(), 2);
  }
  return 0;
}
