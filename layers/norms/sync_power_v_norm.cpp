#include "layers/norms/sync_power_v_norm.h"

#include <stdexcept>

namespace pn {

template <class T>
SyncPowerVNorm<T>::SyncPowerVNorm(const NormOptions& o, int dim, ParamStore<T>& s,
                                  const std::string& name, Communicator* c)
    : PowerVNorm<T>(o, dim, s, name) {
  if (!c) throw std::invalid_argument("sync_power_v norm '" + name + "' needs a communicator");
  this->comm = c;
}

template struct SyncPowerVNorm<float>;
template struct SyncPowerVNorm<double>;

}  // namespace pn
