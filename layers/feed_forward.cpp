#include "layers/feed_forward.h"

#include "kernels/kernels.h"

namespace pn {

template <class T>
FeedForward<T>::FeedForward(ParamStore<T>& s, Workspace<T>& w, const std::string& name, int d,
                            int ffn_dim)
    : fc1(s, name + ".fc1", d, ffn_dim), fc2(s, name + ".fc2", ffn_dim, d), ws(&w) {}

template <class T>
void FeedForward<T>::forward(const T* x, int num_rows, T* y) {
  rows = num_rows;
  hidden.resize(size_t(rows) * fc1.out);
  fc1.forward(x, rows, hidden.data(), /*relu=*/true);
  fc2.forward(hidden.data(), rows, y);
}

template <class T>
void FeedForward<T>::backward(const T* x, const T* dy, T* dx) {
  T* dhidden = ws->take(ws->dhidden, hidden.size());
  fc2.backward(hidden.data(), dy, rows, dhidden);
  fc1.backward_relu(x, hidden.data(), dhidden, rows, dx);
}

template struct FeedForward<float>;
template struct FeedForward<double>;

}  // namespace pn
