#include "layers/norms/dyt.h"

namespace pn {

template struct DynamicTanh<float>;
template struct DynamicTanh<double>;
PN_NORM_FACTORY(DynamicTanh)

}  // namespace pn
