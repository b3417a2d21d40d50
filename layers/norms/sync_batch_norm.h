// SyncBatchNorm: BatchNorm (batch_norm.h) whose statistics batch is the union of every rank's
// unmasked rows (SPEC section 3). One all-reduce per direction and micro-step, each a single
// double buffer: forward [count, sum (x - shift), sum (x - shift)^2] with shift = the running
// mean (identical on every rank), backward [sum dy, sum dy (x - mu_B)]. Sums weight every rank
// by its own token count, so uneven and empty ranks give the one-process result; a rank with
// no rows still joins both collectives. The running state is identical on every rank.
#pragma once
#include "layers/norms/batch_norm.h"

namespace pn {

template <class T>
struct SyncBatchNorm final : BatchNorm<T> {
  SyncBatchNorm(const NormOptions& o, int dim, ParamStore<T>& s, const std::string& name,
                Communicator* comm);
  bool synchronized() const override { return true; }
};

}  // namespace pn
