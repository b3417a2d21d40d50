// CUB's DeviceRadixSort::SortPairs for the CUDA emulation: a stable sort of (key, value) pairs
// by the key in the order of the stream, as CUB's radix sort orders them.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace cub {
struct DeviceRadixSort {
  template <class K, class V>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out,
                               const V* values_in, V* values_out, int n, int begin_bit = 0,
                               int end_bit = int(sizeof(K) * 8), cudaStream_t s = nullptr) {
    if (!temp) {  // the size query: a token amount, so the caller still passes real storage
      temp_bytes = 16;
      return cudaSuccess;
    }
    if (begin_bit != 0 || end_bit != int(sizeof(K) * 8))
      return pn_emu::fail_with(cudaErrorInvalidValue, "SortPairs: only whole keys are emulated");
    pn_emu::enqueue(s, [=] {
      std::vector<int> order(size_t(n > 0 ? n : 0));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return keys_in[a] < keys_in[b]; });
      std::vector<K> k(order.size());
      std::vector<V> v(order.size());
      for (size_t i = 0; i < order.size(); ++i) {
        k[i] = keys_in[order[i]];
        v[i] = values_in[order[i]];
      }
      std::copy(k.begin(), k.end(), keys_out);
      std::copy(v.begin(), v.end(), values_out);
    });
    return cudaSuccess;
  }
};
}  // namespace cub
