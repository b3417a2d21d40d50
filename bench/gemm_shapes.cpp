// pnbench_gemm: GFLOP/s of the CPU GEMM libraries on the shapes of one training micro-step
// (forward and backward) of configs/ptb_small.ini, ptb_wide.ini and iwslt_small.ini, row-major
// as the model calls them (bench/gemm/model_gemms.cpp): OpenBLAS's cblas_sgemm (what
// kernels/cpu/blas.cpp uses) and, when built with oneDNN (PN_HAVE_DNNL), oneDNN's matmul
// primitive in f32 and, where this CPU has an implementation, bf16 x bf16 -> f32.
// Each round times every shape with both libraries (1 warm-up, then best and median of --reps),
// the library that goes first alternating between rounds; figures are medians over --rounds.
// Standalone build (same as the CMake target; drop the last line for OpenBLAS only):
//   g++ -O2 -fopenmp -I. bench/gemm_shapes.cpp bench/gemm/model_gemms.cpp
//       -I/usr/include/x86_64-linux-gnu/openblas-openmp -L/usr/lib/x86_64-linux-gnu/openblas-openmp
//       -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -o /tmp/gemm
//       -DPN_HAVE_DNNL bench/gemm/dnnl_matmul.cpp -ldnnl
// Another CBLAS (e.g. Debian's BLIS) builds too: its cblas.h in -I, its library in -l.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/gemm/model_gemms.h"
#ifdef PN_HAVE_DNNL
#include "bench/gemm/dnnl_matmul.h"
#endif

namespace {

using pnbench::Gemm;
using pnbench::ModelGemms;

constexpr double kMaxRelDiff = 1e-4;  // f32 vs f32: a wrong stride gives O(1), rounding ~1e-6

struct Options {
  std::vector<std::string> models{"ptb_small", "ptb_wide", "iwslt_small"};
  std::vector<int> threads{1, 2};
  int reps = 5, rounds = 3;
  bool dnnl = true;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

void usage() {
  std::printf(
      "pnbench_gemm [--models ptb_small,ptb_wide,iwslt_small] [--threads 1,2] [--reps 5]\n"
      "             [--rounds 3] [--no-dnnl]\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--models" && has_value) {
      o.models = split(argv[++i]);
    } else if (a == "--threads" && has_value) {
      o.threads.clear();
      for (const auto& t : split(argv[++i])) o.threads.push_back(std::stoi(t));
    } else if (a == "--reps" && has_value) {
      o.reps = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--rounds" && has_value) {
      o.rounds = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--no-dnnl") {
      o.dnnl = false;
    } else {
      usage();
      std::exit(a == "--help" || a == "-h" ? 0 : 2);
    }
  }
  return o;
}

// ---- machine and library description ----

std::string cpu_line() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU", flags;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    const std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
    if (line.rfind("model name", 0) == 0 && model == "unknown CPU") model = value.substr(1);
    if (line.rfind("flags", 0) == 0 && flags.empty()) flags = value + " ";
  }
  std::string have;
  for (const char* f :
       {"avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512_bf16", "amx_bf16"})
    if (flags.find(std::string(" ") + f + " ") != std::string::npos) have += std::string(" ") + f;
  if (flags.find(" avx512f ") == std::string::npos) have += ", no avx512f";
  return model + " (" + std::to_string(omp_get_num_procs()) + " logical CPUs; flags:" + have + ")";
}

std::string blas_line() {
#ifdef OPENBLAS_VERSION
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  return std::string(openblas_get_config()) + " (core " + openblas_get_corename() +
         ", OPENBLAS_CORETYPE=" + (coretype ? coretype : "unset") + ")";
#else
  return "CBLAS: not OpenBLAS (no version query)";
#endif
}

void set_threads(int n) {
  omp_set_num_threads(n);  // oneDNN (OpenMP runtime) and OpenMP OpenBLAS both follow this
#ifdef OPENBLAS_VERSION
  openblas_set_num_threads(n);
#endif
}

int blas_threads() {
#ifdef OPENBLAS_VERSION
  return openblas_get_num_threads();
#else
  return omp_get_max_threads();
#endif
}

// ---- buffers ----

// bf16 = the upper half of the f32 bits, rounded to nearest even.
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// One set of operands large enough for every shape of a model, random in [-1, 1] so that a
// wrong stride or transpose changes C.
struct Pool {
  std::vector<float> a, b, c_blas, c_dnnl;
  std::vector<uint16_t> a16, b16;

  Pool(const ModelGemms& mg, bool bf16) {
    size_t na = 0, nb = 0, nc = 0;
    for (const Gemm& g : mg.gemms) {
      na = std::max(na, size_t(g.m) * g.k);
      nb = std::max(nb, size_t(g.k) * g.n);
      nc = std::max(nc, size_t(g.m) * g.n);
    }
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    a.resize(na), b.resize(nb), c_blas.assign(nc, 0.0f), c_dnnl.assign(nc, 0.0f);
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    if (!bf16) return;
    for (float x : a) a16.push_back(to_bf16(x));
    for (float x : b) b16.push_back(to_bf16(x));
  }
};

// max |C - C_blas| / max |C_blas| over the m x n result.
double rel_diff(const std::vector<float>& c, const std::vector<float>& ref, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, double(std::fabs(c[i] - ref[i])));
    scale = std::max(scale, double(std::fabs(ref[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// ---- timing ----

struct Sample {
  double best, median;  // seconds, over the timed repetitions of one round
};

Sample time_reps(const std::function<void()>& fn, int reps) {
  fn();  // warm-up: page faults, packing buffers, OpenMP team
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  const size_t h = t.size() / 2;
  return {t.front(), t.size() % 2 ? t[h] : 0.5 * (t[h - 1] + t[h])};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// ---- one model at one thread count ----

// One shape with its libraries: the oneDNN primitives are created once, before any round.
struct Entry {
  const Gemm* g = nullptr;
  std::function<void()> run_f32, run_bf16;  // oneDNN; empty when not created
  std::string impl, impl16, f32_error, bf16_error;
  std::vector<Sample> blas, dnnl, dnnl16;  // one per round
  double diff = 0, diff16 = 0;             // largest over the rounds
  bool has_dnnl() const { return !dnnl.empty(); }
  bool has_bf16() const { return !dnnl16.empty(); }
};

void blas_run(const Gemm& g, Pool& p) {
  cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
              g.m, g.n, g.k, 1.0f, p.a.data(), g.lda(), p.b.data(), g.ldb(), 0.0f, p.c_blas.data(),
              g.ldc());
}

#ifdef PN_HAVE_DNNL
// Creates a oneDNN matmul on the pool's buffers; leaves *run empty when oneDNN refuses.
void create_dnnl(const Gemm& g, bool bf16, const void* a, const void* b, float* c,
                 std::function<void()>* run, std::string* impl, std::string* error) {
  try {
    auto m = std::make_shared<pnbench::DnnlMatmul>(g, bf16, a, b, c);
    *impl = m->impl();
    *run = [m] { m->run(); };
  } catch (const std::exception& x) {
    *error = x.what();
  }
}

void create_dnnl(Entry& e, Pool& p) {
  create_dnnl(*e.g, false, p.a.data(), p.b.data(), p.c_dnnl.data(), &e.run_f32, &e.impl,
              &e.f32_error);
  create_dnnl(*e.g, true, p.a16.data(), p.b16.data(), p.c_dnnl.data(), &e.run_bf16, &e.impl16,
              &e.bf16_error);
}
#endif

// One round of one shape: OpenBLAS and oneDNN f32 in the given order, then bf16.
void measure(Entry& e, Pool& p, int reps, bool blas_first) {
  const Gemm& g = *e.g;
  const size_t nc = size_t(g.m) * g.n;
  auto blas = [&] { e.blas.push_back(time_reps([&] { blas_run(g, p); }, reps)); };
  auto dnnl = [&] {
    if (e.run_f32) e.dnnl.push_back(time_reps(e.run_f32, reps));
  };
  if (blas_first)
    blas(), dnnl();
  else
    dnnl(), blas();
  if (e.run_f32) e.diff = std::max(e.diff, rel_diff(p.c_dnnl, p.c_blas, nc));
  if (!e.run_bf16) return;
  e.dnnl16.push_back(time_reps(e.run_bf16, reps));
  e.diff16 = std::max(e.diff16, rel_diff(p.c_dnnl, p.c_blas, nc));
}

// ---- reports ----

// "median [min-max]" of GFLOP/s over rounds from per-round times.
std::string gflops_range(double flops, const std::vector<double>& seconds) {
  const auto [lo, hi] = std::minmax_element(seconds.begin(), seconds.end());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%6.1f [%5.1f-%5.1f]", flops / median(seconds) / 1e9,
                flops / *hi / 1e9, flops / *lo / 1e9);
  return buf;
}

std::vector<double> bests(const std::vector<Sample>& s) {
  std::vector<double> v;
  for (const Sample& x : s) v.push_back(x.best);
  return v;
}

std::vector<double> medians(const std::vector<Sample>& s) {
  std::vector<double> v;
  for (const Sample& x : s) v.push_back(x.median);
  return v;
}

// oneDNN over OpenBLAS speed (= OpenBLAS time / oneDNN time), median over rounds.
double speed_ratio(const std::vector<Sample>& blas, const std::vector<Sample>& other) {
  std::vector<double> r;
  for (size_t i = 0; i < blas.size() && i < other.size(); ++i)
    r.push_back(blas[i].best / other[i].best);
  return median(r);
}

void print_header_row() {
  std::printf("%-24s %3s %2s %6s %6s %6s | %-20s %6s | %-20s %6s | %7s | %8s | %s\n", "gemm", "x",
              "op", "m", "n", "k", "OpenBLAS best GF/s", "med", "oneDNN f32 best GF/s", "med",
              "dnnl/ob", "rel diff", "oneDNN impl");
}

void print_row(const Entry& e) {
  const Gemm& g = *e.g;
  const double f = g.flops();
  std::printf("%-24s %3d %c%c %7d %6d %6d | %s %6.1f | ", g.name.c_str(), g.count, g.ta ? 'T' : 'N',
              g.tb ? 'T' : 'N', g.m, g.n, g.k, gflops_range(f, bests(e.blas)).c_str(),
              f / median(medians(e.blas)) / 1e9);
  if (!e.has_dnnl()) {
    std::printf("%-20s %6s | %7s | %8s | %s\n", "-", "-", "-", "-", e.f32_error.c_str());
    return;
  }
  std::printf("%s %6.1f | %7.2f | %8.1e | %s\n", gflops_range(f, bests(e.dnnl)).c_str(),
              f / median(medians(e.dnnl)) / 1e9, speed_ratio(e.blas, e.dnnl), e.diff,
              e.impl.c_str());
}

// Per-round time of one micro-step's GEMMs of a class ("" = all): sum of count x time.
std::vector<double> round_totals(const std::vector<Entry>& es, const std::string& kind,
                                 bool use_median, std::vector<Sample> Entry::*lib) {
  std::vector<double> t;
  for (const Entry& e : es) {
    if (!kind.empty() && kind != e.g->kind) continue;
    const auto& s = e.*lib;
    if (t.empty()) t.assign(s.size(), 0.0);
    for (size_t r = 0; r < s.size(); ++r)
      t[r] += e.g->count * (use_median ? s[r].median : s[r].best);
  }
  return t;
}

std::string ms_range(const std::vector<double>& t) {
  const auto [lo, hi] = std::minmax_element(t.begin(), t.end());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%8.1f ms [%.1f-%.1f]", 1e3 * median(t), 1e3 * *lo, 1e3 * *hi);
  return buf;
}

void print_total(const std::vector<Entry>& es, const std::string& kind, bool use_median) {
  double flops = 0;
  for (const Entry& e : es)
    if (kind.empty() || kind == e.g->kind) flops += e.g->count * e.g->flops();
  const auto tb = round_totals(es, kind, use_median, &Entry::blas);
  std::printf("  %-7s %-6s %7.2f GFLOP | OpenBLAS %s %6.1f GF/s",
              kind.empty() ? "all" : kind.c_str(), use_median ? "median" : "best", flops / 1e9,
              ms_range(tb).c_str(), flops / median(tb) / 1e9);
  const bool all_dnnl =
      std::all_of(es.begin(), es.end(), [](const Entry& e) { return e.has_dnnl(); });
  if (!all_dnnl) {
    std::printf("\n");
    return;
  }
  const auto td = round_totals(es, kind, use_median, &Entry::dnnl);
  std::vector<double> ratio;
  for (size_t r = 0; r < tb.size(); ++r) ratio.push_back(tb[r] / td[r]);
  const auto [lo, hi] = std::minmax_element(ratio.begin(), ratio.end());
  std::printf(" | oneDNN f32 %s %6.1f GF/s | dnnl/ob %.2f [%.2f-%.2f]\n", ms_range(td).c_str(),
              flops / median(td) / 1e9, median(ratio), *lo, *hi);
}

void print_bf16(const std::vector<Entry>& es) {
  int created = 0;
  const Entry* failed = nullptr;
  for (const Entry& e : es) {
    created += e.has_bf16();
    if (!e.has_bf16() && !failed) failed = &e;
  }
#ifdef PN_HAVE_DNNL
  // "unimplemented": no oneDNN implementation accepts these types on this CPU's ISA.
  if (failed) {
    const std::string& why = failed->bf16_error;
    const std::string isa = why.find("unimplemented") == std::string::npos
                                ? ""
                                : "; no implementation for effective ISA " + pnbench::dnnl_isa();
    std::printf(
        "oneDNN bf16 matmul (bf16 x bf16 -> f32): not created for %zu of %zu shapes; "
        "first refusal (%s): %s%s\n",
        es.size() - created, es.size(), failed->g->name.c_str(), why.c_str(), isa.c_str());
  }
#endif
  if (!created) return;
  std::printf("%-24s | %-20s | %7s | %8s | %s\n", "gemm", "oneDNN bf16 best GF/s", "bf16/ob",
              "rel diff", "oneDNN impl");
  for (const Entry& e : es)
    if (e.has_bf16())
      std::printf("%-24s | %s | %7.2f | %8.1e | %s\n", e.g->name.c_str(),
                  gflops_range(e.g->flops(), bests(e.dnnl16)).c_str(),
                  speed_ratio(e.blas, e.dnnl16), e.diff16, e.impl16.c_str());
}

void print_model(const ModelGemms& mg, const std::vector<Entry>& es, int threads,
                 const Options& o) {
  std::printf("\n== %s | threads %d (OpenMP %d, OpenBLAS %d) | %s\n", mg.name.c_str(), threads,
              omp_get_max_threads(), blas_threads(), mg.summary.c_str());
  print_header_row();
  for (const Entry& e : es) print_row(e);
  std::printf("micro-step total = sum of count x time per round; median [min-max] over %d rounds\n",
              o.rounds);
  for (bool use_median : {false, true})
    for (const char* kind : {"", "attn", "ffn", "output"}) print_total(es, kind, use_median);
  if (std::any_of(es.begin(), es.end(),
                  [](const Entry& e) { return !e.bf16_error.empty() || e.has_bf16(); }))
    print_bf16(es);
}

// Returns false when a oneDNN result differs from OpenBLAS's beyond rounding.
bool run_model(const std::string& name, int threads, const Options& o) {
  const ModelGemms mg = pnbench::model_gemms(name);
#ifdef PN_HAVE_DNNL
  const bool use_dnnl = o.dnnl;
#else
  const bool use_dnnl = false;
#endif
  Pool pool(mg, use_dnnl);
  std::vector<Entry> es(mg.gemms.size());
  for (size_t i = 0; i < es.size(); ++i) {
    es[i].g = &mg.gemms[i];
#ifdef PN_HAVE_DNNL
    if (use_dnnl) {
      create_dnnl(es[i], pool);
      continue;
    }
#endif
    es[i].f32_error = o.dnnl ? "not built with oneDNN" : "--no-dnnl";
  }
  for (int r = 0; r < o.rounds; ++r)
    for (Entry& e : es) measure(e, pool, o.reps, r % 2 == 0);
  print_model(mg, es, threads, o);
  std::fflush(stdout);
  return std::all_of(es.begin(), es.end(), [](const Entry& e) { return e.diff <= kMaxRelDiff; });
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::printf("pnbench_gemm | CPU %s\n%s\n", cpu_line().c_str(), blas_line().c_str());
#ifdef PN_HAVE_DNNL
  std::printf("%s\n", pnbench::dnnl_version_line().c_str());
#else
  std::printf("oneDNN: not built in (PN_HAVE_DNNL unset): OpenBLAS only\n");
#endif
  std::printf(
      "GF/s = 2mnk / time; per round: 1 warm-up, then best and median of %d; the "
      "library timed first alternates between rounds; best GF/s = median over %d rounds "
      "[min-max]; dnnl/ob = OpenBLAS time / oneDNN time (> 1: oneDNN faster); rel diff "
      "= max |C_dnnl - C_blas| / max |C_blas|\n",
      o.reps, o.rounds);
  bool ok = true;
  try {
    for (int t : o.threads) {
      set_threads(t);
      for (const std::string& m : o.models) ok = run_model(m, t, o) && ok;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pnbench_gemm: %s\n", e.what());
    return 2;
  }
  if (!ok)
    std::printf("\nFAILED: a oneDNN result differs from OpenBLAS's by more than %.0e\n",
                kMaxRelDiff);
  return ok ? 0 : 1;
}
