// What the trainer reports: the startup summaries (corpus, model, parameter table, ranks and
// the statistics batch of batch-type norms), one progress line per --log-interval updates, and
// the metrics file (one JSON object per update and per validation).
#include <sys/resource.h>

#include <glog/logging.h>

#include <cmath>
#include <filesystem>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/device.h"
#include "trainer/provenance.h"
#include "trainer/update_loop.h"

namespace pn {

namespace {
double peak_rss_mb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // Linux reports KiB
}
}  // namespace

void Trainer::log_model_summary() {
  task_->log_summary(!opt_.eval_only && opt_.sample == 0);
  std::ostringstream table;
  size_t shown = 0;
  for (const auto& s : params().specs) {
    if (shown++ < 12 || s.name.find("layers.") == std::string::npos) {
      std::string shape;
      for (int v : s.shape) shape += (shape.empty() ? "" : "x") + std::to_string(v);
      table << "\n  " << std::left << std::setw(44) << s.name << std::setw(12) << shape
            << s.numel;
    }
  }
  const size_t padding = params().size() - params().packed_size();
  LOG(INFO) << "parameters (first tensors):" << table.str() << "\n  total "
            << params().packed_size() << " parameters in one buffer"
            << (padding ? " (and " + std::to_string(padding) +
                              " zeros padding the vocabulary for the GPU's GEMMs)"
                        : std::string());
  LOG(INFO) << "ranks " << comm_.size() << " (" << comm_.name() << "), threads per rank "
            << num_threads() << ", tokens per update "
            << int64_t(opt_.max_tokens) * comm_.size() * opt_.update_freq;
}

void Trainer::log_statistics_batches() {
  // The statistics batch of the paper's Figure 5, per batch-type norm place: what one set of
  // batch statistics averages over, given the ranks' shares, the sync groups and ghost groups.
  const auto places = task_->norm_places(opt_);
  std::ostringstream line;
  bool synced = false;
  for (const auto& [place, kind] : places) {
    const double tokens = statistics_batch_tokens(opt_, kind, comm_.size());
    if (tokens <= 0) continue;
    synced = synced || is_synchronized(parse_norm_kind(kind));
    line << (line.tellp() > 0 ? ", " : "") << place << " " << kind << " "
         << int64_t(std::llround(tokens));
  }
  if (line.tellp() == 0) return;
  LOG(INFO) << "statistics batch (tokens per set of batch statistics"
            << (task_->padded() ? ", padding included" : "") << "): " << line.str() << " = --max-tokens "
            << opt_.max_tokens
            << (synced ? " x sync group of " + std::to_string(sync_group_ranks(opt_, comm_.size())) +
                             " rank(s) (sync_* only)"
                       : std::string())
            << (opt_.stats_batch_tokens > 0
                    ? " / " + std::to_string(stats_groups_per_micro_step(opt_)) + " ghost groups"
                    : std::string());
}

namespace {
bool is_pn(const std::string& kind) {
  return is_norm_kind(kind) && (parse_norm_kind(kind) == NormKind::power ||
                                parse_norm_kind(kind) == NormKind::sync_power);
}
}  // namespace

bool Trainer::in_pn_warmup(int64_t updates) const {
  bool pn = false;
  for (const auto& [place, kind] : task_->norm_places(opt_)) pn = pn || is_pn(kind);
  const int64_t W = pn_warmup_batches(opt_);
  return pn && W > 0 && updates * pn_batches_per_update(opt_) <= W;
}

void Trainer::log_pn_warmup() {
  // Per PN kind, its places: during the warmup training normalizes by each batch's own psi_B^2
  // while validation and inference use the running psi^2, which then lags the model.
  std::map<std::string, std::string> places;
  for (const auto& [place, kind] : task_->norm_places(opt_))
    if (is_pn(kind)) places[kind] += (places[kind].empty() ? "" : ", ") + place;
  if (places.empty()) return;
  const int64_t W = pn_warmup_batches(opt_), updates = pn_warmup_updates(opt_);
  if (opt_.eval_only || opt_.sample > 0) {  // nothing trains: only whether the state is warm
    if (in_pn_warmup(start_update_))
      LOG(INFO) << "note: the checkpoint (update " << start_update_ << ") is inside PN's warmup "
                << "of " << updates << " updates: its running psi^2 is the warmup's, which lags "
                << "the model";
    return;
  }
  const bool ema = opt_.pn_variant == PnVariant::authors || opt_.pn_warmup_psi == PnWarmupPsi::ema;
  for (const auto& [kind, where] : places) {
    std::ostringstream line;
    line << "PN warmup (" << kind << " at " << where << "): ";
    if (W == 0) {
      line << "none (--pn-warmup 0): training, validation and inference use the running psi^2 "
              "from the first update";
    } else {
      line << updates << " updates (" << W << " statistics batches: "
           << pn_warmup_origin(opt_)
           << "); during it training divides by each batch's own psi_B^2, while validation, "
              "--eval-only, --sample and export use the running psi^2: "
           << (ema ? "the EMA of the batches' psi_B^2 (--pn-alpha-fwd)"
                   : "the mean of every batch's psi_B^2 since update 1, which lags the model "
                     "(--pn-warmup-psi ema follows recent batches)")
           << (kind == "sync_power" ? ", over the sync group" : ", this rank's own")
           << "; validations inside it are marked 'PN warmup'";
    }
    LOG(INFO) << line.str();
  }
}

void Trainer::open_metrics() {
  // An evaluation adds its record to the run's file; a fresh run starts one.
  const bool append = start_update_ > 0 || opt_.eval_only;
  if (start_update_ > 0 && !opt_.eval_only) truncate_metrics();
  metrics_.open(opt_.metrics, std::ios::out | (append ? std::ios::app : std::ios::trunc));
  if (!metrics_)
    throw std::runtime_error("cannot write the metrics file '" + opt_.metrics +
                             "': check that its directory exists and is writable");
}

void Trainer::truncate_metrics() {
  // The records past the restored update were written by the run that was cut off; the resumed
  // run writes them again, so the file keeps one history. The attempts' start and end records
  // stay: they are that history.
  std::ifstream in(opt_.metrics);
  if (!in) return;
  std::vector<std::string> keep;
  size_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("update") && j["update"].is_number() &&
        !j.contains("event") && j["update"].get<int64_t>() > start_update_)
      ++dropped;
    else
      keep.push_back(line);
  }
  in.close();
  if (dropped == 0) return;
  const std::string tmp = opt_.metrics + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const std::string& line : keep) out << line << '\n';
    if (!out)
      throw std::runtime_error("cannot rewrite the metrics file '" + opt_.metrics + "' (via '" +
                               tmp + "'): check that its directory is writable");
  }
  std::filesystem::rename(tmp, opt_.metrics);
  LOG(INFO) << "metrics " << opt_.metrics << ": dropped " << dropped
            << " records past the restored update " << start_update_;
}

void Trainer::write_metrics(const std::string& line) {
  if (metrics_.is_open()) {
    metrics_ << line << '\n';
    metrics_.flush();
  }
}

void Trainer::record_start() {
  if (comm_.rank() != 0 || opt_.eval_only) return;
  write_metrics(nlohmann::json({{"event", "start"},
                                {"update", start_update_},
                                {"time", utc_now()},
                                {"provenance", provenance_}})
                    .dump());
}

void Trainer::record_end(const std::string& reason) {
  if (comm_.rank() != 0 || opt_.eval_only) return;
  write_metrics(nlohmann::json(
                    {{"event", "end"}, {"update", reached_update_}, {"time", utc_now()},
                     {"reason", reason}})
                    .dump());
}

void Trainer::record_test(const EvalResult& test) {
  if (comm_.rank() != 0) return;
  write_metrics(nlohmann::json({{"update", start_update_},
                                {"test_loss", test.nll},
                                {"test_ppl", std::exp(test.nll)}})
                    .dump());
}

void Trainer::record_update(Run* run, int64_t update, const UpdateStats& s) {
  TrainResult& result = run->result;
  result.updates = update + 1;
  result.last_loss = s.loss;
  result.last_nll = s.nll;
  result.losses.push_back(s.loss);
  run->log_loss += s.loss_sum, run->log_nll += s.nll_sum, run->log_tokens += s.ntok,
      run->log_time += s.wall;
  ++run->log_updates;
  result.tokens += s.ntok;
  if (comm_.rank() != 0) return;
  const double wall = s.wall, ntok = s.ntok, lr = s.lr;
  nlohmann::json j = {{"update", update + 1}, {"loss", s.loss},        {"nll_loss", s.nll},
                      {"ntokens", ntok},      {"lr", lr},              {"wall_s", wall},
                      {"tokens_per_s", ntok / wall}};
  // Time split of rank 0: forward and backward include the statistics all-reduces of
  // synchronized norms (also given alone); grad_comm_s is the gradient all-reduce time
  // not hidden behind the backward.
  // forward_s and backward_s only where the host's clock can time them (the CPU).
  j["time"] = {{"stats_comm_s", s.stats_comm_s}, {"grad_comm_s", s.grad_comm_s},
               {"optimizer_s", s.optim_s}};
  if (std::isfinite(s.fwd_s)) j["time"]["forward_s"] = s.fwd_s, j["time"]["backward_s"] = s.bwd_s;
  if (stats_communicator().wait_apart) j["time"]["stats_wait_s"] = s.stats_wait_s;
  j["peak_rss_mb"] = peak_rss_mb();
  if (const size_t gpu = device_peak_bytes()) j["device_peak_mb"] = double(gpu) / (1 << 20);
  if (!probed_.empty()) {  // the last micro-step's statistics of rank 0
    nlohmann::json probe = nlohmann::json::object();
    for (auto& [name, norm] : probed_)
      for (const auto& [key, value] : norm->probed()->probe_values) probe[name][key] = value;
    j["norm_stats"] = probe;
  }
  write_metrics(j.dump());
  if (opt_.log_timing)
    LOG(INFO) << std::fixed << std::setprecision(1) << "timing | update " << update + 1
              << " | forward " << 1e3 * s.fwd_s << " ms | backward " << 1e3 * s.bwd_s
              << " ms" << (std::isfinite(s.fwd_s) ? "" : " (not timed on this device)")
              << " (stats all-reduce " << 1e3 * s.stats_comm_s << " ms) | gradient "
              << "all-reduce exposed " << 1e3 * s.grad_comm_s << " ms | optimizer "
              << 1e3 * s.optim_s << " ms | peak rss " << std::setprecision(0) << peak_rss_mb()
              << " MB";
  if ((update + 1) % opt_.log_interval != 0 && update != 0) return;
  const double elapsed = now_s() - run->t_start;
  const int64_t last_update = run->result.update_limit;
  const double eta = elapsed / double(update + 1 - start_update_) *
                     double(std::max<int64_t>(0, last_update - update - 1));
  const double log_tokens = run->log_tokens;
  if (run->json_log) {
    nlohmann::json p = {{"update", update + 1},
                        {"max_update", opt_.max_update},
                        {"epoch", task_->epoch_of(update + 1)},
                        {"loss", run->log_loss / log_tokens},
                        {"nll_loss", run->log_nll / log_tokens},
                        {"ppl", std::exp(run->log_nll / log_tokens)},
                        {"averaged_updates", run->log_updates},
                        {"lr", lr},
                        {"tokens_per_s", log_tokens / run->log_time},
                        {"wall_s", elapsed},
                        {"eta_s", eta}};
    LOG(INFO) << p.dump();
  } else {
    const int64_t eta_s = int64_t(eta + 0.5);
    std::ostringstream line;
    line << std::fixed << std::setprecision(3) << "update " << update + 1 << "/"
         << last_update << " | epoch " << std::setprecision(2)
         << task_->epoch_of(update + 1) << std::setprecision(3) << " | loss "
         << run->log_loss / log_tokens << " | nll " << run->log_nll / log_tokens << " | ppl "
         << std::setprecision(2) << std::exp(run->log_nll / log_tokens) << " (of "
         << run->log_updates << (run->log_updates == 1 ? " update" : " updates") << ")"
         << std::scientific << std::setprecision(3) << " | lr " << lr << std::fixed
         << std::setprecision(0) << " | tok/s " << log_tokens / run->log_time << " | wall "
         << std::setprecision(1) << elapsed << "s | eta ";
    if (eta_s >= 3600) line << eta_s / 3600 << "h" << std::setw(2) << std::setfill('0')
                            << eta_s / 60 % 60 << "m";
    else if (eta_s >= 60) line << eta_s / 60 << "m" << std::setw(2) << std::setfill('0')
                               << eta_s % 60 << "s";
    else line << eta_s << "s";
    if (task_->entropy_floor() > 0)
      line << std::setprecision(3) << " | floor " << task_->entropy_floor();
    LOG(INFO) << line.str();
  }
  run->log_updates = 0;
  run->log_loss = run->log_nll = run->log_tokens = run->log_time = 0;
}

}  // namespace pn
