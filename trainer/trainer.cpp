#include "trainer/trainer.h"

#include <glog/logging.h>

#include <chrono>
#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "kernels/device.h"
#include "kernels/kernels.h"
#include "trainer/schedule.h"

namespace pn {

namespace {
double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}
uint64_t mix(uint64_t a, uint64_t b) {  // seeds of independent dropout streams
  uint64_t x = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}
}  // namespace

ModelConfig model_config(const Options& o, int vocab) {
  ModelConfig c;
  c.vocab = vocab;
  c.layers = o.decoder_layers;
  c.dim = o.decoder_embed_dim;
  c.heads = o.decoder_attention_heads;
  c.ffn_dim = o.decoder_ffn_embed_dim;
  c.max_len = o.tokens_per_sample;
  c.dropout = o.dropout;
  c.label_smoothing = o.label_smoothing;
  c.norm_self = norm_options(o, "self");
  c.norm_ff = norm_options(o, "ff");
  c.norm_final = norm_options(o, "final");
  return c;
}

Trainer::Trainer(const Options& options, Communicator& comm, Corpus corpus)
    : opt_(options), comm_(comm), corpus_(std::move(corpus)) {
  model_ = std::make_unique<LanguageModel<float>>(model_config(opt_, corpus_.vocab.size()),
                                                  opt_.seed, &comm_);
  // Every rank initialises from the same seed; the broadcast makes identity a fact, not a hope.
  comm_.broadcast(model_->params.data.data(), model_->params.data.size() * sizeof(float), 0);
  adam_m_.assign(model_->params.size(), 0.0f);
  adam_v_.assign(model_->params.size(), 0.0f);
  if (comm_.rank() == 0 && !opt_.metrics.empty()) {
    metrics_.open(opt_.metrics, std::ios::out | std::ios::trunc);
    if (!metrics_)
      throw std::runtime_error("cannot write the metrics file '" + opt_.metrics +
                               "': check that its directory exists and is writable");
  }
  if (comm_.rank() == 0) log_model_summary();
}

void Trainer::log_model_summary() {
  const auto& c = model_->config;
  LOG(INFO) << "corpus " << corpus_.name << ": vocabulary " << corpus_.vocab.size()
            << ", train " << corpus_.train.size() << " tokens, valid " << corpus_.valid.size()
            << ", test " << corpus_.test.size();
  if (corpus_.entropy_floor > 0)
    LOG(INFO) << "builtin corpus entropy floor on valid: " << std::fixed << std::setprecision(3)
              << corpus_.entropy_floor << " nats/token (ppl " << std::exp(corpus_.entropy_floor)
              << ")";
  LOG(INFO) << "model: " << c.layers << " layers, d " << c.dim << ", " << c.heads
            << " heads, ffn " << c.ffn_dim << ", norms self=" << c.norm_self.kind
            << " ff=" << c.norm_ff.kind << " final=" << c.norm_final.kind << ", dropout "
            << c.dropout;
  std::ostringstream table;
  size_t shown = 0;
  for (const auto& s : model_->params.specs) {
    if (shown++ < 12 || s.name.rfind("layers.", 0) != 0) {
      std::string shape;
      for (int v : s.shape) shape += (shape.empty() ? "" : "x") + std::to_string(v);
      table << "\n  " << std::left << std::setw(44) << s.name << std::setw(12) << shape
            << s.numel;
    }
  }
  LOG(INFO) << "parameters (first tensors):" << table.str() << "\n  total "
            << model_->params.size() << " parameters in one buffer";
  LOG(INFO) << "ranks " << comm_.size() << " (" << comm_.name() << "), threads per rank "
            << num_threads() << ", tokens per update "
            << int64_t(opt_.max_tokens) * comm_.size() * opt_.update_freq;
}

void Trainer::write_metrics(const std::string& line) {
  if (metrics_.is_open()) {
    metrics_ << line << '\n';
    metrics_.flush();
  }
}

EvalResult Trainer::evaluate(const std::vector<int32_t>& stream) {
  SampleSet set(stream, opt_.tokens_per_sample, /*keep_tail=*/true);
  int64_t begin, end;
  rank_share(set.count, comm_.rank(), comm_.size(), &begin, &end);
  const int64_t per_batch = std::max(1, opt_.max_tokens / opt_.tokens_per_sample);
  double sums[3] = {0, 0, 0};
  Batch batch;
  std::vector<int64_t> ids;
  for (int64_t s = begin; s < end; s += per_batch) {
    ids.clear();
    for (int64_t i = s; i < std::min(end, s + per_batch); ++i) ids.push_back(i);
    set.make_batch(ids, &batch);
    const k::LossSums r = model_->evaluate(batch);
    sums[0] += r.loss, sums[1] += r.nll, sums[2] += r.ntokens;
  }
  comm_.allreduce_sum(sums, 3);
  EvalResult e;
  e.ntokens = sums[2];
  e.loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
  e.nll = sums[2] > 0 ? sums[1] / sums[2] : 0;
  return e;
}

TrainResult Trainer::train() {
  SampleSet train_set(corpus_.train, opt_.tokens_per_sample, /*keep_tail=*/false);
  if (train_set.count == 0)
    throw std::runtime_error("the training data holds fewer than " +
                             std::to_string(opt_.tokens_per_sample + 1) +
                             " tokens: lower --tokens-per-sample or give more text");
  SampleOrder order(train_set.count, opt_.seed);
  const int R = comm_.size(), rank = comm_.rank();
  // Samples per micro-batch over all ranks: the update's tokens do not depend on how it is split.
  const int64_t micro_samples = int64_t(opt_.max_tokens) * R / opt_.tokens_per_sample;
  auto& params = model_->params;
  const size_t nparam = params.size();
  TrainResult result;
  Batch batch;
  std::vector<int64_t> ids;
  const double t_start = now_s();
  double log_loss = 0, log_nll = 0, log_tokens = 0, log_time = 0;
  for (int64_t update = 0; update < opt_.max_update; ++update) {
    const int64_t first = update * opt_.update_freq * micro_samples;
    if (opt_.max_epoch > 0 && first / train_set.count >= opt_.max_epoch) {
      if (rank == 0) LOG(INFO) << "reached --max-epoch " << opt_.max_epoch;
      break;
    }
    const double t0 = now_s();
    k::fill<float>(params.grad.data(), nparam, 0.0f);
    double sums[3] = {0, 0, 0};  // loss, nll, target tokens of this rank
    for (int micro = 0; micro < opt_.update_freq; ++micro) {
      const int64_t g0 = first + int64_t(micro) * micro_samples;
      int64_t b, e;
      rank_share(micro_samples, rank, R, &b, &e);
      ids.clear();
      for (int64_t i = b; i < e; ++i) ids.push_back(order.sample(g0 + i));
      train_set.make_batch(ids, &batch);
      const uint64_t dseed = mix(mix(opt_.seed, uint64_t(update)), uint64_t(micro * R + rank));
      const k::LossSums r = model_->forward_backward(batch, 1.0f, dseed);
      sums[0] += r.loss, sums[1] += r.nll, sums[2] += r.ntokens;
    }
    // One all-reduce of the flat gradient buffer, then normalise by the update's tokens.
    comm_.allreduce_sum(sums, 3);
    comm_.allreduce_sum(params.grad.data(), nparam);
    const double ntok = sums[2];
    const double loss = sums[0] / ntok, nll = sums[1] / ntok;
    if (!std::isfinite(loss) || !k::all_finite(params.grad.data(), nparam)) {
      std::ostringstream m;
      m << "the training loss became " << loss << " at update " << update + 1
        << ": lower --lr (now " << opt_.lr << "), raise --warmup-updates or set --clip-norm";
      throw std::runtime_error(m.str());
    }
    k::scale_inplace<float>(params.grad.data(), nparam, float(1.0 / ntok));
    if (opt_.clip_norm > 0) {
      const double gnorm = std::sqrt(k::sum_squares<float>(params.grad.data(), nparam));
      if (gnorm > opt_.clip_norm)
        k::scale_inplace<float>(params.grad.data(), nparam, float(opt_.clip_norm / gnorm));
    }
    const double lr = learning_rate(opt_.lr_scheduler, opt_.lr, opt_.warmup_init_lr,
                                    opt_.warmup_updates, update + 1);
    k::adam_update(params.data.data(), params.grad.data(), adam_m_.data(), adam_v_.data(), nparam,
                   float(lr), float(opt_.adam_beta1), float(opt_.adam_beta2),
                   float(opt_.adam_eps), float(opt_.weight_decay), update + 1);
    const double wall = now_s() - t0;
    result.updates = update + 1;
    result.last_loss = loss;
    result.last_nll = nll;
    result.losses.push_back(loss);
    log_loss += sums[0], log_nll += sums[1], log_tokens += ntok, log_time += wall;
    if (rank == 0) {
      nlohmann::json j = {{"update", update + 1}, {"loss", loss},          {"nll_loss", nll},
                          {"ntokens", ntok},      {"lr", lr},              {"wall_s", wall},
                          {"tokens_per_s", ntok / wall}};
      write_metrics(j.dump());
      if ((update + 1) % opt_.log_interval == 0 || update == 0) {
        std::ostringstream line;
        line << std::fixed << std::setprecision(3) << "update " << update + 1 << " | epoch "
             << std::setprecision(2) << double(first) / train_set.count << std::setprecision(3)
             << " | loss " << log_loss / log_tokens << " | nll " << log_nll / log_tokens
             << " | ppl " << std::setprecision(2) << std::exp(log_nll / log_tokens)
             << std::scientific << std::setprecision(3) << " | lr " << lr << std::fixed
             << std::setprecision(0) << " | tok/s " << log_tokens / log_time << " | wall "
             << std::setprecision(1) << now_s() - t_start << "s";
        if (corpus_.entropy_floor > 0)
          line << std::setprecision(3) << " | floor " << corpus_.entropy_floor;
        LOG(INFO) << line.str();
        log_loss = log_nll = log_tokens = log_time = 0;
      }
    }
    const bool last = update + 1 == opt_.max_update;
    if (opt_.validate_interval_updates > 0 &&
        ((update + 1) % opt_.validate_interval_updates == 0 || last)) {
      const EvalResult v = evaluate(corpus_.valid);
      result.valid_nll = v.nll;
      if (rank == 0) {
        LOG(INFO) << std::fixed << std::setprecision(3) << "valid | update " << update + 1
                  << " | loss " << v.nll << " | ppl " << std::setprecision(2) << std::exp(v.nll)
                  << " | tokens " << int64_t(v.ntokens);
        nlohmann::json j = {{"update", update + 1},
                            {"valid_loss", v.nll},
                            {"valid_ppl", std::exp(v.nll)}};
        write_metrics(j.dump());
      }
    }
  }
  return result;
}

}  // namespace pn
