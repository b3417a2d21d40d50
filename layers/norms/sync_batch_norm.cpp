#include "layers/norms/sync_batch_norm.h"

#include <stdexcept>

namespace pn {

template <class T>
SyncBatchNorm<T>::SyncBatchNorm(const NormOptions& o, int dim, ParamStore<T>& s,
                                const std::string& name, Communicator* c)
    : BatchNorm<T>(o, dim, s, name) {
  if (!c) throw std::invalid_argument("sync_batch norm '" + name + "' needs a communicator");
  this->comm = c;
}

template struct SyncBatchNorm<float>;
template struct SyncBatchNorm<double>;

}  // namespace pn
