// The normalization-layer interface shared by every norm of SPEC section 2.
//
// A norm maps x [rows, d] to y [rows, d]. mask[r] != 0 marks a real token; masked rows get the
// per-row output formula but never enter a statistic or a parameter gradient, and their dx is 0.
// In training, forward computes batch statistics over the unmasked rows (all-reduced across
// ranks for sync_* norms) and updates the running state once per call (once per micro-step);
// backward must follow each training forward with the same x and mask. In inference, forward
// uses the running state and changes nothing.
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "layers/params.h"

namespace pn {

// Options of every norm, with SPEC defaults. `kind` is one of norm_kinds().
struct NormOptions {
  std::string kind = "layer";
  int groups = 1;            // `group`: number of feature groups
  int prescale_groups = 0;   // pre-scaling before batch-type norms (0 = off)
  double eps = 1e-5;
  double alpha = 0.9;        // running-statistics momentum of batch / power_v
  double alpha_fwd = 0.9;    // PN
  double alpha_bkw = 0.9;    // PN
  int64_t warmup = 0;        // PN warmup iterations (training forward calls)
  // PN's math: "paper" (Algorithm 2) or "authors" (their public MaskPowerNorm; SPEC section 2).
  std::string pn_variant = "paper";
  // PN's running psi^2 during warmup: "cumulative" (SPEC: the mean of every psi_B^2 so far) or
  // "ema" (the authors' rule: that mean strictly inside warmup, then the EMA every iteration).
  // `authors` always uses "ema".
  std::string pn_warmup_psi = "cumulative";
  // Ghost statistics (ghost_stats.h): a training forward splits its rows into statistics
  // groups of stats_rows rows (0: one group, the whole call), at least stats_groups of them
  // (the same count on every rank, so synchronized norms meet in every collective).
  int stats_rows = 0;
  int stats_groups = 1;
};

// One named piece of running state, viewed as doubles owned by the layer.
struct StateTensor {
  std::string name;  // running_mean, running_var, running_psi2, nu, t
  double* data;
  size_t n;
};

template <class T>
struct Norm {
  virtual ~Norm() = default;
  virtual void forward(const T* x, const uint8_t* mask, int rows, T* y, bool training) = 0;
  // dx overwritten; dgamma/dbeta accumulate into the ParamStore's gradient buffer.
  virtual void backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx) = 0;
  // Running state (empty for layer/rms/group), for checkpoints and pnnorm.
  virtual std::vector<StateTensor> state() { return {}; }
  // True when the layer all-reduces statistics (every rank must call forward/backward).
  virtual bool synchronized() const { return false; }
  // What a training forward leaves for its backward, copied out and back in, so that ghost
  // statistics can run several groups forward before their backwards (batch-type norms).
  virtual void save_forward(std::vector<double>* saved) {}
  virtual void load_forward(const std::vector<double>& saved) {}

  // Diagnostics of the paper's Figures 2 to 4 (--probe-norm-stats), batch-type norms only:
  // after a training micro-step, probe_values holds the distance between batch and running
  // statistics (||stat_B - stat||_2 / d, running stat before this step's update) and the RMS
  // over the statistics batch of each row's norm of the gradient parts g_mu, g_sigma2 (paper
  // eq. 3) or g_psi2 (eq. 6; for PN its nu term). Nothing is computed while probe is false.
  bool probe = false;
  std::vector<std::pair<std::string, double>> probe_values;
  // The layer whose statistics are probed (a wrapper such as pre-scaling returns its inner).
  virtual Norm<T>* probed() { return this; }
};

// save_forward/load_forward of the batch-type norms: a count and per-feature vectors, in order.
inline void pack_forward(std::vector<double>* out, double count,
                         std::initializer_list<const std::vector<double>*> vectors) {
  out->assign(1, count);
  for (const auto* v : vectors) out->insert(out->end(), v->begin(), v->end());
}
inline void unpack_forward(const std::vector<double>& in, double* count,
                           std::initializer_list<std::vector<double>*> vectors) {
  *count = in[0];
  size_t at = 1;
  for (auto* v : vectors) {
    std::copy(in.begin() + at, in.begin() + at + v->size(), v->begin());
    at += v->size();
  }
}

const std::vector<std::string>& norm_kinds();
bool is_norm_kind(const std::string& kind);

// Builds a norm of options.kind for d features, declaring its gamma/beta in `store` under
// `name`. comm is used by sync_* norms only (may be null otherwise).
template <class T>
std::unique_ptr<Norm<T>> make_norm(const NormOptions& options, int d, ParamStore<T>& store,
                                   const std::string& name, Communicator* comm);

}  // namespace pn
