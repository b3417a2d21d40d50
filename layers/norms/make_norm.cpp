// The one place that classifies the norm kinds and maps a norm name to its implementation.
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

namespace pn {

namespace {
std::string listed(const std::vector<std::string>& names, const char* sep) {
  std::string out;
  for (const auto& k : names) out += (out.empty() ? "" : sep) + k;
  return out;
}
}  // namespace

const std::vector<std::string>& norm_kinds() {
  // In the order of NormKind.
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

NormKind parse_norm_kind(const std::string& kind) {
  const auto& kinds = norm_kinds();
  for (size_t i = 0; i < kinds.size(); ++i)
    if (kinds[i] == kind) return NormKind(i);
  throw std::invalid_argument("unknown norm '" + kind + "' (known: " + listed(kinds, ", ") + ")");
}

bool is_batch_type(NormKind k) {
  return k == NormKind::batch || k == NormKind::sync_batch || k == NormKind::power_v ||
         k == NormKind::sync_power_v || k == NormKind::power || k == NormKind::sync_power;
}

bool is_synchronized(NormKind k) {
  return k == NormKind::sync_batch || k == NormKind::sync_power_v || k == NormKind::sync_power;
}

const std::vector<std::string>& pn_variant_choices() {
  static const std::vector<std::string> names = {"paper", "authors"};  // PnVariant's order
  return names;
}
const std::vector<std::string>& pn_warmup_psi_choices() {
  static const std::vector<std::string> names = {"cumulative", "ema"};  // PnWarmupPsi's order
  return names;
}
namespace {
template <class E>
E parse_choice(const char* flag, const std::string& name, const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return E(i);
  throw std::invalid_argument(std::string("--") + flag + " '" + name +
                              "' is unknown: choose one of " + listed(names, ", "));
}
}  // namespace
PnVariant parse_pn_variant(const std::string& name) {
  return parse_choice<PnVariant>("pn-variant", name, pn_variant_choices());
}
PnWarmupPsi parse_pn_warmup_psi(const std::string& name) {
  return parse_choice<PnWarmupPsi>("pn-warmup-psi", name, pn_warmup_psi_choices());
}

template <class T>
std::unique_ptr<Norm<T>> make_norm(const NormOptions& o, int d, ParamStore<T>& store,
                                   const std::string& name, Communicator* comm) {
  const NormKind kind = parse_norm_kind(o.kind);
  // A sync_ kind is its local twin summing its statistics over the ranks of comm.
  Communicator* sync = nullptr;
  if (is_synchronized(kind)) {
    if (!comm) throw std::invalid_argument(o.kind + " norm '" + name + "' needs a communicator");
    sync = comm;
  }
  std::unique_ptr<Norm<T>> batch_type;
  switch (kind) {
    case NormKind::layer: return std::make_unique<LayerNorm<T>>(o, d, store, name);
    case NormKind::rms: return std::make_unique<RmsNorm<T>>(o, d, store, name);
    case NormKind::group: return std::make_unique<GroupNorm<T>>(o, d, store, name);
    case NormKind::batch:
    case NormKind::sync_batch:
      batch_type = std::make_unique<BatchNorm<T>>(o, d, store, name, sync);
      break;
    case NormKind::power_v:
    case NormKind::sync_power_v:
      batch_type = std::make_unique<PowerVNorm<T>>(o, d, store, name, sync);
      break;
    case NormKind::power:
    case NormKind::sync_power:
      batch_type = std::make_unique<PowerNorm<T>>(o, d, store, name, sync);
      break;
  }
  // Batch-type norms, optionally behind the parameter-free pre-scaling; ghost groups inside
  // pre-scaling: pre-scaling is per row, the statistics are per group.
  if (o.stats_rows > 0) batch_type = std::make_unique<GhostStats<T>>(std::move(batch_type), o, d);
  if (o.prescale_groups > 0)
    return std::make_unique<Prescaled<T>>(std::move(batch_type), o, d, name);
  return batch_type;
}

template std::unique_ptr<Norm<float>> make_norm<float>(const NormOptions&, int, ParamStore<float>&,
                                                       const std::string&, Communicator*);
template std::unique_ptr<Norm<double>> make_norm<double>(const NormOptions&, int,
                                                         ParamStore<double>&, const std::string&,
                                                         Communicator*);

}  // namespace pn
