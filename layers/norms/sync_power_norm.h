// SyncPowerNorm: PN (power_norm.h) whose statistics count, sum x^2, sum xh^2 and sum g xh
// cover the union of every rank's unmasked rows (SPEC section 3, beyond the paper), so psi^2,
// nu and t are identical on every rank. Forward all-reduces [count, sum x^2] (after warmup the
// forward output does not depend on it, only the state update does), backward [sum g xh];
// sum xh^2 = sum x^2 / s^2 since s is shared. Every rank joins both, even with no rows.
#pragma once
#include "layers/norms/power_norm.h"

namespace pn {

template <class T>
struct SyncPowerNorm final : PowerNorm<T> {
  SyncPowerNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name,
                Communicator* comm);
  bool synchronized() const override { return true; }
};

}  // namespace pn
