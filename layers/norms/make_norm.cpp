// The one place that maps a norm name to its implementation.
#include <stdexcept>

#include "layers/norms/layer_norm.h"
#include "layers/norms/norm.h"

namespace pn {

const std::vector<std::string>& norm_kinds() {
  static const std::vector<std::string> kinds = {"layer"};
  return kinds;
}

bool is_norm_kind(const std::string& kind) {
  for (const auto& k : norm_kinds())
    if (k == kind) return true;
  return false;
}

template <class T>
std::unique_ptr<Norm<T>> make_norm(const NormOptions& o, int d, ParamStore<T>& store,
                                   const std::string& name, Communicator* comm) {
  if (o.kind == "layer") return std::make_unique<LayerNorm<T>>(o, d, store, name);
  std::string known;
  for (const auto& k : norm_kinds()) known += (known.empty() ? "" : ", ") + k;
  throw std::invalid_argument("unknown norm '" + o.kind + "' (known: " + known + ")");
}

template std::unique_ptr<Norm<float>> make_norm<float>(const NormOptions&, int, ParamStore<float>&,
                                                       const std::string&, Communicator*);
template std::unique_ptr<Norm<double>> make_norm<double>(const NormOptions&, int,
                                                         ParamStore<double>&, const std::string&,
                                                         Communicator*);

}  // namespace pn
