// What the training loop needs of a model and its data, the same for the language model and the
// translation model (as fairseq's task object): parameters and norms, the training batches and
// their forward and backward, the epoch of an update, and what the startup summary says.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/lm.h"
#include "model/translation.h"
#include "trainer/data.h"
#include "trainer/options.h"
#include "trainer/translation_data.h"

namespace pn {

class Trainer;
struct EvalResult;

struct ModelTask {
  using GradsReady = std::function<void(size_t)>;
  virtual ~ModelTask() = default;
  virtual ParamStore<float>& params() = 0;
  virtual std::vector<Norm<float>*> norms() = 0;
  // The model of each kind, or null: for the programs' and tests' own use, not the loop's.
  virtual LanguageModel<float>* language_model() { return nullptr; }
  virtual TranslationModel<float>* translation_model() { return nullptr; }
  virtual const Corpus* corpus() const { return nullptr; }
  virtual const ParallelCorpus* parallel_corpus() const { return nullptr; }
  // The fingerprint of the vocabularies, which a checkpoint must match.
  virtual std::string vocab_fingerprint() const = 0;
  // Builds the training split's batches and sample order (at the start of train()).
  virtual void prepare_training(const Options& o, int rank, int ranks) = 0;
  // This rank's share of micro-batch `micro` of `update` through forward and backward, adding
  // its loss sums {loss, nll, ntokens} to sums[0..2] on the device; `ready` hears of gradients
  // the backward is done with.
  virtual void micro_step(int64_t update, int micro, uint64_t dropout_seed, double* sums,
                          const GradsReady& ready) = 0;
  // The epochs of training data that `update` updates have gone through.
  virtual double epoch_of(int64_t update) const = 0;
  // The last micro-step's forward and backward seconds.
  virtual double forward_s() const = 0;
  virtual double backward_s() const = 0;
  virtual EvalResult validate(Trainer& trainer) = 0;
  // The startup lines of the corpus and the model.
  // `training`: also what only training uses (dropout); not for --eval-only and --sample.
  virtual void log_summary(bool training) const = 0;
  // Each norm place with its kind, for the statistics batch line; padded: batches hold padding.
  virtual std::vector<std::pair<std::string, std::string>> norm_places(const Options& o) const = 0;
  virtual bool padded() const = 0;
  // --probe-norm-stats: the blocks it may name (the LM's, or the encoder's), a block's norms
  // and the final one.
  virtual int probe_blocks() const = 0;
  virtual Norm<float>* block_norm(int block, bool self) = 0;
  virtual Norm<float>* final_norm() = 0;
  // The builtin corpus's entropy floor on valid (0 when unknown), shown in progress lines.
  virtual double entropy_floor() const { return 0; }
};

std::unique_ptr<ModelTask> make_lm_task(const Options& o, Corpus corpus,
                                        Communicator* stats_comm);
std::unique_ptr<ModelTask> make_translation_task(const Options& o, ParallelCorpus corpus,
                                                 Communicator* stats_comm);
ModelConfig model_config(const Options& o, int vocab);
TranslationConfig translation_config(const Options& o, int src_vocab, int tgt_vocab);

}  // namespace pn
