// Learning-rate schedules (fairseq's names, parameters and formulas). `update` is 1-based: the
// rate of update u is the schedule at u (fairseq's step_update(num_updates = u)).
//   inverse_sqrt:     linear warmup from warmup_init_lr to lr over W updates, then lr*sqrt(W/u)
//   fixed:            lr (after the same linear warmup)
//   cosine:           the same warmup, then with c = u - W periods of length T_i = P*t_mult^i:
//                     period i = floor(c/P) (t_mult 1) or floor(log_t(1 - c/P*(1-t_mult))),
//                     t = c - (start of period i), s = lr_shrink^i,
//                     lr(u) = s*min_lr + 0.5*(s*lr - s*min_lr)*(1 + cos(pi*t/T_i))
//                     (P = lr_period_updates, or max_update - W when <= 0)
//   polynomial_decay: lr*u/W for u <= W, then end_lr + (lr - end_lr)*(1 - (u-W)/(N-W))^power
//                     up to N = total_num_update (max_update when <= 0), end_lr after it
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

namespace pn {

// --lr-scheduler; its names (trainer/options.h) in this order.
enum class LrScheduler { inverse_sqrt, fixed, cosine, polynomial_decay };

struct Schedule {
  LrScheduler scheduler = LrScheduler::inverse_sqrt;
  double lr = 5e-4, warmup_init_lr = 0;
  int warmup_updates = 0;
  int max_update = 0;
  // cosine
  double min_lr = 0, lr_shrink = 0.1, t_mult = 1;
  double lr_period_updates = -1;
  // polynomial_decay
  double end_learning_rate = 0, power = 1;
  double total_num_update = -1;
};

inline double learning_rate(const Schedule& s, int64_t update /* 1-based */) {
  const double u = double(update), W = s.warmup_updates;
  if (s.scheduler == LrScheduler::polynomial_decay) {
    const double N = s.total_num_update > 0 ? s.total_num_update : s.max_update;
    if (W > 0 && u <= W) return s.lr * u / W;
    if (u >= N) return s.end_learning_rate;
    return (s.lr - s.end_learning_rate) * std::pow(1 - (u - W) / (N - W), s.power) +
           s.end_learning_rate;
  }
  if (W > 0 && u < W) return s.warmup_init_lr + (s.lr - s.warmup_init_lr) * u / W;
  if (s.scheduler == LrScheduler::inverse_sqrt && W > 0) return s.lr * std::sqrt(W / u);
  if (s.scheduler == LrScheduler::cosine) {
    const double period = s.lr_period_updates > 0 ? s.lr_period_updates : s.max_update - W;
    const double c = u - W;
    double i, t_i, t_cur;
    if (s.t_mult != 1) {
      i = std::floor(std::log(1 - c / period * (1 - s.t_mult)) / std::log(s.t_mult));
      t_i = std::pow(s.t_mult, i) * period;
      t_cur = c - (1 - std::pow(s.t_mult, i)) / (1 - s.t_mult) * period;
    } else {
      i = std::floor(c / period);
      t_i = period;
      t_cur = c - period * i;
    }
    const double shrink = std::pow(s.lr_shrink, i);
    const double lo = s.min_lr * shrink, hi = s.lr * shrink;
    return lo + 0.5 * (hi - lo) * (1 + std::cos(M_PI * t_cur / t_i));
  }
  return s.lr;
}

// The inverse_sqrt and fixed schedules by their four numbers.
inline double learning_rate(LrScheduler scheduler, double lr, double warmup_init_lr,
                            int warmup_updates, int64_t update /* 1-based */) {
  Schedule s;
  s.scheduler = scheduler;
  s.lr = lr;
  s.warmup_init_lr = warmup_init_lr;
  s.warmup_updates = warmup_updates;
  return learning_rate(s, update);
}

}  // namespace pn
