#include "layers/norms/sync_power_norm.h"

#include <stdexcept>

namespace pn {

template <class T>
SyncPowerNorm<T>::SyncPowerNorm(const NormOptions& o, int dim, ParamStore<T>& s,
                                const std::string& name, Communicator* c)
    : PowerNorm<T>(o, dim, s, name) {
  if (!c) throw std::invalid_argument("sync_power norm '" + name + "' needs a communicator");
  this->comm = c;
}

template struct SyncPowerNorm<float>;
template struct SyncPowerNorm<double>;

}  // namespace pn
