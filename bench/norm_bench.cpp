// pnbench_norms: forward+backward time and achieved memory bandwidth of every norm kind.
//
// For each norm kind, feature count d and token count (float32, training mode, no mask: every
// row is a real token) the benchmark times forward(x) followed by backward(x, dy) on the rows of
// this rank (tokens / ranks) and reports the median of --reps repetitions after --warmup
// untimed ones. Under mpirun each repetition starts after a barrier and its time is the slowest
// rank's time.
//
// Bytes (the minimum traffic of forward+backward): forward reads x and writes y, backward reads
// x and dy and writes dx, so bytes = 5 * rows * d * 4 per rank (summed over ranks below).
// GB/s = bytes / median time (1 GB = 1e9 bytes). Anything a norm reads or writes beyond that
// (a statistics pass, a second pass over x or dy, the parameter-gradient pass, write-allocate
// reads of y and dx) only lowers its GB/s, so the figure says how close a norm is to streaming.
// The reference is a plain memory copy of the same byte count: every rank copies bytes / 2
// from one buffer into another (memcpy per OpenMP thread chunk), i.e. bytes of traffic, best
// of --reps. ratio = norm GB/s / copy GB/s (= copy time / norm time).
//
// Under mpirun -np R with sync_* kinds, the benchmark also reports the time that synchronized
// statistics add per norm call (one forward + one backward): time of sync_X minus the time of
// its rank-local twin X on the same rows (the two timed alternately, median of the per-pair
// differences, so both see the same machine load), and the time of the all-reduces alone (MPI all-reduce
// of the same packed double buffers: sync_batch forward 1+2d, backward 2d; sync_power_v and
// sync_power forward 1+d, backward d). A pre-norm Transformer of L layers has 2L+1 norm calls
// per update (2 per block and the final norm); the figures are also given for L = 6.
//
// --device cuda times the GPU's kernels instead, in one process (bench/norm_bench_cuda.cpp).
#include <omp.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/norm_bench_cuda.h"
#include "comm/communicator.h"
#include "kernels/device.h"
#include "kernels/kernels.h"
#include "layers/norms/norm.h"

namespace po = boost::program_options;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) {
        std::string s = line.substr(p + 1);
        s.erase(0, s.find_first_not_of(" \t"));
        return s;
      }
    }
  }
  return "unknown";
}

template <class T>
std::vector<T> split_list(const std::string& s) {
  std::vector<T> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    std::istringstream is(item);
    T v;
    is >> v;
    if (is.fail()) throw std::invalid_argument("bad list item '" + item + "' in '" + s + "'");
    out.push_back(v);
  }
  return out;
}

// The rank-local kind that a sync_* kind synchronizes ("" for others).
std::string local_twin(const std::string& kind) {
  return kind.rfind("sync_", 0) == 0 ? kind.substr(5) : "";
}

// Doubles all-reduced per direction by a synchronized kind.
void allreduce_sizes(const std::string& kind, int d, size_t* fwd, size_t* bwd) {
  if (kind == "sync_batch") {
    *fwd = 1 + 2 * size_t(d);
    *bwd = 2 * size_t(d);
  } else {
    *fwd = 1 + size_t(d);
    *bwd = size_t(d);
  }
}

// The slowest rank's value.
double max_over_ranks(pn::Communicator& comm, double v) {
  comm.allreduce_max(&v, 1);
  return v;
}

struct Timing {
  double fwd_ms = 0, bwd_ms = 0, total_ms = 0;
};

// Times fwd() then bwd(), reps times after warmup untimed pairs; medians of the slowest rank.
Timing time_fwd_bwd(pn::Communicator& comm, int warmup, int reps,
                    const std::function<void()>& fwd, const std::function<void()>& bwd) {
  for (int i = 0; i < warmup; ++i) {
    fwd();
    bwd();
  }
  std::vector<double> tf, tb, tt;
  for (int i = 0; i < reps; ++i) {
    comm.barrier();
    const double t0 = now_s();
    fwd();
    const double t1 = now_s();
    bwd();
    const double t2 = now_s();
    tf.push_back(max_over_ranks(comm, t1 - t0));
    tb.push_back(max_over_ranks(comm, t2 - t1));
    tt.push_back(max_over_ranks(comm, t2 - t0));
  }
  return {1e3 * median(tf), 1e3 * median(tb), 1e3 * median(tt)};
}

// Copy of `bytes` bytes of traffic (bytes/2 read, bytes/2 written), each OpenMP thread
// memcpy-ing one contiguous chunk; best of reps, slowest rank. Returns ms.
double time_copy(pn::Communicator& comm, size_t bytes, int warmup, int reps) {
  const size_t n = bytes / 2;
  std::vector<char> src(n), dst(n);
  std::memset(src.data(), 1, n);
  std::memset(dst.data(), 0, n);
  auto copy = [&] {
#pragma omp parallel
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t a = n * size_t(t) / size_t(nt), b = n * size_t(t + 1) / size_t(nt);
      std::memcpy(dst.data() + a, src.data() + a, b - a);
    }
  };
  for (int i = 0; i < warmup; ++i) copy();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    comm.barrier();
    const double t0 = now_s();
    copy();
    best = std::min(best, max_over_ranks(comm, now_s() - t0));
  }
  volatile char sink = dst[n / 2];
  (void)sink;
  return 1e3 * best;
}

// Allreduce of the same packed double buffers as one sync_* call (forward, then backward).
void time_allreduces(pn::Communicator& comm, size_t nf, size_t nb, int warmup, int reps,
                     double* fwd_ms, double* bwd_ms) {
  std::vector<double> bf(nf, 1.0), bb(nb, 1.0);
  for (int i = 0; i < warmup; ++i) {
    comm.allreduce_sum(bf.data(), nf);
    comm.allreduce_sum(bb.data(), nb);
  }
  std::vector<double> tf, tb;
  for (int i = 0; i < reps; ++i) {
    comm.barrier();
    const double t0 = now_s();
    comm.allreduce_sum(bf.data(), nf);
    const double t1 = now_s();
    comm.barrier();
    const double t2 = now_s();
    comm.allreduce_sum(bb.data(), nb);
    const double t3 = now_s();
    tf.push_back(max_over_ranks(comm, t1 - t0));
    tb.push_back(max_over_ranks(comm, t3 - t2));
  }
  *fwd_ms = 1e3 * median(tf);
  *bwd_ms = 1e3 * median(tb);
}

struct Inputs {
  int rows = 0, d = 0;
  std::vector<float> x, dy, y, dx;
};

void make_inputs(Inputs& in, int rows, int d, int rank) {
  in.rows = rows;
  in.d = d;
  const size_t n = size_t(rows) * d;
  in.x.resize(n);
  in.dy.resize(n);
  in.y.assign(n, 0.f);  // touched before timing (no page faults inside the timed region)
  in.dx.assign(n, 0.f);
  std::mt19937 rng(1234 + 7919 * rank + d);
  std::normal_distribution<float> nx(0.5f, 2.0f), ndy(0.f, 1.f);
  for (size_t i = 0; i < n; ++i) {
    in.x[i] = nx(rng);
    in.dy[i] = ndy(rng);
  }
}

struct Result {
  std::string kind;
  int d, tokens, rows;
  Timing t;
  double bytes, gbps, copy_ms, copy_gbps, ratio;
};

Timing bench_norm(pn::Communicator& comm, const std::string& kind, int groups, Inputs& in,
                  int warmup, int reps) {
  pn::NormOptions o;
  o.kind = kind;
  o.groups = groups;
  pn::ParamStore<float> store;
  auto norm = pn::make_norm<float>(o, in.d, store, "norm", &comm);
  store.allocate(42);
  auto fwd = [&] { norm->forward(in.x.data(), nullptr, in.rows, in.y.data(), true); };
  auto bwd = [&] { norm->backward(in.x.data(), in.dy.data(), nullptr, in.rows, in.dx.data()); };
  return time_fwd_bwd(comm, warmup, reps, fwd, bwd);
}

void paired_sync_vs_local(pn::Communicator& comm, const std::string& kind,
                          const std::string& twin, int groups, Inputs& in, int warmup, int reps,
                          double* sync_ms, double* twin_ms, double* added_ms) {
  pn::NormOptions os, ot;
  os.kind = kind;
  ot.kind = twin;
  os.groups = ot.groups = groups;
  pn::ParamStore<float> ss, st;
  auto ns = pn::make_norm<float>(os, in.d, ss, "norm", &comm);
  auto nt = pn::make_norm<float>(ot, in.d, st, "norm", &comm);
  ss.allocate(42);
  st.allocate(42);
  auto call = [&](pn::Norm<float>& n) {
    comm.barrier();
    const double t0 = now_s();
    n.forward(in.x.data(), nullptr, in.rows, in.y.data(), true);
    n.backward(in.x.data(), in.dy.data(), nullptr, in.rows, in.dx.data());
    return max_over_ranks(comm, now_s() - t0);
  };
  for (int i = 0; i < warmup; ++i) {
    call(*nt);
    call(*ns);
  }
  std::vector<double> a, b, diff;
  for (int i = 0; i < reps; ++i) {
    // Alternate which goes first, so neither always follows the other.
    double tt, ts;
    if (i % 2) {
      tt = call(*nt);
      ts = call(*ns);
    } else {
      ts = call(*ns);
      tt = call(*nt);
    }
    a.push_back(ts);
    b.push_back(tt);
    diff.push_back(ts - tt);
  }
  *sync_ms = 1e3 * median(a);
  *twin_ms = 1e3 * median(b);
  *added_ms = 1e3 * median(diff);
}

// --parts: the kernels behind the norms, each alone, with its own minimum traffic in units of
// rows*d*4 bytes (a read or a write of one [rows, d] float buffer).
void bench_parts(pn::Communicator& comm, Inputs& in, int groups, int warmup, int reps,
                 double copy_gbps, std::ostream& os) {
  const int rows = in.rows, d = in.d;
  const double unit = double(rows) * d * 4 * comm.size();
  std::vector<double> shift(d, 0.1), scale(d, 0.7), a(d, 0.01), b(d, 0.02), s1(d), s2(d);
  std::vector<float> gamma(d, 1.f), beta(d, 0.f), dg(d, 0.f), db(d, 0.f);
  std::vector<float> mean(size_t(rows) * groups), rstd(size_t(rows) * groups);
  double count;
  const float* x = in.x.data();
  const float* dy = in.dy.data();
  float* y = in.y.data();
  float* dx = in.dx.data();
  struct Part {
    const char* name;
    int units;
    std::function<void()> f;
  };
  std::vector<Part> parts = {
      {"column_stats (x)", 1,
       [&] { pn::k::column_stats<float>(x, nullptr, rows, d, shift.data(), &count, s1.data(),
                                        s2.data()); }},
      {"column_affine (x->y)", 2,
       [&] { pn::k::column_affine<float>(x, rows, d, shift.data(), scale.data(), gamma.data(),
                                         beta.data(), y, nullptr, nullptr); }},
      {"column_dot (dy,x)", 2,
       [&] { pn::k::column_dot<float>(dy, x, nullptr, rows, d, shift.data(), s1.data(),
                                      s2.data()); }},
      {"column_norm_backward (x,dy->dx)", 3,
       [&] { pn::k::column_norm_backward<float>(x, dy, nullptr, rows, d, shift.data(),
                                                scale.data(), gamma.data(), a.data(), b.data(),
                                                dx, false, nullptr); }},
      {"layernorm_forward (x->y)", 2,
       [&] { pn::k::layernorm_forward<float>(x, rows, d, gamma.data(), beta.data(), 1e-5f, y,
                                             nullptr, mean.data(), rstd.data()); }},
      {"layernorm_backward (x,dy->dx)", 3,
       [&] { pn::k::layernorm_backward<float>(x, dy, mean.data(), rstd.data(), gamma.data(),
                                              nullptr, rows, d, dx, dg.data(), db.data(),
                                              false, nullptr); }},
      {"rowgroup_rms_forward G=1 (x->y)", 2,
       [&] { pn::k::rowgroup_rms_forward<float>(x, rows, d, 1, 1e-5f, gamma.data(), y, nullptr,
                                                rstd.data()); }},
      {"rowgroup_rms_backward G=1 (x,dy->dx)", 3,
       [&] { pn::k::rowgroup_rms_backward<float>(x, dy, rstd.data(), gamma.data(), nullptr,
                                                 rows, d, 1, dx, dg.data(), false, nullptr); }},
      {"rowgroup_norm_forward (x->y)", 2,
       [&] { pn::k::rowgroup_norm_forward<float>(x, rows, d, groups, 1e-5f, gamma.data(),
                                                 beta.data(), y, nullptr, mean.data(),
                                                 rstd.data()); }},
      {"rowgroup_norm_backward (x,dy->dx)", 3,
       [&] { pn::k::rowgroup_norm_backward<float>(x, dy, mean.data(), rstd.data(),
                                                  gamma.data(), nullptr, rows, d, groups, dx,
                                                  dg.data(), db.data(), false, nullptr); }},
  };
  for (auto& p : parts) {
    for (int i = 0; i < warmup; ++i) p.f();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      comm.barrier();
      const double t0 = now_s();
      p.f();
      t.push_back(max_over_ranks(comm, now_s() - t0));
    }
    const double ms = 1e3 * median(t);
    const double gbps = p.units * unit / (ms * 1e-3) / 1e9;
    if (comm.rank() == 0)
      os << "  " << std::left << std::setw(38) << p.name << std::right << std::fixed
         << std::setprecision(3) << std::setw(9) << ms << " ms" << std::setprecision(1)
         << std::setw(8) << gbps << " GB/s" << std::setprecision(2) << std::setw(7)
         << gbps / copy_gbps << " x copy\n";
  }
}

int run(int argc, char** argv, pn::Communicator& comm) {
  int reps = 20, warmup = 3, threads = 0, groups = 8;
  std::string kinds_s, dims_s = "512,1024", tokens_s = "4096,16384", csv, device = "cpu";
  bool parts = false;
  po::options_description desc(
      "pnbench_norms: forward+backward time and GB/s of every norm (float32, training, no "
      "mask).\nbytes = 5 * rows * d * 4 (forward reads x, writes y; backward reads x, dy, "
      "writes dx).\nOptions");
  // clang-format off
  desc.add_options()
    ("help,h", "print this help")
    ("reps", po::value(&reps)->default_value(reps), "timed repetitions (median reported)")
    ("warmup", po::value(&warmup)->default_value(warmup), "untimed repetitions first")
    ("kinds", po::value(&kinds_s), "comma-separated norm kinds (default: all)")
    ("dims", po::value(&dims_s)->default_value(dims_s), "comma-separated feature counts d")
    ("tokens", po::value(&tokens_s)->default_value(tokens_s),
     "comma-separated token counts (over all ranks; each rank holds tokens / ranks rows)")
    ("groups", po::value(&groups)->default_value(groups), "groups of the 'group' norm")
    ("threads", po::value(&threads)->default_value(threads),
     "OpenMP threads per rank (0: the node's cores divided by the ranks)")
    ("csv", po::value(&csv), "also write the results as CSV to FILE (rank 0)")
    ("parts", po::bool_switch(&parts), "also time the norm kernels one by one")
    ("device", po::value(&device)->default_value(device),
     "cpu, or cuda: the GPU's kernels, each direction in fp32 and as training runs it, with L2 "
     "flushed between repetitions, as shares of a device copy (one process)");
  // clang-format on
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  if (vm.count("help")) {
    if (comm.rank() == 0) std::cout << desc << "\n";
    return 0;
  }
  po::notify(vm);
  if (reps < 1 || warmup < 0) throw std::invalid_argument("--reps must be >= 1, --warmup >= 0");

  const int R = comm.size(), rank = comm.rank();
  if (threads <= 0) threads = std::max(1, pn::hardware_cores() / std::max(1, comm.local_size()));
  pn::set_num_threads(threads);

  std::vector<std::string> kinds =
      kinds_s.empty() ? pn::norm_kinds() : split_list<std::string>(kinds_s);
  for (const auto& k : kinds)
    if (!pn::is_norm_kind(k)) throw std::invalid_argument("unknown norm kind '" + k + "'");
  const auto dims = split_list<int>(dims_s);
  const auto tokens_list = split_list<int>(tokens_s);
  if (device == "cuda") {
    if (R > 1) throw std::invalid_argument("--device cuda times one process: run it alone");
    if (kinds_s.empty()) {  // the synchronized kinds need ranks
      kinds.clear();
      for (const auto& k : pn::norm_kinds())
        if (local_twin(k).empty()) kinds.push_back(k);
    }
    for (const auto& k : kinds)
      if (!local_twin(k).empty())
        throw std::invalid_argument("--kinds " + k + " on --device cuda: a synchronized kind "
                                    "needs ranks; time " + local_twin(k) + " instead");
#ifdef PN_HAVE_CUDA
    return pn::bench::norm_bench_cuda(kinds, dims, tokens_list, groups, reps);
#else
    throw std::invalid_argument("--device cuda: this build has no CUDA path (rebuild with "
                                "PN_CUDA=ON on a machine with the CUDA toolkit)");
#endif
  }
  if (device != "cpu") throw std::invalid_argument("--device '" + device + "': choose cpu or cuda");
  // Under several ranks a sync_* kind is compared with its local twin: measure it too.
  std::vector<std::string> run_kinds = kinds;
  if (R > 1)
    for (const auto& k : kinds) {
      const std::string twin = local_twin(k);
      if (!twin.empty() && std::find(run_kinds.begin(), run_kinds.end(), twin) == run_kinds.end())
        run_kinds.push_back(twin);
    }

  std::ostream& os = std::cout;
  const std::string cpu = cpu_model();
  if (rank == 0) {
    os << "pnbench_norms | CPU: " << cpu << " | cores: " << pn::hardware_cores()
       << " | ranks: " << R << " | threads/rank: " << threads << " | float32, training, no mask"
       << " | median of " << reps << " reps after " << warmup << " warm-up\n"
       << "bytes = 5 * rows * d * 4 (forward reads x, writes y; backward reads x, dy, writes "
          "dx), summed over ranks; GB/s = bytes / median time.\n"
       << "copy = memcpy with the same traffic (bytes/2 read + bytes/2 written per rank, "
          "OpenMP chunks), best of reps; ratio = norm GB/s / copy GB/s.\n";
    if (R > 1) os << "Each rank holds tokens / " << R << " rows; times are the slowest rank's.\n";
    os << "\n"
       << std::left << std::setw(14) << "kind" << std::right << std::setw(6) << "d"
       << std::setw(8) << "tokens" << std::setw(7) << "rows" << std::setw(10) << "fwd ms"
       << std::setw(10) << "bwd ms" << std::setw(10) << "total ms" << std::setw(9) << "GB/s"
       << std::setw(10) << "copy ms" << std::setw(10) << "copy GB/s" << std::setw(8) << "ratio"
       << "\n";
  }

  std::vector<Result> results;
  for (int d : dims)
    for (int tokens : tokens_list) {
      if (tokens % R != 0 && rank == 0)
        std::cerr << "note: " << tokens << " tokens do not split evenly over " << R
                  << " ranks; rank r holds floor((r+1)T/R) - floor(rT/R) rows\n";
      const int rows = int(int64_t(tokens) * (rank + 1) / R - int64_t(tokens) * rank / R);
      Inputs in;
      make_inputs(in, rows, d, rank);
      const double bytes = 5.0 * tokens * d * 4;  // over all ranks
      const double copy_ms =
          time_copy(comm, size_t(5) * size_t(rows) * size_t(d) * 4, warmup, reps);
      const double copy_gbps = bytes / (copy_ms * 1e-3) / 1e9;
      for (const auto& kind : run_kinds) {
        Result r;
        r.kind = kind;
        r.d = d;
        r.tokens = tokens;
        r.rows = rows;
        r.t = bench_norm(comm, kind, groups, in, warmup, reps);
        r.bytes = bytes;
        r.gbps = bytes / (r.t.total_ms * 1e-3) / 1e9;
        r.copy_ms = copy_ms;
        r.copy_gbps = copy_gbps;
        r.ratio = r.gbps / copy_gbps;
        results.push_back(r);
        if (rank == 0)
          os << std::left << std::setw(14) << kind << std::right << std::setw(6) << d
             << std::setw(8) << tokens << std::setw(7) << rows << std::fixed
             << std::setprecision(3) << std::setw(10) << r.t.fwd_ms << std::setw(10)
             << r.t.bwd_ms << std::setw(10) << r.t.total_ms << std::setprecision(1)
             << std::setw(9) << r.gbps << std::setprecision(3) << std::setw(10) << copy_ms
             << std::setprecision(1) << std::setw(10) << copy_gbps << std::setprecision(2)
             << std::setw(8) << r.ratio << "\n"
             << std::flush;
      }
      if (parts) {
        if (rank == 0)
          os << "  -- kernels alone, d " << d << ", tokens " << tokens << " (traffic: 1 per "
             << "[rows, d] buffer read or written) --\n";
        bench_parts(comm, in, groups, warmup, reps, copy_gbps, os);
      }
    }

  // Synchronized statistics: added time per call, and the all-reduces alone.
  struct SyncRow {
    std::string kind;
    int d, tokens;
    double sync_ms, twin_ms, added_ms, ar_fwd_ms, ar_bwd_ms;
  };
  std::vector<SyncRow> sync_rows;
  const int L = 6, calls = 2 * L + 1;
  if (R > 1) {
    for (int d : dims)
      for (int tokens : tokens_list)
        for (const auto& kind : kinds) {
          const std::string twin = local_twin(kind);
          if (twin.empty()) continue;
          const int rows = int(int64_t(tokens) * (rank + 1) / R - int64_t(tokens) * rank / R);
          Inputs in;
          make_inputs(in, rows, d, rank);
          SyncRow s{kind, d, tokens, 0, 0, 0, 0, 0};
          paired_sync_vs_local(comm, kind, twin, groups, in, warmup, std::max(reps, 20),
                               &s.sync_ms, &s.twin_ms, &s.added_ms);
          size_t nf, nb;
          allreduce_sizes(kind, d, &nf, &nb);
          time_allreduces(comm, nf, nb, warmup, std::max(reps, 50), &s.ar_fwd_ms, &s.ar_bwd_ms);
          sync_rows.push_back(s);
        }
    if (rank == 0 && !sync_rows.empty()) {
      os << "\nSynchronized statistics over " << R << " ranks, per norm call (forward + "
         << "backward).\nsync ms / local ms: sync_X and its local twin X timed alternately on "
         << "the same rows (medians); added ms = median of the per-pair differences;\n"
         << "AR = MPI all-reduce of the same packed double buffers alone (median of forward + "
         << "median of backward).\nPer update of a model with L = "
         << L << " layers: 2L+1 = " << calls << " norm calls.\n\n"
         << std::left << std::setw(14) << "kind" << std::right << std::setw(6) << "d"
         << std::setw(8) << "tokens" << std::setw(11) << "sync ms" << std::setw(11)
         << "local ms" << std::setw(11) << "added ms" << std::setw(10) << "AR doubl"
         << std::setw(12) << "AR fwd+bwd" << std::setw(14) << "added/upd L6" << std::setw(12)
         << "AR/upd L6" << "\n";
      for (const auto& s : sync_rows) {
        size_t nf, nb;
        allreduce_sizes(s.kind, s.d, &nf, &nb);
        const double ar = s.ar_fwd_ms + s.ar_bwd_ms;
        os << std::left << std::setw(14) << s.kind << std::right << std::setw(6) << s.d
           << std::setw(8) << s.tokens << std::fixed << std::setprecision(3) << std::setw(11)
           << s.sync_ms << std::setw(11) << s.twin_ms << std::setw(11) << s.added_ms
           << std::setw(10) << (std::to_string(nf) + "+" + std::to_string(nb)) << std::setw(12)
           << ar << std::setw(14) << calls * s.added_ms << std::setw(12) << calls * ar << "\n";
      }
      os << "(times in ms; AR doubl = doubles all-reduced forward+backward; a negative "
            "'added' is noise)\n";
    }
  }

  if (rank == 0 && !csv.empty()) {
    std::ofstream f(csv);
    if (!f) throw std::runtime_error("cannot write " + csv);
    f << "cpu,ranks,threads,kind,d,tokens,rows_per_rank,fwd_ms,bwd_ms,total_ms,bytes,gbps,"
         "copy_ms,copy_gbps,ratio,local_twin_ms,added_ms,allreduce_fwd_ms,allreduce_bwd_ms,"
         "added_per_update_L6_ms,allreduce_per_update_L6_ms\n";
    for (const auto& r : results) {
      f << '"' << cpu << "\"," << R << ',' << threads << ',' << r.kind << ',' << r.d << ','
        << r.tokens << ',' << r.rows << ',' << r.t.fwd_ms << ',' << r.t.bwd_ms << ','
        << r.t.total_ms << ',' << std::setprecision(12) << r.bytes << std::setprecision(6)
        << ',' << r.gbps << ',' << r.copy_ms << ',' << r.copy_gbps << ',' << r.ratio;
      const SyncRow* s = nullptr;
      for (const auto& q : sync_rows)
        if (q.kind == r.kind && q.d == r.d && q.tokens == r.tokens) s = &q;
      if (s)
        f << ',' << s->twin_ms << ',' << s->added_ms << ',' << s->ar_fwd_ms << ','
          << s->ar_bwd_ms << ',' << calls * s->added_ms << ','
          << calls * (s->ar_fwd_ms + s->ar_bwd_ms);
      else
        f << ",,,,,,";
      f << "\n";
    }
    os << "\nCSV written to " << csv << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto comm = pn::make_communicator(&argc, &argv);
  try {
    return run(argc, argv, *comm);
  } catch (const std::exception& e) {
    if (comm->size() > 1) comm->abort(std::string("pnbench_norms: ") + e.what());
    std::cerr << "pnbench_norms: " << e.what() << "\n";
    return 2;
  }
}
