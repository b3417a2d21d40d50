// The trainer: one training loop for both tasks, --arch transformer_lm (a Corpus and a
// LanguageModel) and --arch transformer (a ParallelCorpus and a TranslationModel), which reach it
// through one ModelTask. Talks to other ranks only through the Communicator. One file per question:
//   update_loop.cpp     how an update runs: train(), its phases, validation and the run's end
//   gradient_sync.cpp   the gradient all-reduce in buckets and the cross-rank consistency check
//   evaluation.cpp      evaluation of a split and beam-search generation with BLEU
//   save_restore.cpp    writing, restoring and verifying checkpoints (format: checkpoint.h)
//   reports.cpp         startup summaries, progress lines and the metrics file
//   faults.cpp          --debug-fault, the faults the failure tests inject
//   model_task.cpp      what differs between the two tasks
#pragma once
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/watchdog.h"
#include "layers/device_allreduce.h"
#include "kernels/buffer.h"
#include "model/lm.h"
#include "model/translation.h"
#include "trainer/beam_search.h"
#include "trainer/bleu.h"
#include "trainer/data.h"
#include "trainer/faults.h"
#include "trainer/model_task.h"
#include "trainer/options.h"
#include "trainer/translation_data.h"

namespace pn {

struct TrainResult {
  int64_t updates = 0;
  int64_t update_limit = 0;  // the last update that --max-update and --max-epoch allow
  double last_loss = 0, last_nll = 0;
  double valid_nll = -1;  // per token, natural log
  std::vector<double> losses;  // training loss per update (per target token)
  int interrupted = 0;         // SIGINT/SIGTERM that stopped the run after `updates`, or 0
  bool final_save_failed = false;  // the end (or interrupt) checkpoint could not be written
  double wall_s = 0, tokens = 0;   // this run's training time and target tokens (all ranks)
  double best_valid_nll = -1;      // best validation loss of this run
  std::string checkpoint;          // the newest checkpoint on disk ("" when none)
  bool ended_in_pn_warmup = false; // PN layers still in their warmup after the last update
  int64_t pn_warmup_updates = 0;   // that warmup, in updates
  int64_t pn_warmup_shorter = 0;   // a --pn-warmup that would end it a fifth into the run
};

// An error every rank raises at the same point with the same message (a NaN loss after the
// all-reduce, a failed cross-rank check): rank 0 reports it once and every rank exits cleanly.
struct AgreedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The flags of the run that wrote checkpoint `dir` (stored_flags of its model.bin's header),
// empty for the oldest checkpoints. Throws CorruptCheckpoint for a damaged model.bin.
std::map<std::string, std::string> checkpoint_flags(const std::string& dir);

struct EvalResult {
  double loss = 0, nll = 0, ntokens = 0;  // per token
};

struct GenerateResult {
  BleuStats bleu;                   // summed over every rank's sentences
  std::vector<std::string> hyps;    // this rank's share of the hypotheses (BPE removed if asked)
  int64_t first = 0;                // index of this rank's first sentence in the split
};

class Trainer {
 public:
  Trainer(const Options& options, Communicator& comm, Corpus corpus);
  Trainer(const Options& options, Communicator& comm, ParallelCorpus corpus);
  TrainResult train();
  EvalResult evaluate(const TokenStream& stream);  // language model
  EvalResult evaluate(const ParallelSplit& split);          // translation
  // Beam search over this rank's contiguous share of the split, BLEU of all ranks' shares
  // against the split's target lines (both BPE-removed when remove_bpe is set).
  GenerateResult generate(const ParallelSplit& split, const GenerateOptions& g, bool remove_bpe,
                          bool lowercase);
  LanguageModel<float>& model();
  TranslationModel<float>& translation_model();
  bool is_translation() const { return task_->translation_model() != nullptr; }
  int64_t start_update() const { return start_update_; }
  bool restored() const { return restored_; }
  const Corpus& corpus() const;
  const ParallelCorpus& parallel_corpus() const;
  ParamStore<float>& params() { return task_->params(); }
  std::vector<Norm<float>*> norms() { return task_->norms(); }
  // The communicator of the synchronized norms' statistics: this rank's sync group
  // (--sync-group-size; all ranks by default), the job's own one at one rank.
  Communicator& stats_communicator() { return stats_comm_ ? *stats_comm_ : comm_; }
  // Runs fn with the evaluation's norm state (rank 0's or the mean over ranks, --pn-eval-state)
  // and gives every rank its own rank-local state back afterwards.
  void with_eval_state(const std::function<void()>& fn);
  // The --metrics file's records of this attempt (rank 0, when --metrics is given): its start
  // at the update it starts from, with the provenance; its end ("done", "interrupted" or
  // "failed") at the last update it finished; and a test evaluation's loss at the restored update.
  void record_start();
  void record_end(const std::string& reason);
  void record_test(const EvalResult& test);
  // Where this run computes (trainer/provenance.h); also in every checkpoint it writes.
  const nlohmann::json& provenance() const { return provenance_; }

 private:
  using MakeTask = std::function<std::unique_ptr<ModelTask>(Communicator* stats_comm)>;
  Trainer(const Options& options, Communicator& comm, const MakeTask& make_task);
  void setup();  // once the model exists: initial parameters, probes, the checkpoint to resume
  void choose_probed_norms();  // --probe-norm-stats

  // save_restore.cpp. save_checkpoint saves checkpoint_<update> (all ranks take part); it
  // returns false and warns once on failure, removing the half-written directory and leaving
  // the previous checkpoint intact.
  bool save_checkpoint(int64_t update, const std::string& name = "", int keep = 0,
                       bool final = false);
  void restore_checkpoint(const std::string& dir);

  // reports.cpp
  void open_metrics();  // truncated to the restored update when resuming
  void truncate_metrics();
  void write_metrics(const std::string& json_line);
  void log_model_summary();
  void log_statistics_batches();  // the startup line of each batch-type norm's statistics batch
  void log_pn_warmup();  // per PN kind: its warmup and what validation uses during it
  // Whether PN's running psi^2 is still the warmup's after `updates` updates (t <= W, W > 0).
  bool in_pn_warmup(int64_t updates) const;

  // update_loop.cpp: train()'s phases, in the order of one update.
  struct Run;          // what one call of train() carries from update to update
  struct UpdateStats;  // one update's sums and time split
  Run start_run();
  int64_t last_allowed_update() const;
  void forward_backward(int64_t update, UpdateStats* stats);
  void allreduce_gradients(const Run& run, int64_t update, UpdateStats* stats);
  void skip_update(Run* run, int64_t update, double loss);  // a non-finite update
  void optimizer_step(const Run& run, int64_t update, UpdateStats* stats);
  void record_update(Run* run, int64_t update, const UpdateStats& stats);  // reports.cpp
  bool validate(Run* run, int64_t update);  // true: --patience stops
  // The interrupt that stops every rank after this update: any rank's signal, or 0.
  int agreed_interrupt();
  bool end_update(Run* run, int64_t update, bool last, bool stop, int signal);
  void inject_fault(const Fault& fault, int64_t update);  // faults.cpp

  // gradient_sync.cpp. Buckets of the flat gradient buffer, each summed over every rank as soon
  // as the backward is done with it: MPI on the host, NCCL on a GPU, or staged through the
  // host (ranks sharing a GPU).
  struct Bucket {
    size_t begin = 0, end = 0;
    PendingSum sum;  // this update's sum, while it runs (layers/device_allreduce.h)
  };
  void plan_buckets();
  void start_gradient_allreduce(Bucket& bucket);
  void finish_gradient_allreduce();  // waits for every range started
  void check_consistency(int64_t update);

  Options opt_;
  Communicator& comm_;
  std::unique_ptr<Communicator> stats_comm_;  // the sync group's; null at one rank
  std::unique_ptr<ModelTask> task_;
  Buf<float> adam_m_, adam_v_;
  // One small block of the device that the host reads once per update: the loss sums
  // {loss, nll, ntokens} of this rank's micro-steps, then {sum g^2, non-finite count} of the
  // reduced gradient.
  Buf<double> update_sums_;
  std::ofstream metrics_;
  int64_t start_update_ = 0;
  int64_t reached_update_ = 0;  // the last update this attempt finished (its start at first)
  nlohmann::json provenance_;
  // Early stopping's state, carried by checkpoints so that a resumed run stops where an
  // uninterrupted one would and never replaces checkpoint_best with a worse model.
  double best_valid_ = std::numeric_limits<double>::infinity();
  int validations_without_gain_ = 0;
  // The validation due at the saved update was left to the resumed run (an interrupt).
  bool validation_pending_ = false;
  bool restored_ = false;
  std::string last_checkpoint_;  // newest complete checkpoint of this run on disk
  std::vector<Bucket> buckets_;
  std::unique_ptr<Watchdog> watchdog_;
  std::vector<std::pair<std::string, Norm<float>*>> probed_;  // --probe-norm-stats layers
};

}  // namespace pn
