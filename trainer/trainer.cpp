#include "trainer/trainer.h"

#include <glog/logging.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <limits>
#include <thread>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <stdexcept>

#include "kernels/device.h"
#include "kernels/kernels.h"
#include "layers/device_allreduce.h"
#include "trainer/checkpoint.h"
#include "trainer/interrupt.h"
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

TranslationConfig translation_config(const Options& o, int src_vocab, int tgt_vocab) {
  TranslationConfig c;
  c.src_vocab = src_vocab;
  c.tgt_vocab = tgt_vocab;
  c.share_all_embeddings = o.share_all_embeddings;
  c.dim = o.encoder_embed_dim;
  c.encoder_layers = o.encoder_layers;
  c.encoder_heads = o.encoder_attention_heads;
  c.encoder_ffn_dim = o.encoder_ffn_embed_dim;
  c.decoder_layers = o.decoder_layers;
  c.decoder_heads = o.decoder_attention_heads;
  c.decoder_ffn_dim = o.decoder_ffn_embed_dim;
  c.max_len = 1024;
  c.dropout = o.dropout;
  c.attention_dropout = o.attention_dropout;
  c.label_smoothing = o.label_smoothing;
  // Every place shares the flat norm options (eps, momenta, PN warmup) with its own kind;
  // `group` defaults to its side's number of heads.
  auto place = [&](const std::string& kind, int heads) {
    NormOptions n = norm_options(o, "self");
    n.kind = kind;
    if (o.norm_groups <= 0) n.groups = heads;
    return n;
  };
  c.enc_norm_self = place(o.encoder_norm_self, c.encoder_heads);
  c.enc_norm_ff = place(o.encoder_norm_ff, c.encoder_heads);
  c.enc_norm_final = place(o.encoder_norm_final, c.encoder_heads);
  c.dec_norm_self = place(o.decoder_norm_self, c.decoder_heads);
  c.dec_norm_cross = place(o.decoder_norm_cross, c.decoder_heads);
  c.dec_norm_ff = place(o.decoder_norm_ff, c.decoder_heads);
  c.dec_norm_final = place(o.decoder_norm_final, c.decoder_heads);
  return c;
}

Trainer::Trainer(const Options& options, Communicator& comm, Corpus corpus)
    : opt_(options), comm_(comm), corpus_(std::move(corpus)) {
  if (comm_.size() > 1 && opt_.comm_timeout > 0) {
    // A stuck rank names itself first; its peers' collectives give up a little later.
    comm_.timeout_s = opt_.comm_timeout + 10;
    watchdog_ = std::make_unique<Watchdog>(comm_, opt_.comm_timeout);
  }
  make_stats_communicator();
  model_ = std::make_unique<LanguageModel<float>>(model_config(opt_, corpus_.vocab.size()),
                                                  opt_.seed, &stats_communicator());
  setup();
}

Trainer::Trainer(const Options& options, Communicator& comm, ParallelCorpus corpus)
    : opt_(options), comm_(comm), parallel_(std::move(corpus)) {
  if (comm_.size() > 1 && opt_.comm_timeout > 0) {
    comm_.timeout_s = opt_.comm_timeout + 10;
    watchdog_ = std::make_unique<Watchdog>(comm_, opt_.comm_timeout);
  }
  make_stats_communicator();
  mt_ = std::make_unique<TranslationModel<float>>(
      translation_config(opt_, parallel_.src_vocab.size(), parallel_.tgt_vocab.size()), opt_.seed,
      &stats_communicator());
  setup();
}

void Trainer::make_stats_communicator() {
  // Synchronized norms reduce their statistics within groups of --sync-group-size ranks (all
  // ranks by default); a split of its own even then, so that its counts are the statistics'.
  if (comm_.size() > 1) stats_comm_ = make_group_communicator(comm_, opt_.sync_group_size);
}

void Trainer::setup() {
  // Every rank initialises from the same seed; the broadcast makes identity a fact, not a hope.
  // (Through the host: once per run.)
  if (comm_.size() > 1) {
    std::vector<float> host = params().data.to_host();
    comm_.broadcast(host.data(), host.size() * sizeof(float), 0);
    params().data.from_host(host);
  }
  if (!opt_.probe_norm_stats.empty()) {
    std::set<std::string> chosen;
    std::stringstream list(opt_.probe_norm_stats);
    for (std::string item; std::getline(list, item, ',');) chosen.insert(item);
    // Block indices name LM blocks, or for translation the encoder blocks (where the paper puts
    // its batch-type norms); 'final' is the LM's or the encoder's final norm.
    const int L = int(mt_ ? mt_->encoder.size() : model_->blocks.size());
    auto block_norm = [&](int l, bool self) -> Norm<float>* {
      if (mt_) return (self ? mt_->encoder[l].norm_self : mt_->encoder[l].norm_ff).get();
      return (self ? model_->blocks[l].norm_self : model_->blocks[l].norm_ff).get();
    };
    for (const std::string& item : chosen)
      if (item != "all" && item != "final" &&
          (item.find_first_not_of("0123456789") != std::string::npos || std::stoi(item) >= L))
        throw std::invalid_argument("--probe-norm-stats: '" + item + "' is not 'all', 'final' " +
                                    "or a block index below " + std::to_string(L));
    const bool all = chosen.count("all") > 0;
    for (int l = 0; l < L; ++l)
      if (all || chosen.count(std::to_string(l))) {
        probed_.emplace_back(std::to_string(l) + ".self", block_norm(l, true));
        probed_.emplace_back(std::to_string(l) + ".ff", block_norm(l, false));
      }
    if (all || chosen.count("final"))
      probed_.emplace_back("final", mt_ ? mt_->enc_norm_final.get() : model_->norm_final.get());
    for (auto& [name, norm] : probed_) norm->probed()->probe = true;
  }
  adam_m_.assign(params().size(), 0.0f);
  adam_v_.assign(params().size(), 0.0f);
  update_sums_.assign(5, 0.0);
  std::string restore = opt_.restore_file;
  if (restore.empty() && !opt_.save_dir.empty()) {
    const ResumePoint resume = checkpoint_to_resume(opt_.save_dir);
    if (!resume.warning.empty() && comm_.rank() == 0) LOG(WARNING) << resume.warning;
    restore = resume.dir;
  }
  if (!restore.empty()) restore_checkpoint(restore), last_checkpoint_ = restore;
  if (comm_.rank() == 0 && !opt_.metrics.empty()) {
    if (start_update_ > 0 && !opt_.eval_only) truncate_metrics();
    metrics_.open(opt_.metrics, std::ios::out | (start_update_ > 0 ? std::ios::app : std::ios::trunc));
    if (!metrics_)
      throw std::runtime_error("cannot write the metrics file '" + opt_.metrics +
                               "': check that its directory exists and is writable");
  }
  if (comm_.rank() == 0) log_model_summary(), log_statistics_batches();
}

void Trainer::log_model_summary() {
  if (mt_) {
    const auto& c = mt_->config;
    const ParallelCorpus& p = parallel_;
    LOG(INFO) << "parallel corpus " << p.name << " (" << p.source_lang << " -> " << p.target_lang
              << "): vocabulary " << p.src_vocab.size() << " / " << p.tgt_vocab.size()
              << (p.joint ? " (joint)" : "") << ", train " << p.train.size()
              << " pairs, valid " << p.valid.size() << ", test " << p.test.size();
    LOG(INFO) << "model: transformer, d " << c.dim << ", encoder " << c.encoder_layers
              << " layers (" << c.encoder_heads << " heads, ffn " << c.encoder_ffn_dim
              << ", norms self=" << c.enc_norm_self.kind << " ff=" << c.enc_norm_ff.kind
              << " final=" << c.enc_norm_final.kind << "), decoder " << c.decoder_layers
              << " layers (" << c.decoder_heads << " heads, ffn " << c.decoder_ffn_dim
              << ", norms self=" << c.dec_norm_self.kind << " cross=" << c.dec_norm_cross.kind
              << " ff=" << c.dec_norm_ff.kind << " final=" << c.dec_norm_final.kind
              << "), dropout " << c.dropout << ", attention dropout " << c.attention_dropout
              << (c.share_all_embeddings ? ", shared embeddings" : "");
  } else {
    log_lm_summary();
  }
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
  LOG(INFO) << "parameters (first tensors):" << table.str() << "\n  total "
            << params().size() << " parameters in one buffer";
  LOG(INFO) << "ranks " << comm_.size() << " (" << comm_.name() << "), threads per rank "
            << num_threads() << ", tokens per update "
            << int64_t(opt_.max_tokens) * comm_.size() * opt_.update_freq;
}

void Trainer::log_statistics_batches() {
  // The statistics batch of the paper's Figure 5, per batch-type norm place: what one set of
  // batch statistics averages over, given the ranks' shares, the sync groups and ghost groups.
  const std::vector<std::pair<std::string, std::string>> places =
      mt_ ? std::vector<std::pair<std::string, std::string>>{
                {"encoder self", opt_.encoder_norm_self}, {"encoder ff", opt_.encoder_norm_ff},
                {"encoder final", opt_.encoder_norm_final}, {"decoder self", opt_.decoder_norm_self},
                {"decoder cross", opt_.decoder_norm_cross}, {"decoder ff", opt_.decoder_norm_ff},
                {"decoder final", opt_.decoder_norm_final}}
          : std::vector<std::pair<std::string, std::string>>{
                {"self", opt_.norm_self}, {"ff", opt_.norm_ff}, {"final", opt_.norm_final}};
  std::ostringstream line;
  for (const auto& [place, kind] : places) {
    const double tokens = statistics_batch_tokens(opt_, kind, comm_.size());
    if (tokens <= 0) continue;
    line << (line.tellp() > 0 ? ", " : "") << place << " " << kind << " "
         << int64_t(std::llround(tokens));
  }
  if (line.tellp() == 0) return;
  const bool synced = line.str().find("sync_") != std::string::npos;
  LOG(INFO) << "statistics batch (tokens per set of batch statistics"
            << (mt_ ? ", padding included" : "") << "): " << line.str() << " = --max-tokens "
            << opt_.max_tokens
            << (synced ? " x sync group of " + std::to_string(sync_group_ranks(opt_, comm_.size())) +
                             " rank(s) (sync_* only)"
                       : std::string())
            << (opt_.stats_batch_tokens > 0
                    ? " / " + std::to_string(stats_groups_per_micro_step(opt_)) + " ghost groups"
                    : std::string());
}

void Trainer::log_lm_summary() {
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
}

void Trainer::truncate_metrics() {
  // The records past the restored update were written by the run that was cut off; the resumed
  // run writes them again, so the file keeps one history.
  std::ifstream in(opt_.metrics);
  if (!in) return;
  std::vector<std::string> keep;
  size_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("update") && j["update"].is_number() &&
        j["update"].get<int64_t>() > start_update_)
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

std::string Trainer::vocab_fingerprint() const {
  if (mt_) return vocabulary_fingerprint({&parallel_.src_vocab, &parallel_.tgt_vocab});
  return vocabulary_fingerprint({&corpus_.vocab});
}

void Trainer::write_metrics(const std::string& line) {
  if (metrics_.is_open()) {
    metrics_ << line << '\n';
    metrics_.flush();
  }
}

void Trainer::with_eval_state(const std::function<void()>& fn) {
  // Rank-local norm state (PN, local BN/PN-V) differs across ranks: evaluate every share with
  // rank 0's state (or the mean over ranks), then give each rank its own state back.
  std::vector<std::vector<double>> own;
  const auto norms = this->norms();
  if (comm_.size() > 1) {
    for (Norm<float>* n : norms)
      for (const StateTensor& t : n->state()) {
        own.push_back(read_state(t));
        std::vector<double> v = own.back();
        if (opt_.pn_eval_state == "mean") {
          comm_.allreduce_sum(v.data(), t.n);
          for (size_t i = 0; i < t.n; ++i) v[i] /= comm_.size();
        } else {
          comm_.broadcast(v.data(), t.n * sizeof(double), 0);
        }
        write_state(t, v.data());
      }
  }
  fn();
  size_t k = 0;
  for (Norm<float>* n : norms)
    for (const StateTensor& t : n->state())
      if (k < own.size()) write_state(t, own[k].data()), ++k;
}

namespace {
EvalResult per_token(const double sums[3]) {
  EvalResult e;
  e.ntokens = sums[2];
  e.loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
  e.nll = sums[2] > 0 ? sums[1] / sums[2] : 0;
  return e;
}
}  // namespace

EvalResult Trainer::evaluate(const TokenStream& stream) {
  double sums[3] = {0, 0, 0};
  Buf<double> dev_sums(3, 0.0);  // read once, after the split
  with_eval_state([&] {
    SampleSet set(stream, opt_.tokens_per_sample, /*keep_tail=*/true);
    int64_t begin, end;
    rank_share(set.count, comm_.rank(), comm_.size(), &begin, &end);
    const int64_t per_batch = std::max(1, opt_.max_tokens / opt_.tokens_per_sample);
    Batch batch;
    std::vector<int64_t> ids;
    for (int64_t s = begin; s < end; s += per_batch) {
      if (watchdog_) watchdog_->beat("evaluation");
      ids.clear();
      for (int64_t i = s; i < std::min(end, s + per_batch); ++i) ids.push_back(i);
      set.make_batch(ids, &batch);
      model_->evaluate(batch, dev_sums.data());
    }
    const std::vector<double> h = dev_sums.to_host();
    std::copy(h.begin(), h.end(), sums);
  });
  comm_.allreduce_sum(sums, 3);
  return per_token(sums);
}

EvalResult Trainer::evaluate(const ParallelSplit& split) {
  // Length-sorted batches of --max-tokens; rank r takes a contiguous share of them.
  double sums[3] = {0, 0, 0};
  Buf<double> dev_sums(3, 0.0);
  with_eval_state([&] {
    const auto batches = length_batches(split, opt_.max_tokens);
    int64_t begin, end;
    rank_share(int64_t(batches.size()), comm_.rank(), comm_.size(), &begin, &end);
    ParallelBatch batch;
    for (int64_t i = begin; i < end; ++i) {
      if (watchdog_) watchdog_->beat("evaluation");
      make_parallel_batch(split, batches[size_t(i)], &batch);
      mt_->evaluate(batch, dev_sums.data());
    }
    const std::vector<double> h = dev_sums.to_host();
    std::copy(h.begin(), h.end(), sums);
  });
  comm_.allreduce_sum(sums, 3);
  return per_token(sums);
}

GenerateResult Trainer::generate(const ParallelSplit& split, const GenerateOptions& g,
                                 bool remove_bpe_markers, bool lowercase) {
  GenerateResult out;
  const int64_t n = opt_.gen_max_sentences > 0
                        ? std::min<int64_t>(opt_.gen_max_sentences, int64_t(split.size()))
                        : int64_t(split.size());
  int64_t begin, end;
  rank_share(n, comm_.rank(), comm_.size(), &begin, &end);
  out.first = begin;
  const std::vector<std::vector<int32_t>> srcs(split.src.begin() + begin,
                                               split.src.begin() + end);
  std::vector<Hypothesis> hyps;
  with_eval_state([&] {
    hyps = beam_search(*mt_, srcs, g);  // on the model's device
  });
  const Vocabulary& tv = parallel_.tgt_vocab;
  for (int64_t i = begin; i < end; ++i) {
    std::string line;
    for (int32_t t : hyps[size_t(i - begin)].tokens)
      line += (line.empty() ? "" : " ") + tv.words[size_t(t)];
    std::string ref = split.tgt_text[size_t(i)];
    if (remove_bpe_markers) {
      line = remove_bpe(line, opt_.remove_bpe.empty() ? "@@ " : opt_.remove_bpe);
      ref = remove_bpe(ref, opt_.remove_bpe.empty() ? "@@ " : opt_.remove_bpe);
    }
    out.bleu.add(bleu_tokens(line, lowercase), bleu_tokens(ref, lowercase));
    out.hyps.push_back(std::move(line));
  }
  // BLEU's sufficient statistics add over sentences, so the corpus score is exact across ranks.
  double stats[10];
  for (int i = 0; i < 4; ++i) stats[i] = out.bleu.matches[i], stats[4 + i] = out.bleu.totals[i];
  stats[8] = out.bleu.hyp_len, stats[9] = out.bleu.ref_len;
  comm_.allreduce_sum(stats, 10);
  for (int i = 0; i < 4; ++i) out.bleu.matches[i] = stats[i], out.bleu.totals[i] = stats[4 + i];
  out.bleu.hyp_len = stats[8], out.bleu.ref_len = stats[9];
  return out;
}

namespace {
// A fault injected by --debug-fault KIND@UPDATE[:RANK], for the failure tests.
struct Fault {
  std::string kind;
  int64_t update = -1;
  int rank = 0;
};
Fault parse_fault(const std::string& spec) {
  Fault f;
  if (spec.empty()) return f;
  const size_t at = spec.find('@'), colon = spec.find(':');
  try {
    f.kind = spec.substr(0, at);
    f.update = std::stoll(spec.substr(at + 1, colon == std::string::npos ? std::string::npos
                                                                            : colon - at - 1));
    if (colon != std::string::npos) f.rank = std::stoi(spec.substr(colon + 1));
  } catch (const std::exception&) {
    f.kind = "";
  }
  if (at == std::string::npos ||
      (f.kind != "nan" && f.kind != "exit" && f.kind != "hang" && f.kind != "perturb" &&
       f.kind != "sigterm" && f.kind != "sigterm-mpirun" && f.kind != "savefail"))
    throw std::invalid_argument("--debug-fault '" + spec + "' is malformed: use nan@U, " +
                                "exit@U:R, hang@U:R, perturb@U:R, sigterm@U:R, "
                                "sigterm-mpirun@U:R or savefail@U:R");
  return f;
}

double peak_rss_mb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // Linux reports KiB
}
}  // namespace

// Buckets of the flat gradient buffer, from its end (the first parameters the backward
// finishes with) to its start; each is all-reduced as soon as the backward is past it.
void Trainer::plan_buckets() {
  const size_t n = params().size();
  const size_t per = opt_.bucket_mb > 0 ? std::max<size_t>(1, size_t(opt_.bucket_mb * 262144.0))
                                        : n;  // floats per bucket
  buckets_.clear();
  for (size_t end = n; end > 0;) {
    const size_t begin = end > per ? end - per : 0;
    Bucket b;
    b.begin = begin;
    b.end = end;
    buckets_.push_back(b);
    end = begin;
  }
}

void Trainer::check_consistency(int64_t update) {
  // Per-tensor checksums (sum of the raw bits as integers, exact and order-free) compared
  // against rank 0's; the first differing tensor is named.
  const auto& specs = params().specs;
  std::vector<double> mine(specs.size()), ref;
  const std::vector<float> values = params().data.to_host();
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint32_t* bits = reinterpret_cast<const uint32_t*>(values.data() + specs[i].offset);
    uint64_t sum = 0;
    for (size_t j = 0; j < specs[i].numel; ++j) sum += bits[j] * (j % 65521 + 1);
    mine[i] = double(sum % (uint64_t(1) << 52));
  }
  ref = mine;
  comm_.broadcast(ref.data(), ref.size() * sizeof(double), 0);
  double first_bad = -1;
  for (size_t i = 0; i < specs.size(); ++i)
    if (ref[i] != mine[i]) {
      first_bad = double(i);
      break;
    }
  // The synchronized norms' running state is identical within a sync group (and may differ
  // between groups): compared against the group's first rank.
  std::vector<double> state_sums;
  std::vector<std::string> state_names;
  const auto norms = this->norms();
  for (size_t l = 0; l < norms.size(); ++l) {
    if (!norms[l]->synchronized()) continue;
    for (const StateTensor& t : norms[l]->state()) {
      const std::vector<double> v = read_state(t);
      uint64_t sum = 0;
      for (size_t j = 0; j < v.size(); ++j) {
        uint64_t bits;
        std::memcpy(&bits, &v[j], sizeof bits);
        sum += (bits % 1000003) * (j % 65521 + 1);
      }
      state_sums.push_back(double(sum % (uint64_t(1) << 52)));
      state_names.push_back("norm " + std::to_string(l) + " " + t.name);
    }
  }
  std::vector<double> group_ref = state_sums;
  stats_communicator().broadcast(group_ref.data(), group_ref.size() * sizeof(double), 0);
  double state_bad = -1;
  for (size_t i = 0; i < state_sums.size(); ++i)
    if (group_ref[i] != state_sums[i]) {
      state_bad = double(i);
      break;
    }
  double worst[4] = {first_bad, first_bad >= 0 ? double(comm_.rank()) : -1, state_bad,
                     state_bad >= 0 ? double(comm_.rank()) : -1};
  comm_.allreduce_max(worst, 4);
  if (worst[0] >= 0)
    throw AgreedError(
        "parameters differ across ranks at update " + std::to_string(update) + ": tensor '" +
        specs[size_t(worst[0])].name + "' on rank " + std::to_string(int(worst[1])) +
        " differs from rank 0 (a bug, a bit flip or non-deterministic hardware): " +
        "restart from the last checkpoint");
  if (worst[2] >= 0)
    throw AgreedError(
        "synchronized norm state differs within a sync group at update " +
        std::to_string(update) + ": " + state_names[size_t(worst[2])] + " on rank " +
        std::to_string(int(worst[3])) + " differs from its group's first rank (a bug, a bit " +
        "flip or non-deterministic hardware): restart from the last checkpoint");
}

// The task's half of the update loop: micro_step runs this rank's share of one micro-batch of
// an update through the model (forward and backward), adding its loss sums to
// update_sums_[0..2] on the device; epoch_of places an update in the data.
struct Trainer::Task {
  using GradsReady = std::function<void(size_t)>;
  std::function<void(int64_t update, int micro, uint64_t dropout_seed, const GradsReady&)>
      micro_step;
  std::function<double(int64_t update)> epoch_of;
  std::unique_ptr<SampleSet> train_set;
  std::unique_ptr<SampleOrder> order;
  std::vector<std::vector<int64_t>> update_batches;
  Batch batch;
  ParallelBatch pbatch;
  std::vector<int64_t> ids, positions;
};

// What one call of train() carries from update to update.
struct Trainer::Run {
  Fault fault;
  Schedule schedule;
  int keep = 0;  // checkpoints kept (0: all)
  bool json_log = false;
  double t_start = 0;
  // The sums of the updates since the last progress line.
  double log_loss = 0, log_nll = 0, log_tokens = 0, log_time = 0;
  int log_updates = 0;
  int bad_in_row = 0;  // early stopping's state is the trainer's (best_valid_), in checkpoints
  TrainResult result;
};

// One update's sums over every rank and its time split (rank 0's).
struct Trainer::UpdateStats {
  double loss_sum = 0, nll_sum = 0, ntok = 0, loss = 0, nll = 0, grad_sumsq = 0, lr = 0;
  double wall = 0, fwd_s = 0, bwd_s = 0, stats_comm_s = 0, grad_comm_s = 0, optim_s = 0;
  double stats_wait_s = 0;  // of stats_comm_s, the barrier wait when the communicator splits it
};

// The end of the run, the one place that computes it: --max-update, or the first update count
// at which --max-epoch epochs are done (the task's epoch_of decides, linear in updates or not).
int64_t Trainer::last_allowed_update(const Task& task) const {
  if (!(opt_.max_epoch > 0) || task.epoch_of(opt_.max_update) < opt_.max_epoch)
    return opt_.max_update;
  int64_t below = 0, at = opt_.max_update;  // epoch_of(below) < max_epoch <= epoch_of(at)
  if (task.epoch_of(0) >= opt_.max_epoch) return 0;
  while (at - below > 1) {
    const int64_t mid = below + (at - below) / 2;
    (task.epoch_of(mid) >= opt_.max_epoch ? at : below) = mid;
  }
  return at;
}

// One update is: gather this rank's micro-batches through forward and backward (the gradient
// all-reduce starts during the last backward), finish the all-reduce, and step (or skip a
// non-finite update). Then the periodic work: logging, the cross-rank check, validation, and the
// end of the update (checkpoints, and the stop every rank agrees on).
TrainResult Trainer::train() {
  Task task;
  make_task(&task);
  Run run = start_run();
  const int64_t end = run.result.update_limit = last_allowed_update(task);
  // The run that saved this checkpoint was interrupted before the validation due there.
  bool ended = validation_pending_ && validate(&run, start_update_ - 1);
  validation_pending_ = false;
  int64_t update = start_update_;
  for (; update < end && !ended; ++update) {
    if (watchdog_) watchdog_->beat("the start of an update");
    inject_fault(run, update);
    UpdateStats stats;
    const double t0 = now_s();
    forward_backward(task, update, &stats);
    allreduce_gradients(run, update, &stats);
    const bool last = update + 1 == end;
    if (!std::isfinite(stats.loss) || !std::isfinite(stats.grad_sumsq)) {
      skip_update(&run, update, stats.loss);
      ended = end_update(task, &run, update, last, false, agreed_interrupt());
      continue;
    }
    run.bad_in_row = 0;
    optimizer_step(run, update, &stats);
    stats.wall = now_s() - t0;

    record_update(task, &run, update, stats);
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
    ended = end_update(task, &run, update, last, stop, signal);
  }
  if (!ended && update == end && end < opt_.max_update && comm_.rank() == 0)
    LOG(INFO) << "reached --max-epoch " << opt_.max_epoch;
  run.result.wall_s = now_s() - run.t_start;
  if (std::isfinite(best_valid_)) run.result.best_valid_nll = best_valid_;
  run.result.checkpoint = last_checkpoint_;
  return run.result;
}

void Trainer::make_task(Task* t) {
  const int R = comm_.size(), rank = comm_.rank();
  using GradsReady = Task::GradsReady;
  if (mt_) {
    // SPEC 5 for padded batches (translation_data.h): update batches of the global tokens per
    // update, visited in a seeded order, cut into update_freq x ranks contiguous pieces.
    t->update_batches = length_batches(parallel_.train, int64_t(opt_.max_tokens) * R *
                                                            opt_.update_freq);
    if (t->update_batches.empty())
      throw std::runtime_error("the training split '" + opt_.train_subset + "' is empty");
    t->order = std::make_unique<SampleOrder>(int64_t(t->update_batches.size()), opt_.seed);
    t->epoch_of = [t](int64_t update) {
      return double(update) / double(t->update_batches.size());
    };
    t->micro_step = [this, t, R, rank](int64_t update, int micro, uint64_t dseed,
                                       const GradsReady& ready) {
      const auto& ub = t->update_batches[size_t(t->order->sample(update))];
      make_parallel_batch(parallel_.train,
                          batch_piece(ub, micro * R + rank, opt_.update_freq * R), &t->pbatch);
      mt_->forward_backward(t->pbatch, 1.0f, dseed, update_sums_.data(), ready);
    };
    return;
  }
  t->train_set = std::make_unique<SampleSet>(corpus_.train, opt_.tokens_per_sample,
                                             /*keep_tail=*/false);
  if (t->train_set->count == 0)
    throw std::runtime_error("the training data holds fewer than " +
                             std::to_string(opt_.tokens_per_sample + 1) +
                             " tokens: lower --tokens-per-sample or give more text");
  t->order = std::make_unique<SampleOrder>(t->train_set->count, opt_.seed);
  // Samples per micro-batch over all ranks: the update's tokens do not depend on its split.
  const int64_t micro_samples = int64_t(opt_.max_tokens) * R / opt_.tokens_per_sample;
  const int64_t update_samples = micro_samples * opt_.update_freq;
  if (rank == 0 && t->train_set->count < update_samples)
    LOG(WARNING) << "the training split holds " << t->train_set->count << " samples of "
                 << opt_.tokens_per_sample << " tokens (" << corpus_.train.size()
                 << " tokens), fewer than one update takes (" << update_samples
                 << " samples = --max-tokens " << opt_.max_tokens << " x " << R
                 << " ranks x --update-freq " << opt_.update_freq
                 << "): samples repeat within every update; lower --max-tokens or "
                 << "--update-freq, or give more data";
  const int stats_groups = stats_groups_per_micro_step(opt_);  // ghost statistics groups
  t->epoch_of = [this, t, micro_samples](int64_t update) {
    return double(update * opt_.update_freq * micro_samples) / double(t->train_set->count);
  };
  t->micro_step = [this, t, R, rank, micro_samples, stats_groups](
                      int64_t update, int micro, uint64_t dseed, const GradsReady& ready) {
    const int64_t g0 = (update * opt_.update_freq + micro) * micro_samples;
    rank_samples(g0, micro_samples, stats_groups, rank, R, &t->positions);
    t->ids.clear();
    for (int64_t p : t->positions) t->ids.push_back(t->order->sample(p));
    t->train_set->make_batch(t->ids, &t->batch);
    model_->forward_backward(t->batch, 1.0f, dseed, update_sums_.data(), ready);
  };
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
  run.json_log = opt_.log_format == "json";
  if (comm_.rank() == 0 && !run.json_log)
    LOG(INFO) << "progress lines: loss, nll and ppl average over the target tokens of the "
              << "updates since the previous line; tok/s counts target tokens of all ranks";
  run.t_start = now_s();
  return run;
}

void Trainer::inject_fault(const Run& run, int64_t update) {
  const Fault& fault = run.fault;
  const int rank = comm_.rank();
  if (fault.update != update + 1 || fault.rank != rank) return;
  if (fault.kind == "exit") {
    std::fprintf(stderr, "pntrain: rank %d exits (--debug-fault %s)\n", rank,
                 opt_.debug_fault.c_str());
    std::_Exit(9);
  }
  if (fault.kind == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  if (fault.kind == "perturb") {
    ParamStore<float>& params = this->params();
    float* at = params.data.data() + params.specs.back().offset;
    float v;
    copy_to_host(&v, at, sizeof v);
    synchronize();
    v += 1.0f;
    copy_to_device(at, &v, sizeof v);
  }
  if (fault.kind == "sigterm") ::kill(::getpid(), SIGTERM);  // as Slurm or Ctrl-C would
  if (fault.kind == "sigterm-mpirun") {  // as kill or scancel would, then mpirun's notice
    ::kill(::getppid(), SIGTERM);
    for (int i = 0; i < 600 && !interrupt_signal(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Trainer::forward_backward(Task& task, int64_t update, UpdateStats* s) {
  const int R = comm_.size(), rank = comm_.rank();
  ParamStore<float>& params = this->params();
  const double comm0 = comm_.collective_seconds, wait0 = stats_communicator().wait_seconds;
  k::fill<float>(params.grad.data(), params.size(), 0.0f);
  k::fill<double>(update_sums_.data(), update_sums_.size(), 0.0);
  for (int micro = 0; micro < opt_.update_freq; ++micro) {
    if (watchdog_) watchdog_->beat("a training micro-step");
    const uint64_t dseed = mix(mix(opt_.seed, uint64_t(update)), uint64_t(micro * R + rank));
    // Gradients are reduced once per update: buckets start during the last backward.
    const bool last_micro = micro + 1 == opt_.update_freq;
    const bool overlap = last_micro && R > 1 && opt_.bucket_mb > 0;
    task.micro_step(update, micro, dseed,
                    overlap ? Task::GradsReady([&](size_t begin) {
                      for (Bucket& bk : buckets_) {
                        if (bk.sum == Bucket::Sum::idle && bk.begin >= begin)
                          start_gradient_allreduce(bk);
                        else if (bk.sum == Bucket::Sum::host)
                          comm_.test(bk.host);  // MPI progresses inside MPI calls
                      }
                    })
                            : nullptr);
    s->fwd_s += mt_ ? mt_->forward_s : model_->forward_s;
    s->bwd_s += mt_ ? mt_->backward_s : model_->backward_s;
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
  k::scale_inplace<float>(params.grad.data(), nparam, float(1.0 / s->ntok));
  if (opt_.clip_norm > 0) {
    const double gnorm = std::sqrt(s->grad_sumsq) / s->ntok;  // of the normalised gradient
    if (gnorm > opt_.clip_norm)
      k::scale_inplace<float>(params.grad.data(), nparam, float(opt_.clip_norm / gnorm));
  }
  s->lr = learning_rate(run.schedule, update + 1);
  k::adam_update(params.data.data(), params.grad.data(), adam_m_.data(), adam_v_.data(), nparam,
                 float(s->lr), float(opt_.adam_beta1), float(opt_.adam_beta2),
                 float(opt_.adam_eps), float(opt_.weight_decay), update + 1);
  s->optim_s = now_s() - t_opt;
}

void Trainer::record_update(const Task& task, Run* run, int64_t update, const UpdateStats& s) {
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
  j["time"] = {{"forward_s", s.fwd_s},           {"backward_s", s.bwd_s},
               {"stats_comm_s", s.stats_comm_s}, {"grad_comm_s", s.grad_comm_s},
               {"optimizer_s", s.optim_s}};
  if (stats_communicator().wait_apart) j["time"]["stats_wait_s"] = s.stats_wait_s;
  j["peak_rss_mb"] = peak_rss_mb();
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
              << " ms (stats all-reduce " << 1e3 * s.stats_comm_s << " ms) | gradient "
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
                        {"epoch", task.epoch_of(update + 1)},
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
         << task.epoch_of(update + 1) << std::setprecision(3) << " | loss "
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
    if (corpus_.entropy_floor > 0)
      line << std::setprecision(3) << " | floor " << corpus_.entropy_floor;
    LOG(INFO) << line.str();
  }
  run->log_updates = 0;
  run->log_loss = run->log_nll = run->log_tokens = run->log_time = 0;
}

bool Trainer::validate(Run* run, int64_t update) {
  const int rank = comm_.rank();
  const EvalResult v = mt_ ? evaluate(parallel_.valid) : evaluate(corpus_.valid);
  run->result.valid_nll = v.nll;
  if (rank == 0) {
    nlohmann::json j = {{"update", update + 1},
                        {"valid_loss", v.nll},
                        {"valid_ppl", std::exp(v.nll)}};
    if (run->json_log)
      LOG(INFO) << nlohmann::json({{"valid", j}, {"tokens", int64_t(v.ntokens)}}).dump();
    else
      LOG(INFO) << std::fixed << std::setprecision(3) << "valid | update " << update + 1
                << " | loss " << v.nll << " | ppl " << std::setprecision(2)
                << std::exp(v.nll) << " | tokens " << int64_t(v.ntokens)
                << " (every valid token)";
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

// The end of every update, skipped ones too: checkpoints at intervals and at the end, and the
// stop on a signal that every rank agrees on. Returns true when training ends here.
int Trainer::agreed_interrupt() {
  double signal = interrupt_signal();
  if (comm_.size() > 1) comm_.allreduce_max(&signal, 1);
  return int(signal);
}

bool Trainer::end_update(const Task& task, Run* run, int64_t update, bool last, bool stop,
                         int signal) {
  TrainResult& result = run->result;
  // fairseq's --save-interval: at the end of every N-th epoch.
  const double epoch_done = std::floor(task.epoch_of(update + 1));
  const bool epoch_save = opt_.save_interval > 0 &&
                          epoch_done > std::floor(task.epoch_of(update)) &&
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
      LOG(WARNING) << "interrupted (" << signal_name(signal) << ") at update "
                   << update + 1
                   << (opt_.save_dir.empty()
                           ? "; nothing saved (no --save-dir)"
                           : result.final_save_failed ? "; its checkpoint was not saved"
                                                      : "; the same command resumes")
                   << interrupt_notice();
    return true;
  }
  return stop;
}

void Trainer::start_gradient_allreduce(Bucket& bk) {
  float* g = params().grad.data() + bk.begin;
  const size_t n = bk.end - bk.begin;
  const Context& ctx = current_context();
  if (ctx.device == Device::CPU) {
    bk.host = comm_.iallreduce_sum(g, n);
    bk.sum = Bucket::Sum::host;
  } else if (ctx.device == Device::CUDA && comm_.device_collectives()) {
    bk.device = comm_.iallreduce_sum_device(g, n, ctx.stream);  // own stream, after this one
    bk.sum = Bucket::Sum::device;
  } else {  // staged through the host, blocking
    allreduce_staged(comm_, g, n);
    bk.sum = Bucket::Sum::done;
  }
}

void Trainer::finish_gradient_allreduce() {
  const Context& ctx = current_context();
  for (Bucket& bk : buckets_) {
    if (bk.sum == Bucket::Sum::host) comm_.wait(bk.host);
    if (bk.sum == Bucket::Sum::device)
      comm_.wait_device(bk.device, ctx.stream);  // later work on the stream waits for it
    bk.sum = Bucket::Sum::idle;
  }
}

namespace {
// The model shape a checkpoint must match: every parameter's name and shape.
nlohmann::json param_table(const ParamStore<float>& p) {
  nlohmann::json t = nlohmann::json::array();
  for (const auto& s : p.specs) t.push_back({{"name", s.name}, {"shape", s.shape}});
  return t;
}
template <class V>
void append(std::vector<char>* out, const V& v) {
  const char* b = reinterpret_cast<const char*>(v.data());
  out->insert(out->end(), b, b + v.size() * sizeof(v[0]));
}
}  // namespace

bool Trainer::save_checkpoint(int64_t update, const std::string& name, int keep, bool final) {
  namespace fs = std::filesystem;
  // A named checkpoint (checkpoint_best) is written beside its old copy and swapped in.
  const std::string final_dir =
      (fs::path(opt_.save_dir) / (name.empty() ? "checkpoint_" + std::to_string(update) : name))
          .string();
  const std::string dir = name.empty() ? final_dir : final_dir + ".new";
  const std::string previous =
      last_checkpoint_.empty() ? "no checkpoint of this run is on disk yet"
                               : "the previous checkpoint " + last_checkpoint_ + " is intact";
  if (!k::all_finite(params().data.data(), params().size())) {
    if (comm_.rank() == 0)
      LOG(ERROR) << "checkpoint " << final_dir << " not saved: parameters are not finite; "
                 << previous;
    return false;
  }
  std::string error;
  // Only what this save created is removed on failure (not a file that was in the way). Rank 0
  // looks before any rank creates the directory: the all-reduce holds every rank until it has.
  double existed = comm_.rank() == 0 && name.empty() && fs::exists(dir) ? 1.0 : 0.0;
  comm_.allreduce_max(&existed, 1);
  const bool ours = existed == 0;
  // Every rank learns whether all files are on disk; the lowest failing rank reports, once.
  auto agree = [&]() {
    double who = error.empty() ? 0.0 : double(comm_.size() - comm_.rank());
    comm_.allreduce_max(&who, 1);
    if (who == 0) return true;
    const int first = comm_.size() - int(who);
    if (comm_.rank() == first)
      LOG(ERROR) << "checkpoint " << final_dir << " not saved"
                 << (comm_.size() > 1 ? " (rank " + std::to_string(first) + ")" : std::string())
                 << ": " << error << "; " << previous
                 << (final ? "" : "; training continues");
    if (comm_.rank() == 0 && ours) {  // no half-written checkpoint_N/ or checkpoint_best.new/
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
    comm_.barrier();
    return false;
  };
  try {
    fs::create_directories(dir);
    const Fault fault = parse_fault(opt_.debug_fault);
    if (fault.kind == "savefail" && fault.update == update && fault.rank == comm_.rank())
      throw std::runtime_error("cannot write '" + dir + "' (--debug-fault " + opt_.debug_fault +
                               ")");
    CheckpointFile rank_file;
    rank_file.header = {{"update", update}, {"rank", comm_.rank()}, {"world_size", comm_.size()}};
    nlohmann::json tensors = nlohmann::json::array();
    const auto norms = this->norms();
    for (size_t l = 0; l < norms.size(); ++l)
      for (const StateTensor& t : norms[l]->state()) {
        tensors.push_back({{"layer", l}, {"name", t.name}, {"n", t.n}});
        append(&rank_file.payload, read_state(t));
      }
    rank_file.header["state"] = tensors;
    write_checkpoint_file(dir + "/rank" + std::to_string(comm_.rank()) + ".bin", rank_file);
    if (comm_.rank() == 0) {
      // The flags that built the model and its data, so that --eval-only and resuming need
      // none repeated (an absolute data path serves from any directory).
      nlohmann::json config = nlohmann::json::object();
      for (const auto& [flag, value] : model_config_flags(opt_))
        config[flag] = nlohmann::json::parse(value);
      if (opt_.data != "builtin") config["data"] = fs::absolute(opt_.data).lexically_normal().string();
      CheckpointFile model_file;
      model_file.header = {{"format", "pntrain-checkpoint-1"},
                           {"update", update},
                           {"world_size", comm_.size()},
                           {"sync_group_size", sync_group_ranks(opt_, comm_.size())},
                           {"seed", opt_.seed},
                           {"tokens_per_update",
                            int64_t(opt_.max_tokens) * comm_.size() * opt_.update_freq},
                           {"config", config},
                           {"vocab", vocab_fingerprint()},
                           {"params", param_table(params())},
                           {"validations_without_gain", validations_without_gain_}};
      if (std::isfinite(best_valid_)) model_file.header["best_valid_loss"] = best_valid_;
      if (validation_pending_) model_file.header["validation_pending"] = true;
      model_file.payload.reserve(3 * params().size() * sizeof(float));
      append(&model_file.payload, params().data.to_host());
      append(&model_file.payload, adam_m_.to_host());
      append(&model_file.payload, adam_v_.to_host());
      write_checkpoint_file(dir + "/model.bin", model_file);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!agree()) return false;
  if (comm_.rank() == 0) {
    try {
      if (name.empty()) {
        commit_checkpoint(opt_.save_dir, dir);
        prune_checkpoints(opt_.save_dir, keep, dir);
      } else {
        write_done_marker(dir);
        fs::remove_all(final_dir + ".old");
        if (fs::exists(final_dir)) fs::rename(final_dir, final_dir + ".old");
        fs::rename(dir, final_dir);
        fs::remove_all(final_dir + ".old");
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!agree()) return false;
  if (comm_.rank() == 0) LOG(INFO) << "saved checkpoint " << final_dir;
  if (name.empty()) last_checkpoint_ = final_dir;
  return true;
}

std::vector<std::pair<std::string, std::string>> checkpoint_config(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  const nlohmann::json h = read_checkpoint_header(dir + "/model.bin");
  if (h.contains("config"))
    for (const auto& [flag, value] : h["config"].items()) out.emplace_back(flag, value.dump());
  return out;
}

void Trainer::restore_checkpoint(const std::string& dir) {
  check_checkpoint_dir(dir);
  const CheckpointFile m = read_checkpoint_file(dir + "/model.bin");
  const nlohmann::json want = param_table(params());
  const nlohmann::json& have = m.header.at("params");
  if (have != want) {
    std::string what = "a different number of tensors";
    for (size_t i = 0; i < std::min(have.size(), want.size()); ++i)
      if (have[i] != want[i]) {
        what = "tensor " + have[i].dump() + " where this model has " + want[i].dump();
        break;
      }
    throw std::runtime_error("checkpoint '" + dir + "' is from another model shape (" + what +
                             "): use the --decoder-*, --norm* flags and data it was trained with");
  }
  // Older checkpoints carry no fingerprint; the parameter shapes above still guard them.
  if (m.header.contains("vocab") && m.header["vocab"].get<std::string>() != vocab_fingerprint())
    throw std::invalid_argument(
        "checkpoint '" + dir + "' was trained on another vocabulary (" +
        m.header["vocab"].get<std::string>() + ") than --data " + opt_.data + " gives (" +
        vocab_fingerprint() + "): use the data it was trained with");
  const size_t n = params().size();
  if (m.payload.size() != 3 * n * sizeof(float))
    throw std::runtime_error("checkpoint '" + dir + "/model.bin' has the wrong payload size");
  const float* saved = reinterpret_cast<const float*>(m.payload.data());
  params().data.from_host(saved, n);
  adam_m_.from_host(saved + n, n);
  adam_v_.from_host(saved + 2 * n, n);
  start_update_ = m.header.at("update").get<int64_t>();
  restored_ = true;
  if (m.header.contains("best_valid_loss")) best_valid_ = m.header["best_valid_loss"].get<double>();
  validations_without_gain_ = m.header.value("validations_without_gain", 0);
  validation_pending_ = m.header.value("validation_pending", false);
  const int saved_world = m.header.at("world_size").get<int>();
  // Sync groups (older checkpoints: one group of every rank) share their norm state.
  const int saved_group = m.header.contains("sync_group_size")
                              ? m.header["sync_group_size"].get<int>()
                              : saved_world;
  const int group = sync_group_ranks(opt_, comm_.size());
  // Norm running state: this rank's own file, or the mean over the saved ranks.
  const auto norms = this->norms();
  std::vector<int> sources;
  if (saved_world == comm_.size() && saved_group == group) {
    sources = {comm_.rank()};
  } else {
    for (int r = 0; r < saved_world; ++r) sources.push_back(r);
  }
  std::vector<std::vector<double>> sum, first;  // first: the first saved rank's state
  bool ranks_differ = false;  // some saved rank's state is not rank 0's: the mean is new state
  for (int r : sources) {
    const CheckpointFile f = read_checkpoint_file(dir + "/rank" + std::to_string(r) + ".bin");
    const double* p = reinterpret_cast<const double*>(f.payload.data());
    size_t k = 0, off = 0;
    for (size_t l = 0; l < norms.size(); ++l)
      for (const StateTensor& t : norms[l]->state()) {
        const auto& entry = f.header.at("state").at(k);
        if (entry.at("name") != t.name || entry.at("n").get<size_t>() != t.n)
          throw std::runtime_error("checkpoint '" + dir + "' holds other norm state than this "
                                   "model (" + entry.dump() + "): use the same --norm* flags");
        if (sum.size() <= k) sum.emplace_back(t.n, 0.0), first.emplace_back(p + off, p + off + t.n);
        for (size_t i = 0; i < t.n; ++i) {
          ranks_differ = ranks_differ || p[off + i] != first[k][i];
          sum[k][i] += p[off + i];
        }
        off += t.n, ++k;
      }
  }
  if (ranks_differ && comm_.rank() == 0)
    LOG(WARNING) << "checkpoint " << dir << " was saved by " << saved_world
                 << " ranks in sync groups of " << saved_group << ", resuming on "
                 << comm_.size() << " in groups of " << group
                 << ": rank-local norm state starts from the mean over the saved ranks";
  size_t k = 0;
  for (size_t l = 0; l < norms.size(); ++l)
    for (const StateTensor& t : norms[l]->state()) {
      for (size_t i = 0; i < t.n; ++i) sum[k][i] /= double(sources.size());
      write_state(t, sum[k].data());
      ++k;
    }
  synchronize();  // the payloads go out of scope
  if (comm_.rank() == 0) LOG(INFO) << "restored " << dir << " at update " << start_update_;
}

}  // namespace pn
