// Sums over an index range whose rounding depends on the range alone, not on the threads: the
// range is cut into fixed chunks, each summed in index order by whichever thread takes it, and
// the chunks' sums are added in chunk order. An OpenMP reduction instead adds the threads' sums
// in the order they finish, so a loss or gradient norm could change in its last bits from run
// to run (and from machine to machine) with three threads or more.
#pragma once
#include <array>
#include <cstddef>
#include <vector>

namespace pn::k::cpu {

constexpr size_t kSumChunk = 4096;  // elements a chunk of a long sum (a gradient's) holds

// N sums of f(i, acc) (acc: N doubles, f adds to them) over i in [0, n).
template <int N, class F>
std::array<double, N> ordered_sums(size_t n, size_t chunk, F&& f) {
  const size_t chunks = (n + chunk - 1) / chunk;
  std::vector<std::array<double, N>> part(chunks, std::array<double, N>{});
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t end = c * chunk + chunk < n ? c * chunk + chunk : n;
    for (size_t i = c * chunk; i < end; ++i) f(i, part[c]);
  }
  std::array<double, N> total{};
  for (const auto& p : part)
    for (int k = 0; k < N; ++k) total[k] += p[k];
  return total;
}

}  // namespace pn::k::cpu
