// How an update runs: train() reads top to bottom as the loop over updates, then each phase in
// the order of one update (micro-steps through forward and backward, the gradient all-reduce,
// the optimizer step or a skipped update, validation, and the end of the update: checkpoints
// and the stop every rank agrees on).
#include <glog/logging.h>

#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/device.h"
#include "kernels/kernels.h"
#include "trainer/interrupt.h"
#include "trainer/update_loop.h"

namespace pn {

namespace {
uint64_t mix(uint64_t a, uint64_t b) {  // seeds of independent dropout streams
  uint64_t x = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}
}  // namespace

// One update is: gather this rank's micro-batches through forward and backward (the gradient
// all-reduce starts during the last backward), finish the all-reduce, and step (or skip a
// non-finite update). Then the periodic work: logging, the cross-rank check, validation, and the
// end of the update (checkpoints, and the stop every rank agrees on).
TrainResult Trainer::train() {
  task_->prepare_training(opt_, comm_.rank(), comm_.size());
  // Micro-steps replayed as CUDA graphs (kernels/device.h) where none calls the host: one rank
  // (the gradient all-reduce's hook is the host's), no probes (they read statistics back).
  current_context().cuda_graphs =
      opt_.cuda_graphs == "on" && comm_.size() == 1 && opt_.probe_norm_stats.empty();
  Run run = start_run();
  const int64_t end = run.result.update_limit = last_allowed_update();
  // The run that saved this checkpoint was interrupted before the validation due there.
  bool ended = validation_pending_ && validate(&run, start_update_ - 1);
  validation_pending_ = false;
  int64_t update = start_update_;
  for (; update < end && !ended; ++update) {
    if (watchdog_) watchdog_->beat("the start of an update");
    inject_fault(run.fault, update);
    UpdateStats stats;
    const double t0 = now_s();
    forward_backward(update, &stats);
    allreduce_gradients(run, update, &stats);
    const bool last = update + 1 == end;
    if (!std::isfinite(stats.loss) || !std::isfinite(stats.grad_sumsq)) {
      skip_update(&run, update, stats.loss);
      ended = end_update(&run, update, last, false, agreed_interrupt());
      continue;
    }
    run.bad_in_row = 0;
    optimizer_step(run, update, &stats);
    stats.wall = now_s() - t0;

    record_update(&run, update, stats);
    if (opt_.consistency_interval > 0 && (update + 1) % opt_.consistency_interval == 0 &&
        comm_.size() > 1)
      check_consistency(update + 1);
    // An interrupted run saves at once (a grace period runs) and leaves the validation due
    // here to the run that resumes from the checkpoint, which records it as pending.
    const int signal = agreed_interrupt();
    const bool due = opt_.validate_interval_updates > 0 &&
                     ((update + 1) % opt_.validate_interval_updates == 0 || last);
    const bool stop = due && signal == 0 && validate(&run, update);
    validation_pending_ = due && signal > 0;
    if (watchdog_) watchdog_->beat("validation or a checkpoint");
    ended = end_update(&run, update, last, stop, signal);
  }
  if (!ended && update == end && end < opt_.max_update && comm_.rank() == 0)
    LOG(INFO) << "reached --max-epoch " << opt_.max_epoch;
  run.result.wall_s = now_s() - run.t_start;
  if (std::isfinite(best_valid_)) run.result.best_valid_nll = best_valid_;
  run.result.checkpoint = last_checkpoint_;
  run.result.ended_in_pn_warmup = in_pn_warmup(std::max(run.result.updates, start_update_));
  run.result.pn_warmup_updates = pn_warmup_updates(opt_);
  run.result.pn_warmup_shorter =
      std::max<int64_t>(1, run.result.update_limit / 5) * pn_batches_per_update(opt_);
  return run.result;
}

// The end of the run, the one place that computes it: --max-update, or the first update count
// at which --max-epoch epochs are done (the task's epoch_of decides, linear in updates or not).
int64_t Trainer::last_allowed_update() const {
  if (!(opt_.max_epoch > 0) || task_->epoch_of(opt_.max_update) < opt_.max_epoch)
    return opt_.max_update;
  int64_t below = 0, at = opt_.max_update;  // epoch_of(below) < max_epoch <= epoch_of(at)
  if (task_->epoch_of(0) >= opt_.max_epoch) return 0;
  while (at - below > 1) {
    const int64_t mid = below + (at - below) / 2;
    (task_->epoch_of(mid) >= opt_.max_epoch ? at : below) = mid;
  }
  return at;
}

Trainer::Run Trainer::start_run() {
  Run run;
  run.fault = parse_fault(opt_.debug_fault);
  plan_buckets();
  Schedule& schedule = run.schedule;
  schedule.scheduler = opt_.lr_scheduler;
  schedule.lr = opt_.lr;
  schedule.warmup_init_lr = opt_.warmup_init_lr;
  schedule.warmup_updates = opt_.warmup_updates;
  schedule.max_update = opt_.max_update;
  schedule.min_lr = opt_.min_lr;
  schedule.lr_shrink = opt_.lr_shrink;
  schedule.t_mult = opt_.t_mult;
  schedule.lr_period_updates = opt_.lr_period_updates;
  schedule.end_learning_rate = opt_.end_learning_rate;
  schedule.power = opt_.power;
  schedule.total_num_update = opt_.total_num_update;
  run.keep = opt_.keep_last > 0 ? opt_.keep_last : opt_.keep_last_epochs;
  run.json_log = opt_.log_format == LogFormat::json;
  if (comm_.rank() == 0 && !run.json_log)
    LOG(INFO) << "progress lines: loss, nll and ppl average over the target tokens of the "
              << "updates since the previous line; tok/s counts target tokens of all ranks";
  run.t_start = now_s();
  return run;
}

void Trainer::forward_backward(int64_t update, UpdateStats* s) {
  const int R = comm_.size(), rank = comm_.rank();
  ParamStore<float>& params = this->params();
  const double comm0 = comm_.collective_seconds, wait0 = stats_communicator().wait_seconds;
  k::fill<float>(params.grad.data(), params.size(), 0.0f);
  k::fill<double>(update_sums_.data(), update_sums_.size(), 0.0);
  // Gradients are reduced once per update: buckets start during the last backward.
  const ModelTask::GradsReady start_ready_buckets = [&](size_t begin) {
    for (Bucket& bk : buckets_) {
      if (bk.sum.kind == PendingSum::Kind::none && bk.begin >= begin)
        start_gradient_allreduce(bk);
      else if (bk.sum.kind == PendingSum::Kind::host)
        comm_.test(bk.sum.host);  // MPI progresses inside MPI calls
    }
  };
  for (int micro = 0; micro < opt_.update_freq; ++micro) {
    if (watchdog_) watchdog_->beat("a training micro-step");
    const uint64_t dseed = mix(mix(opt_.seed, uint64_t(update)), uint64_t(micro * R + rank));
    const bool overlap = micro + 1 == opt_.update_freq && R > 1 && opt_.bucket_mb > 0;
    task_->micro_step(update, micro, dseed, update_sums_.data(),
                      overlap ? start_ready_buckets : ModelTask::GradsReady());
    s->fwd_s += task_->forward_s();
    s->bwd_s += task_->backward_s();
  }
  s->stats_comm_s = comm_.collective_seconds - comm0;
  s->stats_wait_s = stats_communicator().wait_seconds - wait0;
}

void Trainer::allreduce_gradients(const Run& run, int64_t update, UpdateStats* s) {
  if (watchdog_) watchdog_->beat("the gradient all-reduce");
  ParamStore<float>& params = this->params();
  const double comm1 = comm_.collective_seconds;
  if (comm_.size() > 1) {
    if (!(opt_.bucket_mb > 0)) start_gradient_allreduce(buckets_.front());  // one bucket
    finish_gradient_allreduce();
  }
  // One pass over the reduced gradient gives both the NaN/Inf guard and the norm for
  // clipping; then the host reads the update's five sums, its one read of the device.
  k::grad_stats_acc<float>(params.grad.data(), params.size(), update_sums_.data() + 3);
  const std::vector<double> host_sums = update_sums_.to_host();
  double sums[3] = {host_sums[0], host_sums[1], host_sums[2]};
  if (run.fault.kind == "nan" && run.fault.update == update + 1) sums[0] = sums[1] = NAN;
  comm_.allreduce_sum(sums, 3);
  s->grad_comm_s = comm_.collective_seconds - comm1;
  s->loss_sum = sums[0], s->nll_sum = sums[1], s->ntok = sums[2];
  s->loss = sums[0] / s->ntok, s->nll = sums[1] / s->ntok;
  s->grad_sumsq = host_sums[4] > 0 ? NAN : host_sums[3];
}

void Trainer::skip_update(Run* run, int64_t update, double loss) {
  // No parameter, optimizer or schedule change; give up after a run of them.
  ++run->bad_in_row;
  if (comm_.rank() == 0)
    LOG(WARNING) << "update " << update + 1 << ": loss " << loss
                 << " or a gradient is not finite; update skipped (" << run->bad_in_row
                 << " of " << opt_.max_bad_updates << " allowed in a row)";
  if (run->bad_in_row >= opt_.max_bad_updates) {
    std::ostringstream m;
    m << "the training loss or gradient was NaN/Inf for " << run->bad_in_row
      << " updates in a row (last loss " << loss << " at update " << update + 1
      << "): lower --lr (now " << opt_.lr << "), raise --warmup-updates or set --clip-norm";
    throw AgreedError(m.str());
  }
}

void Trainer::optimizer_step(const Run& run, int64_t update, UpdateStats* s) {
  const double t_opt = now_s();
  ParamStore<float>& params = this->params();
  const size_t nparam = params.size();
  // The gradient normalised per token, then clipped: two factors that Adam applies as it reads
  // it (no pass of their own over the gradient).
  float clip = 1.0f;
  if (opt_.clip_norm > 0) {
    const double gnorm = std::sqrt(s->grad_sumsq) / s->ntok;  // of the normalised gradient
    if (gnorm > opt_.clip_norm) clip = float(opt_.clip_norm / gnorm);
  }
  s->lr = learning_rate(run.schedule, update + 1);
  k::adam_update(params.data.data(), params.grad.data(), adam_m_.data(), adam_v_.data(), nparam,
                 float(1.0 / s->ntok), clip, float(s->lr), float(opt_.adam_beta1),
                 float(opt_.adam_beta2), float(opt_.adam_eps), float(opt_.weight_decay),
                 update + 1);
  s->optim_s = now_s() - t_opt;
}

bool Trainer::validate(Run* run, int64_t update) {
  const int rank = comm_.rank();
  const EvalResult v = task_->validate(*this);
  run->result.valid_nll = v.nll;
  if (rank == 0) {
    nlohmann::json j = {{"update", update + 1},
                        {"valid_loss", v.nll},
                        {"valid_ppl", std::exp(v.nll)}};
    // Inside PN's warmup validation uses the warmup's running psi^2, not a trained model's.
    const bool warm = in_pn_warmup(update + 1);
    if (warm) j["pn_warmup"] = true;
    if (run->json_log)
      LOG(INFO) << nlohmann::json({{"valid", j}, {"tokens", int64_t(v.ntokens)}}).dump();
    else
      LOG(INFO) << std::fixed << std::setprecision(3) << "valid | update " << update + 1
                << " | loss " << v.nll << " | ppl " << std::setprecision(2)
                << std::exp(v.nll) << " | tokens " << int64_t(v.ntokens)
                << " (every valid token)"
                << (warm ? " | PN warmup (update " + std::to_string(update + 1) + " of " +
                               std::to_string(pn_warmup_updates(opt_)) +
                               "): the running psi^2 lags, not yet the model's"
                         : std::string());
    write_metrics(j.dump());
  }
  if (v.nll < best_valid_) {
    best_valid_ = v.nll;
    validations_without_gain_ = 0;
    if (!opt_.save_dir.empty()) save_checkpoint(update + 1, "checkpoint_best");
  } else if (opt_.patience > 0 && ++validations_without_gain_ >= opt_.patience) {
    if (rank == 0)
      LOG(INFO) << "early stop: no validation improvement for " << opt_.patience
                << " validations (--patience)";
    return true;
  }
  return false;
}

int Trainer::agreed_interrupt() {
  double signal = interrupt_signal();
  if (comm_.size() > 1) comm_.allreduce_max(&signal, 1);
  return int(signal);
}

// The end of every update, skipped ones too: checkpoints at intervals and at the end, and the
// stop on a signal that every rank agrees on. Returns true when training ends here.
bool Trainer::end_update(Run* run, int64_t update, bool last, bool stop, int signal) {
  TrainResult& result = run->result;
  reached_update_ = update + 1;
  // fairseq's --save-interval: at the end of every N-th epoch.
  const double epoch_done = std::floor(task_->epoch_of(update + 1));
  const bool epoch_save = opt_.save_interval > 0 &&
                          epoch_done > std::floor(task_->epoch_of(update)) &&
                          int64_t(epoch_done) % opt_.save_interval == 0;
  const bool final_save = last || stop || signal > 0;
  if (!opt_.save_dir.empty() &&
      (final_save || epoch_save ||
       (opt_.save_interval_updates > 0 && (update + 1) % opt_.save_interval_updates == 0))) {
    if (!save_checkpoint(update + 1, "", run->keep, final_save) && final_save)
      result.final_save_failed = true;
  }
  if (signal > 0) {
    result.interrupted = signal;
    if (comm_.rank() == 0)
      LOG(WARNING) << "interrupted (" << interrupt_description(signal) << ") at update "
                   << update + 1
                   << (opt_.save_dir.empty()
                           ? "; nothing saved (no --save-dir)"
                           : result.final_save_failed ? "; its checkpoint was not saved"
                                                      : "; the same command resumes");
    return true;
  }
  return stop;
}

}  // namespace pn
