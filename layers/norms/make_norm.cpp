// The one place that maps a norm name to its implementation.
#include <stdexcept>

#include "layers/norms/batch_norm.h"
#include "layers/norms/ghost_stats.h"
#include "layers/norms/group_norm.h"
#include "layers/norms/layer_norm.h"
#include "layers/norms/norm.h"
#include "layers/norms/power_norm.h"
#include "layers/norms/power_v_norm.h"
#include "layers/norms/prescale.h"
#include "layers/norms/rms_norm.h"
#include "layers/norms/sync_batch_norm.h"
#include "layers/norms/sync_power_norm.h"
#include "layers/norms/sync_power_v_norm.h"

namespace pn {

const std::vector<std::string>& norm_kinds() {
  static const std::vector<std::string> kinds = {"layer",        "rms",          "group", "batch",
                                                   "sync_batch",   "power_v",      "sync_power_v",
                                                   "power",        "sync_power"};
  return kinds;
}

bool is_norm_kind(const std::string& kind) {
  for (const auto& k : norm_kinds())
    if (k == kind) return true;
  return false;
}

template <class T>
std::unique_ptr<Norm<T>> make_norm(const NormOptions& o, int d, ParamStore<T>& store,
                                   const std::string& name, Communicator* comm) {
  if (o.kind == "layer") return std::make_unique<LayerNorm<T>>(o, d, store, name);
  if (o.kind == "rms") return std::make_unique<RmsNorm<T>>(o, d, store, name);
  if (o.kind == "group") return std::make_unique<GroupNorm<T>>(o, d, store, name);
  // Batch-type norms, optionally behind the parameter-free pre-scaling.
  std::unique_ptr<Norm<T>> batch_type;
  if (o.kind == "batch") batch_type = std::make_unique<BatchNorm<T>>(o, d, store, name);
  if (o.kind == "sync_batch")
    batch_type = std::make_unique<SyncBatchNorm<T>>(o, d, store, name, comm);
  if (o.kind == "power_v") batch_type = std::make_unique<PowerVNorm<T>>(o, d, store, name);
  if (o.kind == "sync_power_v")
    batch_type = std::make_unique<SyncPowerVNorm<T>>(o, d, store, name, comm);
  if (o.kind == "power") batch_type = std::make_unique<PowerNorm<T>>(o, d, store, name);
  if (o.kind == "sync_power")
    batch_type = std::make_unique<SyncPowerNorm<T>>(o, d, store, name, comm);
  if (batch_type) {
    // Ghost groups inside pre-scaling: pre-scaling is per row, the statistics are per group.
    if (o.stats_rows > 0) batch_type = std::make_unique<GhostStats<T>>(std::move(batch_type), o, d);
    if (o.prescale_groups > 0)
      return std::make_unique<Prescaled<T>>(std::move(batch_type), o, d, name);
    return batch_type;
  }
  std::string known;
  for (const auto& k : norm_kinds()) known += (known.empty() ? "" : ", ") + k;
  throw std::invalid_argument("unknown norm '" + o.kind + "' (known: " + known + ")");
}

template std::unique_ptr<Norm<float>> make_norm<float>(const NormOptions&, int, ParamStore<float>&,
                                                       const std::string&, Communicator*);
template std::unique_ptr<Norm<double>> make_norm<double>(const NormOptions&, int,
                                                         ParamStore<double>&, const std::string&,
                                                         Communicator*);

}  // namespace pn
