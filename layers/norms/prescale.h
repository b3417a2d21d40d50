// Pre-scaling (the paper's "layer-scale layer", appendix A.1; docs/contract.md §2): a
// parameter-free per-row scaling before a batch-type norm, with G groups of d/G consecutive
// features (G = 1: the whole row) and the inner layer's eps:
//   r = sqrt(mean_group x^2 + eps);  z = x / r;  y = inner(z)
// Backward (exact), dz = inner's dx:  dx = (dz - z * mean_group(dz z)) / r; masked rows 0.
// State, synchronisation and parameters are the inner layer's.
#pragma once
#include <memory>
#include <vector>

#include "layers/norms/norm.h"

namespace pn {

template <class T>
struct Prescaled final : Norm<T> {
  std::unique_ptr<Norm<T>> inner;
  int d, groups;
  T eps;
  Buf<T> z, dz, rinv;  // z: inner's input, saved for backward

  Prescaled(std::unique_ptr<Norm<T>> inner, const NormOptions& o, int dim,
            const std::string& name);
  void forward(const T* x, const uint8_t* mask, int rows, T* y, bool training,
               uint16_t* y16 = nullptr) override;
  void backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                bool add_to_dx = false, uint16_t* dx16 = nullptr) override;
  int width() const override { return d; }
  std::vector<StateTensor> state() override { return inner->state(); }
  bool synchronized() const override { return inner->synchronized(); }
  Norm<T>* probed() override { return inner->probed(); }
};

}  // namespace pn
