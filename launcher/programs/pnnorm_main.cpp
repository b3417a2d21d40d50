// pnnorm: runs one norm layer on .npy data (docs/contract.md §7), for checking it against another
// framework. T training iterations (forward then backward, parameters fixed, state carried),
// then inference on X[T-1]. Under mpirun -np R, rank r takes rows [floor(r N/R),
// floor((r+1) N/R)) of every iteration; rank 0 writes y, dx, y_eval in the original row order
// (gathered by an all-reduce of zero-padded buffers) and dgamma/dbeta summed over ranks; every
// rank writes its own running state under DIR/state/rank<r>/. With --sync-group-size K the
// sync_* norms reduce their statistics within groups of K consecutive ranks.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/buffer.h"
#include "launcher/programs/npy.h"
#include "layers/norms/norm.h"

namespace po = boost::program_options;

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + ")";
}

int run(int argc, char** argv, pn::Communicator& comm) {
  pn::NormOptions o;
  std::string x_path, dy_path, mask_path, gamma_path, beta_path, out, device_name = "cpu";
  int sync_group_size = 0;
  std::string pn_variant = "paper", pn_warmup_psi = "cumulative";
  po::options_description desc(
      "pnnorm: run one norm layer on .npy data (docs/contract.md §7)\n"
      "  pnnorm --norm NAME --x X.npy --dy DY.npy [--mask M.npy] --out DIR\n"
      "X, DY: float32 (T, N, d); M: (T, N) bool/uint8/float32, nonzero = real token.\n"
      "Writes y.npy, dx.npy (T, N, d), dgamma.npy, dbeta.npy (T, d), y_eval.npy (N, d) and\n"
      "state/rank<r>/<name>.npy (T, d). Options");
  // clang-format off
  desc.add_options()
    ("help,h", "print this help")
    ("norm", po::value(&o.kind)->required(), "norm name (see below)")
    ("x", po::value(&x_path)->required(), "input X.npy, float32 (T, N, d)")
    ("dy", po::value(&dy_path)->required(), "output gradient DY.npy, float32 (T, N, d)")
    ("mask", po::value(&mask_path), "M.npy (T, N): nonzero = real token (default: all real)")
    ("gamma", po::value(&gamma_path), "G.npy, float32 (d) (default: ones)")
    ("beta", po::value(&beta_path), "BE.npy, float32 (d) (default: zeros; ignored by rms)")
    ("eps", po::value(&o.eps)->default_value(o.eps), "eps inside every square root")
    ("alpha", po::value(&o.alpha)->default_value(o.alpha), "running-statistics momentum")
    ("alpha-fwd", po::value(&o.alpha_fwd)->default_value(o.alpha_fwd), "PN forward momentum")
    ("alpha-bkw", po::value(&o.alpha_bkw)->default_value(o.alpha_bkw), "PN backward momentum")
    ("warmup", po::value(&o.warmup)->default_value(o.warmup), "PN warmup iterations")
    ("pn-variant", po::value(&pn_variant)->default_value(pn_variant),
     "PN's math (power, sync_power): paper or authors")
    ("pn-warmup-psi", po::value(&pn_warmup_psi)->default_value(pn_warmup_psi),
     "PN's running psi^2 in warmup: cumulative or ema")
    ("groups", po::value(&o.groups)->default_value(o.groups), "groups of the group norm")
    ("prescale-groups", po::value(&o.prescale_groups)->default_value(o.prescale_groups),
     "pre-scaling groups before batch-type norms (0: off)")
    ("sync-group-size", po::value(&sync_group_size),
     "sync_* norms reduce their statistics within groups of this many consecutive ranks (a "
     "divisor of the world size; default: all ranks)")
    ("device", po::value(&device_name)->default_value(device_name),
     "cpu or cuda (the rank's node-local GPU)")
    ("out", po::value(&out)->required(), "output directory");
  // clang-format on
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  if (vm.count("help")) {
    if (comm.rank() == 0) {
      std::string known;
      for (const auto& k : pn::norm_kinds()) known += (known.empty() ? "" : ", ") + k;
      std::cout << desc << "\nNorms: " << known << std::endl;
    }
    return 0;
  }
  po::notify(vm);
  if (!pn::is_norm_kind(o.kind)) {
    std::string known;
    for (const auto& k : pn::norm_kinds()) known += (known.empty() ? "" : ", ") + k;
    throw std::invalid_argument("unknown --norm '" + o.kind + "' (known: " + known + ")");
  }
  if (o.eps <= 0) throw std::invalid_argument("--eps must be positive");
  o.pn_variant = pn::parse_pn_variant(pn_variant);
  o.pn_warmup_psi = pn::parse_pn_warmup_psi(pn_warmup_psi);
  const pn::NormKind kind = pn::parse_norm_kind(o.kind);
  if (o.pn_variant != pn::PnVariant::paper && kind != pn::NormKind::power &&
      kind != pn::NormKind::sync_power)
    throw std::invalid_argument("--pn-variant " + pn_variant + " applies to power and " +
                                "sync_power only, not --norm " + o.kind);

  std::vector<int64_t> xs, dys, ms;
  const std::vector<float> X = pn::npy::read_float32(x_path, &xs);
  const std::vector<float> DY = pn::npy::read_float32(dy_path, &dys);
  if (xs.size() != 3) throw std::invalid_argument(x_path + ": shape " + shape_str(xs) + ", need (T, N, d)");
  if (dys != xs)
    throw std::invalid_argument(dy_path + ": shape " + shape_str(dys) + " differs from X's " + shape_str(xs));
  const int64_t T = xs[0], N = xs[1], d = xs[2];
  if (T < 1 || d < 1) throw std::invalid_argument(x_path + ": need T >= 1 and d >= 1, got " + shape_str(xs));
  std::vector<uint8_t> M(size_t(T * N), 1);
  if (!mask_path.empty()) {
    M = pn::npy::read_mask(mask_path, &ms);
    if (ms != std::vector<int64_t>{T, N})
      throw std::invalid_argument(mask_path + ": shape " + shape_str(ms) + ", need (T, N) = " +
                                  shape_str({T, N}));
  }
  const bool has_beta = o.kind != "rms";
  // The statistics group: a split when --sync-group-size is given, the job's communicator
  // itself otherwise (the path that runs without the flag).
  if (const std::string e = pn::sync_group_error(sync_group_size, comm.size()); !e.empty())
    throw std::invalid_argument(e);
  std::unique_ptr<pn::Communicator> group;
  if (vm.count("sync-group-size")) group = pn::make_group_communicator(comm, sync_group_size);
  pn::Communicator& stats_comm = group ? *group : comm;

  // The layer and its data live on the device; the results come back to the host at the end.
  pn::DeviceScope scope(pn::resolve_device(device_name, false), comm.local_rank());
  pn::ParamStore<float> store;
  auto norm = pn::make_norm<float>(o, int(d), store, "norm", &stats_comm);
  store.allocate(0);
  auto load_param = [&](const std::string& path, int idx, const char* what) {
    if (path.empty()) return;
    std::vector<int64_t> s;
    const std::vector<float> v = pn::npy::read_float32(path, &s);
    if (s != std::vector<int64_t>{d})
      throw std::invalid_argument(path + ": " + what + " shape " + shape_str(s) + ", need (" +
                                  std::to_string(d) + ",)");
    pn::copy_to_device(store.p(idx), v.data(), v.size() * sizeof(float));
  };
  load_param(gamma_path, 0, "gamma");
  if (has_beta) load_param(beta_path, 1, "beta");

  const int R = comm.size(), r = comm.rank();
  const int64_t lo = int64_t(r) * N / R, hi = int64_t(r + 1) * N / R, n = hi - lo;
  const size_t plane = size_t(N * d);
  pn::Buf<float> x_dev, dy_dev, y_dev(size_t(T) * plane), dx_dev(size_t(T) * plane);
  pn::Buf<uint8_t> m_dev;
  x_dev.from_host(X);
  dy_dev.from_host(DY);
  m_dev.from_host(M);
  std::vector<float> dgamma(size_t(T * d)), dbeta(size_t(T * d), 0.0f);
  std::vector<std::vector<double>> states;
  std::vector<std::string> state_names;
  for (const pn::StateTensor& s : norm->state())
    if (s.name != "t") state_names.push_back(s.name), states.emplace_back(size_t(T) * s.n);

  for (int64_t t = 0; t < T; ++t) {
    const size_t off = size_t(t) * plane + size_t(lo * d);
    const uint8_t* m = m_dev.data() + size_t(t * N + lo);
    pn::k::fill<float>(store.grad.data(), store.grad.size(), 0.0f);
    norm->forward(x_dev.data() + off, m, int(n), y_dev.data() + off, true);
    norm->backward(x_dev.data() + off, dy_dev.data() + off, m, int(n), dx_dev.data() + off);
    pn::copy_to_host(dgamma.data() + t * d, store.g(0), size_t(d) * sizeof(float));
    if (has_beta) pn::copy_to_host(dbeta.data() + t * d, store.g(1), size_t(d) * sizeof(float));
    size_t k = 0;
    for (const pn::StateTensor& s : norm->state()) {
      if (s.name == "t") continue;
      pn::copy_to_host(states[k++].data() + t * s.n, s.data, s.n * sizeof(double));
    }
    pn::synchronize();
  }
  pn::Buf<float> yeval_dev(plane);
  const size_t last = size_t(T - 1) * plane + size_t(lo * d);
  norm->forward(x_dev.data() + last, m_dev.data() + size_t((T - 1) * N + lo), int(n),
                yeval_dev.data() + lo * d, false);
  std::vector<float> Y = y_dev.to_host(), DX = dx_dev.to_host(), Yeval = yeval_dev.to_host();

  comm.allreduce_sum(Y.data(), Y.size());
  comm.allreduce_sum(DX.data(), DX.size());
  comm.allreduce_sum(Yeval.data(), Yeval.size());
  comm.allreduce_sum(dgamma.data(), dgamma.size());
  comm.allreduce_sum(dbeta.data(), dbeta.size());

  namespace fs = std::filesystem;
  const fs::path dir(out), sdir = dir / "state" / ("rank" + std::to_string(r));
  fs::create_directories(sdir);
  if (r == 0) {
    pn::npy::write_float32((dir / "y.npy").string(), Y.data(), {T, N, d});
    pn::npy::write_float32((dir / "dx.npy").string(), DX.data(), {T, N, d});
    pn::npy::write_float32((dir / "dgamma.npy").string(), dgamma.data(), {T, d});
    if (has_beta) pn::npy::write_float32((dir / "dbeta.npy").string(), dbeta.data(), {T, d});
    pn::npy::write_float32((dir / "y_eval.npy").string(), Yeval.data(), {N, d});
  }
  for (size_t k = 0; k < states.size(); ++k)
    pn::npy::write_float64((sdir / (state_names[k] + ".npy")).string(), states[k].data(),
                           {T, int64_t(states[k].size() / size_t(T))});
  comm.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<pn::Communicator> comm = pn::make_communicator(&argc, &argv);
  comm->program = "pnnorm";  // errors say pnnorm: error: ...
  try {
    return run(argc, argv, *comm);
  } catch (const std::exception& e) {
    comm->abort(e.what(), 2);
  }
}
