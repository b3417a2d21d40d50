// SyncPowerVNorm: PN-V (power_v_norm.h) over the union of every rank's unmasked rows (SPEC
// section 3). Forward all-reduces [count, sum x^2], backward [sum g xh], one double buffer
// each; every rank joins both, even with no rows. Running psi^2 is identical on every rank.
#pragma once
#include "layers/norms/power_v_norm.h"

namespace pn {

template <class T>
struct SyncPowerVNorm final : PowerVNorm<T> {
  SyncPowerVNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name,
                 Communicator* comm);
  bool synchronized() const override { return true; }
};

}  // namespace pn
