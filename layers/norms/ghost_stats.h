// Ghost statistics (--stats-batch-tokens K): a batch-type norm whose training forward splits
// its rows into consecutive statistics groups of K rows and runs the inner norm on each group
// as if it were its own micro-step: statistics, running-state update (and PN's t) once per
// group, in group order. The backward replays the groups in the same order, each with what its
// own forward left, so PN's nu follows the same sequence as K-token gradient accumulation.
// One micro-batch of G*K tokens thus equals G accumulated micro-steps of K tokens (without
// dropout) while running the rest of the model on large, efficient matrices.
// The group count is at least stats_groups, the same on every rank, so a synchronized inner
// norm meets its peers in every collective even when a rank has fewer rows (or none).
// Inference is row-wise and runs on all rows at once.
#pragma once
#include <memory>
#include <vector>

#include "layers/norms/norm.h"

namespace pn {

template <class T>
struct GhostStats final : Norm<T> {
  std::unique_ptr<Norm<T>> inner;
  int d, group_rows, min_groups;
  std::vector<Buf<double>> saved;  // per group: what its forward left for backward

  GhostStats(std::unique_ptr<Norm<T>> inner, const NormOptions& o, int dim);
  void forward(const T* x, const uint8_t* mask, int rows, T* y, bool training,
               uint16_t* y16 = nullptr) override;
  void backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                bool add_to_dx = false, uint16_t* dx16 = nullptr) override;
  int width() const override { return d; }
  std::vector<StateTensor> state() override { return inner->state(); }
  bool synchronized() const override { return inner->synchronized(); }
  Norm<T>* probed() override { return inner->probed(); }

 private:
  int groups(int rows) const;
};

}  // namespace pn
