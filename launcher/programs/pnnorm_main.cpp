// pnnorm: runs one norm layer on .npy data (docs/contract.md §7), for checking it against another
// framework. T training iterations (forward then backward, parameters fixed, state carried),
// then inference on X[T-1]. Under mpirun -np R, rank r takes rows [floor(r N/R),
// floor((r+1) N/R)) of every iteration; rank 0 writes y, dx, y_eval in the original row order
// (gathered by an all-reduce of zero-padded buffers) and the parameter gradients (dgamma, dbeta,
// ...) summed over ranks; every rank writes its own running state under DIR/state/rank<r>/.
// With --sync-group-size K the sync_* norms reduce their statistics within groups of K
// consecutive ranks. The norm flags are those of layers/norms/norm_flags.inc, under their pnnorm
// names; one given a value other than its default is refused by a norm that does not read it.
#include <boost/program_options.hpp>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <iostream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/communicator.h"
#include "kernels/buffer.h"
#include "launcher/programs/npy.h"
#include "layers/norms/norm.h"

namespace po = boost::program_options;

namespace {

// A norm flag of layers/norms/norm_flags.inc on pnnorm's command line, bound to its member of o;
// an enum's name is kept as text and parsed after Boost (parse_enums).
template <class T>
void declare_norm_flag(po::options_description* desc, const char* name, T* member,
                       const char* help, std::vector<std::function<void()>>* parse_enums) {
  if constexpr (std::is_enum_v<T>) {
    auto text = std::make_shared<std::string>(pn::choice_names(*member)[size_t(*member)]);
    desc->add_options()(name, po::value(text.get())->default_value(*text), help);
    parse_enums->push_back([=] {
      const std::vector<std::string>& names = pn::choice_names(T{});
      const auto it = std::find(names.begin(), names.end(), *text);
      if (it == names.end()) {
        std::string known;
        for (const auto& k : names) known += (known.empty() ? "" : ", ") + k;
        throw std::invalid_argument("--" + std::string(name) + " '" + *text +
                                    "' is unknown: choose one of " + known);
      }
      *member = T(it - names.begin());
    });
  } else {
    desc->add_options()(name, po::value(member)->default_value(*member), help);
  }
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + ")";
}

int run(int argc, char** argv, pn::Communicator& comm) {
  pn::NormOptions o;
  std::string x_path, dy_path, mask_path, gamma_path, beta_path, out, device_name = "cpu";
  int sync_group_size = 0;
  std::vector<std::function<void()>> parse_enums;
  po::options_description desc(
      "pnnorm: run one norm layer on .npy data (docs/contract.md §7)\n"
      "  pnnorm --norm NAME --x X.npy --dy DY.npy [--mask M.npy] --out DIR\n"
      "X, DY: float32 (T, N, d); M: (T, N) bool/uint8/float32, nonzero = real token.\n"
      "Writes y.npy, dx.npy (T, N, d), the parameters' gradients dgamma.npy, dbeta.npy (T, d)\n"
      "(any other d<param>.npy: the norm's params, pntrain --list-norms), y_eval.npy (N, d) and\n"
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
    ;
  // The norm flags, under pnnorm's names.
#define PN_NORM_FLAG(type, member, name, default_value, pnnorm_name, option, option_default, \
                     group, resumed, choices, help)                                         \
  declare_norm_flag(&desc, pnnorm_name, &o.member, help, &parse_enums);
#include "layers/norms/norm_flags.inc"
#undef PN_NORM_FLAG
  desc.add_options()
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
      std::cout << desc << "\nNorms (pntrain --list-norms gives the table):\n";
      for (const pn::NormInfo& n : pn::norm_registry())
        std::cout << "  " << n.name << ": " << n.paper << "\n";
    }
    return 0;
  }
  po::notify(vm);
  const pn::NormInfo& info = pn::norm_info(o.kind);
  for (const auto& parse : parse_enums) parse();
  if (o.eps <= 0) throw std::invalid_argument("--eps must be positive");
  // A norm flag given a value other than its default is refused by a norm that does not read it.
  const pn::NormOptions defaults;
#define PN_NORM_FLAG(type, member, flag, default_value, pnnorm_name, ...) \
  if (!(o.member == defaults.member) &&                                   \
      std::find(info.flags.begin(), info.flags.end(), flag) == info.flags.end()) {            \
    std::string takers;                                                                      \
    for (const pn::NormInfo& n : pn::norm_registry())                                        \
      if (std::find(n.flags.begin(), n.flags.end(), flag) != n.flags.end())                  \
        takers += (takers.empty() ? "" : ", ") + n.name;                                     \
    throw std::invalid_argument("--" + std::string(pnnorm_name) + " applies to " + takers +  \
                                " only, not --norm " + o.kind);                              \
  }
#include "layers/norms/norm_flags.inc"
#undef PN_NORM_FLAG

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
  const bool has_beta =
      std::find(info.params.begin(), info.params.end(), "bias") != info.params.end();
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
  // Each parameter's gradient per iteration (the registry's params, in the store's order).
  std::vector<std::vector<float>> dparams;
  for (size_t k = 0; k < store.specs.size(); ++k)
    dparams.emplace_back(size_t(T) * store.numel(int(k)));
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
    for (size_t k = 0; k < dparams.size(); ++k) {
      const size_t n = store.numel(int(k));
      pn::copy_to_host(dparams[k].data() + size_t(t) * n, store.g(int(k)), n * sizeof(float));
    }
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
  for (std::vector<float>& g : dparams) comm.allreduce_sum(g.data(), g.size());

  namespace fs = std::filesystem;
  const fs::path dir(out), sdir = dir / "state" / ("rank" + std::to_string(r));
  fs::create_directories(sdir);
  if (r == 0) {
    pn::npy::write_float32((dir / "y.npy").string(), Y.data(), {T, N, d});
    pn::npy::write_float32((dir / "dx.npy").string(), DX.data(), {T, N, d});
    // d<param>.npy, (T, its size): dgamma (weight), dbeta (bias), and any other by its name.
    for (size_t k = 0; k < dparams.size(); ++k) {
      const std::string& p = info.params.at(k);
      const std::string file = p == "weight" ? "dgamma" : p == "bias" ? "dbeta" : "d" + p;
      pn::npy::write_float32((dir / (file + ".npy")).string(), dparams[k].data(),
                             {T, int64_t(store.numel(int(k)))});
    }
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
