#include "layers/feed_forward.h"


namespace pn {

template <class T>
FeedForward<T>::FeedForward(ParamStore<T>& s, Workspace<T>& w, const std::string& name, int d,
                            int ffn_dim)
    : fc1(s, name + ".fc1", d, ffn_dim), fc2(s, name + ".fc2", ffn_dim, d), ws(&w) {}

template <class T>
void FeedForward<T>::forward(const T* x, int num_rows, T* y, const uint16_t* x16) {
  rows = num_rows;
  const size_t n = size_t(rows) * fc1.out;
  const auto [h, h16] = hidden.begin_either(n);
  fc1.forward(x, rows, h, /*relu=*/true, x16, h16);
  fc2.forward(hidden.x, rows, y, false, hidden.x16);
}

template <class T>
void FeedForward<T>::backward(const T* x, const T* dy, T* dx, const uint16_t* x16,
                              const uint16_t* dy16) {
  if (hidden.x16) {  // the masked gradient written over the hidden layer's rounding, in bf16
    fc2.backward_into_relu(hidden.x16, dy, rows, hidden.half.data(), dy16);
    return fc1.backward(x, nullptr, rows, dx, x16, hidden.x16);
  }
  T* dhidden = ws->take(ws->dhidden, size_t(rows) * fc1.out);
  fc2.backward(hidden.saved(), dy, rows, dhidden, nullptr, dy16);
  fc1.backward_relu(x, hidden.saved(), dhidden, rows, dx, x16);
}

template struct FeedForward<float>;
template struct FeedForward<double>;

}  // namespace pn
