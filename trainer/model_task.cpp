#include "trainer/model_task.h"

#include <glog/logging.h>

#include <cmath>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "trainer/trainer.h"

namespace pn {

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

namespace {
// A number as a stream writes it by default ("0.2", "0").
std::string format_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}


// --arch transformer_lm: a Corpus and a LanguageModel; a micro-batch holds whole samples.
struct LmTask : ModelTask {
  Corpus data;
  std::unique_ptr<LanguageModel<float>> model;
  std::unique_ptr<SampleSet> train_set;
  std::unique_ptr<SampleOrder> order;
  int update_freq = 1, ranks = 1, rank = 0, stats_groups = 1;
  int64_t micro_samples = 0;  // samples per micro-batch over all ranks
  Batch batch;
  std::vector<int64_t> ids, positions;

  LmTask(const Options& o, Corpus corpus, Communicator* stats_comm) : data(std::move(corpus)) {
    model = std::make_unique<LanguageModel<float>>(model_config(o, data.vocab.size()), o.seed,
                                                   stats_comm);
  }
  ParamStore<float>& params() override { return model->params; }
  std::vector<Norm<float>*> norms() override { return model->norms(); }
  LanguageModel<float>* language_model() override { return model.get(); }
  const Corpus* corpus() const override { return &data; }
  std::string vocab_fingerprint() const override { return vocabulary_fingerprint({&data.vocab}); }

  void prepare_training(const Options& o, int rank_, int ranks_) override {
    rank = rank_, ranks = ranks_, update_freq = o.update_freq;
    train_set = std::make_unique<SampleSet>(data.train, o.tokens_per_sample, /*keep_tail=*/false);
    if (train_set->count == 0)
      throw std::runtime_error("the training data holds fewer than " +
                               std::to_string(o.tokens_per_sample + 1) +
                               " tokens: lower --tokens-per-sample or give more text");
    order = std::make_unique<SampleOrder>(train_set->count, o.seed);
    // Samples per micro-batch over all ranks: the update's tokens do not depend on its split.
    micro_samples = int64_t(o.max_tokens) * ranks / o.tokens_per_sample;
    const int64_t update_samples = micro_samples * o.update_freq;
    if (rank == 0 && train_set->count < update_samples)
      LOG(WARNING) << "the training split holds " << train_set->count << " samples of "
                   << o.tokens_per_sample << " tokens (" << data.train.size()
                   << " tokens), fewer than one update takes (" << update_samples
                   << " samples = --max-tokens " << o.max_tokens << " x " << ranks
                   << " ranks x --update-freq " << o.update_freq
                   << "): samples repeat within every update; lower --max-tokens or "
                   << "--update-freq, or give more data";
    stats_groups = stats_groups_per_micro_step(o);  // ghost statistics groups
  }
  void micro_step(int64_t update, int micro, uint64_t dseed, double* sums,
                  const GradsReady& ready) override {
    const int64_t g0 = (update * update_freq + micro) * micro_samples;
    rank_samples(g0, micro_samples, stats_groups, rank, ranks, &positions);
    ids.clear();
    for (int64_t p : positions) ids.push_back(order->sample(p));
    train_set->make_batch(ids, &batch);
    model->forward_backward(batch, 1.0f, dseed, sums, ready);
  }
  double epoch_of(int64_t update) const override {
    return double(update * update_freq * micro_samples) / double(train_set->count);
  }
  double forward_s() const override { return model->forward_s; }
  double backward_s() const override { return model->backward_s; }
  EvalResult validate(Trainer& trainer) override { return trainer.evaluate(data.valid); }

  void log_summary(bool training) const override {
    const auto& c = model->config;
    // A split of n tokens gives n - 1 predictions (each token after the first), as validation
    // counts them.
    auto predicted = [](size_t n) { return n > 0 ? n - 1 : 0; };
    // The share of <unk>: the corpus's own, and the words a vocabulary limit cut.
    auto unk = [](const TokenStream& t) {
      int64_t n = 0;
      for (int64_t i = 0; i < t.size(); ++i) n += t[i] == Vocabulary::kUnk;
      return t.size() > 0 ? 100.0 * double(n) / double(t.size()) : 0.0;
    };
    const double unk_train = unk(data.train), unk_valid = unk(data.valid);
    std::ostringstream unks;
    if (unk_train > 0 || unk_valid > 0)
      unks << std::fixed << std::setprecision(2) << " (<unk> " << unk_train << "% of train's "
           << "tokens, " << unk_valid << "% of valid's)";
    LOG(INFO) << "corpus " << data.name << ": vocabulary " << data.vocab.size() << unks.str()
              << ", predicted tokens train " << predicted(data.train.size()) << ", valid "
              << predicted(data.valid.size()) << ", test " << predicted(data.test.size());
    if (data.entropy_floor > 0)
      LOG(INFO) << "builtin corpus entropy floor on valid: " << std::fixed << std::setprecision(3)
                << data.entropy_floor << " nats/token (ppl " << std::exp(data.entropy_floor)
                << ")";
    LOG(INFO) << "model: " << c.layers << " layers, d " << c.dim << ", " << c.heads
              << " heads, ffn " << c.ffn_dim << ", norms self=" << c.norm_self.kind
              << " ff=" << c.norm_ff.kind << " final=" << c.norm_final.kind
              << (training ? ", dropout " + format_number(c.dropout) : std::string());
  }
  std::vector<std::pair<std::string, std::string>> norm_places(const Options& o) const override {
    return {{"self", o.norm_self}, {"ff", o.norm_ff}, {"final", o.norm_final}};
  }
  bool padded() const override { return false; }
  int probe_blocks() const override { return int(model->blocks.size()); }
  Norm<float>* block_norm(int l, bool self) override {
    return (self ? model->blocks[l].norm_self : model->blocks[l].norm_ff).get();
  }
  Norm<float>* final_norm() override { return model->norm_final.get(); }
  double entropy_floor() const override { return data.entropy_floor; }
};

// --arch transformer: a ParallelCorpus and a TranslationModel; contract §5 for padded batches
// (translation_data.h): update batches of the global tokens per update, visited in a seeded
// order, cut into update_freq x ranks contiguous pieces.
struct TranslationTask : ModelTask {
  ParallelCorpus data;
  std::unique_ptr<TranslationModel<float>> model;
  std::vector<std::vector<int64_t>> update_batches;
  std::unique_ptr<SampleOrder> order;
  int update_freq = 1, ranks = 1, rank = 0;
  ParallelBatch batch;

  TranslationTask(const Options& o, ParallelCorpus corpus, Communicator* stats_comm)
      : data(std::move(corpus)) {
    model = std::make_unique<TranslationModel<float>>(
        translation_config(o, data.src_vocab.size(), data.tgt_vocab.size()), o.seed, stats_comm);
  }
  ParamStore<float>& params() override { return model->params; }
  std::vector<Norm<float>*> norms() override { return model->norms(); }
  TranslationModel<float>* translation_model() override { return model.get(); }
  const ParallelCorpus* parallel_corpus() const override { return &data; }
  std::string vocab_fingerprint() const override {
    return vocabulary_fingerprint({&data.src_vocab, &data.tgt_vocab});
  }

  void prepare_training(const Options& o, int rank_, int ranks_) override {
    rank = rank_, ranks = ranks_, update_freq = o.update_freq;
    update_batches = length_batches(data.train, int64_t(o.max_tokens) * ranks * o.update_freq);
    if (update_batches.empty())
      throw std::runtime_error("the training split '" + o.train_subset + "' is empty");
    order = std::make_unique<SampleOrder>(int64_t(update_batches.size()), o.seed);
  }
  void micro_step(int64_t update, int micro, uint64_t dseed, double* sums,
                  const GradsReady& ready) override {
    const auto& ub = update_batches[size_t(order->sample(update))];
    make_parallel_batch(data.train, batch_piece(ub, micro * ranks + rank, update_freq * ranks),
                        &batch);
    model->forward_backward(batch, 1.0f, dseed, sums, ready);
  }
  double epoch_of(int64_t update) const override {
    return double(update) / double(update_batches.size());
  }
  double forward_s() const override { return model->forward_s; }
  double backward_s() const override { return model->backward_s; }
  EvalResult validate(Trainer& trainer) override { return trainer.evaluate(data.valid); }

  void log_summary(bool training) const override {
    const auto& c = model->config;
    const ParallelCorpus& p = data;
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
              << ")"
              << (training ? ", dropout " + format_number(c.dropout) + ", attention dropout " +
                                 format_number(c.attention_dropout)
                           : std::string())
              << (c.share_all_embeddings ? ", shared embeddings" : "");
  }
  std::vector<std::pair<std::string, std::string>> norm_places(const Options& o) const override {
    return {{"encoder self", o.encoder_norm_self}, {"encoder ff", o.encoder_norm_ff},
            {"encoder final", o.encoder_norm_final}, {"decoder self", o.decoder_norm_self},
            {"decoder cross", o.decoder_norm_cross}, {"decoder ff", o.decoder_norm_ff},
            {"decoder final", o.decoder_norm_final}};
  }
  bool padded() const override { return true; }
  // Block indices name the encoder blocks, where the paper puts its batch-type norms.
  int probe_blocks() const override { return int(model->encoder.size()); }
  Norm<float>* block_norm(int l, bool self) override {
    return (self ? model->encoder[l].norm_self : model->encoder[l].norm_ff).get();
  }
  Norm<float>* final_norm() override { return model->enc_norm_final.get(); }
};

}  // namespace

std::unique_ptr<ModelTask> make_lm_task(const Options& o, Corpus corpus,
                                        Communicator* stats_comm) {
  return std::make_unique<LmTask>(o, std::move(corpus), stats_comm);
}

std::unique_ptr<ModelTask> make_translation_task(const Options& o, ParallelCorpus corpus,
                                                 Communicator* stats_comm) {
  return std::make_unique<TranslationTask>(o, std::move(corpus), stats_comm);
}

}  // namespace pn
