#include "layers/norms/ghost_stats.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pn {

template <class T>
GhostStats<T>::GhostStats(std::unique_ptr<Norm<T>> in, const NormOptions& o, int dim)
    : inner(std::move(in)), d(dim), group_rows(o.stats_rows), min_groups(o.stats_groups) {
  if (group_rows < 1)
    throw std::invalid_argument("ghost statistics need a group of at least one token, not " +
                                std::to_string(group_rows));
}

template <class T>
int GhostStats<T>::groups(int rows) const {
  return std::max(min_groups, (rows + group_rows - 1) / group_rows);
}

template <class T>
void GhostStats<T>::forward(const T* x, const uint8_t* mask, int rows, T* y, bool training,
                            uint16_t* y16) {
  if (!training) return inner->forward(x, mask, rows, y, false, y16);
  const int n = groups(rows);
  saved.resize(n);
  for (int g = 0; g < n; ++g) {
    const int b = std::min(rows, g * group_rows), e = std::min(rows, b + group_rows);
    const size_t at = size_t(b) * d;
    inner->forward(x + at, mask ? mask + b : nullptr, e - b, y ? y + at : nullptr, true,
                   y16 ? y16 + at : nullptr);
    inner->save_forward(&saved[g]);
  }
}

template <class T>
void GhostStats<T>::backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                             bool add_to_dx, uint16_t* dx16) {
  const int n = groups(rows);
  for (int g = 0; g < n; ++g) {
    const int b = std::min(rows, g * group_rows), e = std::min(rows, b + group_rows);
    const size_t at = size_t(b) * d;
    inner->load_forward(saved[g]);
    inner->backward(x + at, dy + at, mask ? mask + b : nullptr, e - b, dx + at, add_to_dx,
                    dx16 ? dx16 + at : nullptr);
  }
}

template struct GhostStats<float>;
template struct GhostStats<double>;

}  // namespace pn
