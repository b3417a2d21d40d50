// The normalization-layer interface shared by every norm of docs/contract.md §2.
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
#include <type_traits>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "kernels/buffer.h"
#include "kernels/kernels.h"
#include "layers/device_allreduce.h"
#include "layers/params.h"

namespace pn {

// The norm kinds, named as --norm writes them, in the order of layers/norms/norms.inc.
enum class NormKind {
#define PN_NORM(name, ...) name,
#include "layers/norms/norms.inc"
#undef PN_NORM
};

// What a norm's scale is computed from: per row (row_moments: mean and variance; row_rms: the
// root mean square; group_moments: mean and variance of each feature group), per feature column
// over the statistics batch (column_moments: mean and variance; column_psi2: the quadratic
// mean), or none (elementwise: a fixed function of each element, DyT). Its names (as
// --list-norms and the export write them): norm_statistic_names(), in this order.
enum class NormStatistic { row_moments, row_rms, group_moments, column_moments, column_psi2,
                           elementwise };
const std::vector<std::string>& norm_statistic_names();

// One row of layers/norms/norms.inc (its comment says what each field is).
struct NormInfo {
  NormKind kind;
  std::string name, paper;
  NormStatistic statistic;
  bool synchronized;
  std::vector<std::string> state, flags, params;
};
// Every norm, in NormKind's order.
const std::vector<NormInfo>& norm_registry();
const NormInfo& norm_info(NormKind k);
// Throws std::invalid_argument "unknown norm 'K' (known: layer, ...)".
const NormInfo& norm_info(const std::string& kind);
// The registry as JSON, one object a line (pntrain --list-norms).
std::string norm_registry_json();
// The names of norm_registry(), and whether kind is one of them.
const std::vector<std::string>& norm_kinds();
bool is_norm_kind(const std::string& kind);
// Throws std::invalid_argument "unknown norm 'K' (known: layer, ...)".
NormKind parse_norm_kind(const std::string& kind);
// Batch statistics (and running state): the column_* statistics.
bool is_batch_type(NormKind k);
// Statistics summed over the ranks of a sync group: the sync_ kinds.
bool is_synchronized(NormKind k);

// PN's math: paper (Algorithm 2) or authors (their public MaskPowerNorm; docs/contract.md §2).
enum class PnVariant { paper, authors };
// PN's running psi^2 during warmup: cumulative (docs/contract.md: the mean of every psi_B^2 so far) or ema
// (the authors' rule: that mean strictly inside warmup, then the EMA every iteration). `authors`
// always uses ema.
enum class PnWarmupPsi { cumulative, ema };
// Their names ("paper", "authors"; "cumulative", "ema"), in the enums' order, and their parse,
// which throws std::invalid_argument naming the flag and the choices.
const std::vector<std::string>& pn_variant_choices();
const std::vector<std::string>& pn_warmup_psi_choices();
PnVariant parse_pn_variant(const std::string& name);
PnWarmupPsi parse_pn_warmup_psi(const std::string& name);
inline const std::vector<std::string>& choice_names(PnVariant) { return pn_variant_choices(); }
inline const std::vector<std::string>& choice_names(PnWarmupPsi) { return pn_warmup_psi_choices(); }

// Options of every norm: the rows of layers/norms/norm_flags.inc with pnnorm's defaults, and the
// kind (one of norm_kinds()).
struct NormOptions {
  std::string kind = "layer";
#define PN_NORM_FLAG(type, member, name, default_value, ...) type member = default_value;
#include "layers/norms/norm_flags.inc"
#undef PN_NORM_FLAG
  // Ghost statistics (ghost_stats.h): a training forward splits its rows into statistics
  // groups of stats_rows rows (0: one group, the whole call), at least stats_groups of them
  // (the same count on every rank, so synchronized norms meet in every collective).
  int stats_rows = 0;
  int stats_groups = 1;
};

// One named piece of running state, viewed as doubles owned by the layer, in memory of `device`
// (read and written from the host with read_state/write_state).
struct StateTensor {
  std::string name;  // running_mean, running_var, running_psi2, nu, t
  double* data;
  size_t n;
  Device device = Device::CPU;
};
inline StateTensor state_of(const std::string& name, Buf<double>& b) {
  return {name, b.data(), b.size(), b.device()};
}
// Host copies of a state tensor (explicit copies on a device; wait for the read).
inline std::vector<double> read_state(const StateTensor& t) {
  std::vector<double> v(t.n);
  if (t.device == Device::CPU) return std::vector<double>(t.data, t.data + t.n);
  copy_to_host(v.data(), t.data, t.n * sizeof(double));
  synchronize();
  return v;
}
inline void write_state(const StateTensor& t, const double* values) {
  if (t.device == Device::CPU) return void(std::copy(values, values + t.n, t.data));
  copy_to_device(t.data, values, t.n * sizeof(double));
}

// A norm's input as the residual add before a pre-norm makes it: x = a + dropout(b) (keep null:
// a + b), written to sum; with b null, x = a and nothing is written. The batch-type norms make
// the add in their statistics pass (column_stats_affine).
template <class T>
struct NormInput {
  const T* a;
  const T* b = nullptr;
  const uint8_t* keep = nullptr;
  float p = 0.f;
  T* sum = nullptr;
  const T* x() const { return b ? sum : a; }
  // x made by itself (the add of a pass that sums nothing: inference).
  const T* made(size_t n) const {
    if (b) k::dropout_add<T>(a, b, keep, p, n, sum);
    return x();
  }
};

template <class T>
struct Norm {
  virtual ~Norm() = default;
  // y16: where not null (only where k::gemm_inputs_in_bf16<T>(): an output that only GEMMs read),
  // y is written only as its bf16 rounding there, by the kernel that makes it (y may be null).
  virtual void forward(const T* x, const uint8_t* mask, int rows, T* y, bool training,
                       uint16_t* y16 = nullptr) = 0;
  // forward of sum = a + dropout(b) (keep null: a + b; the residual add before a pre-norm), with
  // sum written: as dropout_add and forward, which a norm may do in one pass (LayerNorm does).
  virtual void forward_residual(const T* a, const T* b, const uint8_t* keep, float p, T* sum,
                                const uint8_t* mask, int rows, T* y, bool training,
                                uint16_t* y16 = nullptr) {
    const NormInput<T> in{a, b, keep, p, sum};
    forward(in.made(size_t(rows) * size_t(width())), mask, rows, y, training, y16);
  }
  // The features a row has (d).
  virtual int width() const = 0;
  // dx = the input gradient, or dx += it with add_to_dx (a residual stream's gradient, taken in
  // place by the kernel); dgamma/dbeta accumulate into the ParamStore's gradient buffer. dx16:
  // where not null (only where k::gemm_inputs_in_bf16<T>()), dx's bf16 rounding as well, written
  // by the kernel that writes dx, for the backward GEMMs that read dx next.
  virtual void backward(const T* x, const T* dy, const uint8_t* mask, int rows, T* dx,
                        bool add_to_dx = false, uint16_t* dx16 = nullptr) = 0;
  // Running state (empty for layer/rms/group), for checkpoints and pnnorm.
  virtual std::vector<StateTensor> state() { return {}; }
  // True when the layer all-reduces statistics (every rank must call forward/backward).
  virtual bool synchronized() const { return false; }
  // What a training forward leaves for its backward, copied out and back in (on the device),
  // so that ghost statistics can run several groups forward before their backwards.
  virtual void save_forward(Buf<double>* saved) {}
  virtual void load_forward(const Buf<double>& saved) {}

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

// The batch-type norms (batch, power_v, power): forward and forward_residual are one
// forward_in, whose statistics pass makes the residual sum (column_stats_affine).
template <class T>
struct ColumnNorm : Norm<T> {
  void forward(const T* x, const uint8_t* mask, int rows, T* y, bool training,
               uint16_t* y16 = nullptr) override {
    forward_in({x}, mask, rows, y, training, y16);
  }
  void forward_residual(const T* a, const T* b, const uint8_t* keep, float p, T* sum,
                        const uint8_t* mask, int rows, T* y, bool training,
                        uint16_t* y16 = nullptr) override {
    forward_in({a, b, keep, p, sum}, mask, rows, y, training, y16);
  }
  virtual void forward_in(const NormInput<T>& in, const uint8_t* mask, int rows, T* y,
                          bool training, uint16_t* y16) = 0;
};

// save_forward/load_forward of the batch-type norms: their buffers, concatenated in order.
inline void pack_forward(Buf<double>* out, std::initializer_list<const Buf<double>*> parts) {
  size_t n = 0;
  for (const Buf<double>* b : parts) n += b->size();
  out->resize(n);
  size_t at = 0;
  for (const Buf<double>* b : parts) {
    copy_on_device(out->data() + at, b->data(), b->size() * sizeof(double));
    at += b->size();
  }
}
inline void unpack_forward(const Buf<double>& in, std::initializer_list<Buf<double>*> parts) {
  size_t at = 0;
  for (Buf<double>* b : parts) {
    copy_on_device(b->data(), in.data() + at, b->size() * sizeof(double));
    at += b->size();
  }
}

// Builds a norm of options.kind for d features, declaring its gamma/beta in `store` under
// `name`. comm is used by sync_* norms only (may be null otherwise): make_norm sets it in the
// layer of the local twin (BatchNorm, PowerVNorm, PowerNorm), which then sums its statistics
// over the ranks.
template <class T>
std::unique_ptr<Norm<T>> make_norm(const NormOptions& options, int d, ParamStore<T>& store,
                                   const std::string& name, Communicator* comm);

// Each norm class's construction behind one signature (declared from the registry, defined
// beside the class by PN_NORM_FACTORY), so make_norm needs no norm's header. comm is passed to
// a class whose constructor takes it (the batch-type ones); make_norm gives it to sync_ kinds
// only.
#define PN_NORM(kind_, Class, ...)                                                          \
  template <class T>                                                                        \
  std::unique_ptr<Norm<T>> make_##Class(const NormOptions& o, int d, ParamStore<T>& store, \
                                        const std::string& name, Communicator* comm);
#include "layers/norms/norms.inc"
#undef PN_NORM
#define PN_NORM_FACTORY(Class)                                                                \
  template <class T>                                                                          \
  std::unique_ptr<Norm<T>> make_##Class(const NormOptions& o, int d, ParamStore<T>& store,   \
                                        const std::string& name, Communicator* comm) {       \
    if constexpr (std::is_constructible_v<Class<T>, const NormOptions&, int, ParamStore<T>&, \
                                          const std::string&, Communicator*>)                 \
      return std::make_unique<Class<T>>(o, d, store, name, comm);                             \
    else                                                                                      \
      return std::make_unique<Class<T>>(o, d, store, name);                                   \
  }                                                                                           \
  template std::unique_ptr<Norm<float>> make_##Class<float>(                                  \
      const NormOptions&, int, ParamStore<float>&, const std::string&, Communicator*);        \
  template std::unique_ptr<Norm<double>> make_##Class<double>(                                \
      const NormOptions&, int, ParamStore<double>&, const std::string&, Communicator*);

}  // namespace pn
