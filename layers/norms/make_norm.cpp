// The norm registry of layers/norms/norms.inc, and make_norm: a norm name to its layer.
#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "layers/norms/ghost_stats.h"
#include "layers/norms/norm.h"
#include "layers/norms/prescale.h"

namespace pn {

namespace {
std::string listed(const std::vector<std::string>& names, const char* sep) {
  std::string out;
  for (const auto& k : names) out += (out.empty() ? "" : sep) + k;
  return out;
}
std::vector<std::string> words(const char* text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}
std::string json_list(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& w : v) out += (out.empty() ? "\"" : ", \"") + w + "\"";
  return "[" + out + "]";
}
}  // namespace

const std::vector<std::string>& norm_statistic_names() {
  // In NormStatistic's order.
  static const std::vector<std::string> names = {"row_moments", "row_rms", "group_moments",
                                                 "column_moments", "column_psi2", "elementwise"};
  return names;
}

const std::vector<NormInfo>& norm_registry() {
  static const std::vector<NormInfo> rows = {
#define PN_NORM(name, Class, paper, statistic, sync, state, flags, params)                \
  NormInfo{NormKind::name, #name, paper, NormStatistic::statistic, sync, words(state),  \
           words(flags), words(params)},
#include "layers/norms/norms.inc"
#undef PN_NORM
  };
  return rows;
}

const NormInfo& norm_info(NormKind k) { return norm_registry().at(size_t(k)); }

const NormInfo& norm_info(const std::string& kind) {
  for (const NormInfo& n : norm_registry())
    if (n.name == kind) return n;
  throw std::invalid_argument("unknown norm '" + kind + "' (known: " + listed(norm_kinds(), ", ") +
                              ")");
}

std::string norm_registry_json() {
  std::string out;
  for (const NormInfo& n : norm_registry())
    out += "{\"name\": \"" + n.name + "\", \"paper\": \"" + n.paper + "\", \"statistic\": \"" +
           norm_statistic_names()[size_t(n.statistic)] + "\", \"synchronized\": " +
           (n.synchronized ? "true" : "false") + ", \"state\": " + json_list(n.state) +
           ", \"flags\": " + json_list(n.flags) + ", \"params\": " + json_list(n.params) + "}\n";
  return out;
}

const std::vector<std::string>& norm_kinds() {
  static const std::vector<std::string> kinds = [] {
    std::vector<std::string> v;
    for (const NormInfo& n : norm_registry()) v.push_back(n.name);
    return v;
  }();
  return kinds;
}

bool is_norm_kind(const std::string& kind) {
  const auto& k = norm_kinds();
  return std::find(k.begin(), k.end(), kind) != k.end();
}

NormKind parse_norm_kind(const std::string& kind) { return norm_info(kind).kind; }

bool is_batch_type(NormKind k) {
  const NormStatistic s = norm_info(k).statistic;
  return s == NormStatistic::column_moments || s == NormStatistic::column_psi2;
}

bool is_synchronized(NormKind k) { return norm_info(k).synchronized; }

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
  std::unique_ptr<Norm<T>> made;
  switch (kind) {
#define PN_NORM(kind_, Class, ...) \
  case NormKind::kind_: made = make_##Class<T>(o, d, store, name, sync); break;
#include "layers/norms/norms.inc"
#undef PN_NORM
  }
  if (!is_batch_type(kind)) return made;
  std::unique_ptr<Norm<T>> batch_type = std::move(made);
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
