// Learning-rate schedules (fairseq's names and formulas).
//   inverse_sqrt: linear warmup from warmup_init_lr to lr over W updates, then lr*sqrt(W/u)
//   fixed:        lr (after the same linear warmup)
#pragma once
#include <cmath>
#include <string>

namespace pn {

inline double learning_rate(const std::string& scheduler, double lr, double warmup_init_lr,
                            int warmup_updates, int64_t update /* 1-based */) {
  if (warmup_updates > 0 && update < warmup_updates)
    return warmup_init_lr + (lr - warmup_init_lr) * double(update) / warmup_updates;
  if (scheduler == "inverse_sqrt" && warmup_updates > 0)
    return lr * std::sqrt(double(warmup_updates) / double(update));
  return lr;
}

}  // namespace pn
