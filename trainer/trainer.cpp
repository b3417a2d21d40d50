// The trainer's setup: the watchdog, the sync group's communicator, the model through its task,
// the same initial parameters on every rank, the norms to probe, and the checkpoint to resume.
#include "trainer/trainer.h"

#include <glog/logging.h>

#include <set>
#include <sstream>
#include <stdexcept>

#include "trainer/checkpoint.h"
#include "trainer/provenance.h"

namespace pn {

Trainer::Trainer(const Options& options, Communicator& comm, Corpus corpus)
    : Trainer(options, comm, [&](Communicator* stats_comm) {
        return make_lm_task(options, std::move(corpus), stats_comm);
      }) {}

Trainer::Trainer(const Options& options, Communicator& comm, ParallelCorpus corpus)
    : Trainer(options, comm, [&](Communicator* stats_comm) {
        return make_translation_task(options, std::move(corpus), stats_comm);
      }) {}

Trainer::Trainer(const Options& options, Communicator& comm, const MakeTask& make_task)
    : opt_(options), comm_(comm) {
  if (comm_.size() > 1 && opt_.comm_timeout > 0) {
    // A stuck rank names itself first; its peers' collectives give up a little later.
    comm_.timeout_s = opt_.comm_timeout + 10;
    watchdog_ = std::make_unique<Watchdog>(comm_, opt_.comm_timeout);
  }
  // Synchronized norms reduce their statistics within groups of --sync-group-size ranks (all
  // ranks by default); a split of its own even then, so that its counts are the statistics'.
  // It exists before the model, whose synchronized norms use it.
  if (comm_.size() > 1) stats_comm_ = make_group_communicator(comm_, opt_.sync_group_size);
  task_ = make_task(&stats_communicator());
  setup();
}

LanguageModel<float>& Trainer::model() {
  if (!task_->language_model()) throw std::logic_error("a translation trainer has no LM");
  return *task_->language_model();
}

TranslationModel<float>& Trainer::translation_model() {
  if (!task_->translation_model()) throw std::logic_error("an LM trainer has no translation model");
  return *task_->translation_model();
}

const Corpus& Trainer::corpus() const {
  static const Corpus none;
  return task_->corpus() ? *task_->corpus() : none;
}

const ParallelCorpus& Trainer::parallel_corpus() const {
  static const ParallelCorpus none;
  return task_->parallel_corpus() ? *task_->parallel_corpus() : none;
}

void Trainer::setup() {
  // Every rank initialises from the same seed; the broadcast makes identity a fact, not a hope.
  // (Through the host: once per run.)
  if (comm_.size() > 1) {
    std::vector<float> host = params().data.to_host();
    comm_.broadcast(host.data(), host.size() * sizeof(float), 0);
    params().data.from_host(host);
  }
  if (!opt_.probe_norm_stats.empty()) choose_probed_norms();
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
  reached_update_ = start_update_;
  provenance_ = run_provenance(opt_, comm_);
  if (comm_.rank() == 0 && !opt_.metrics.empty()) open_metrics();
  if (comm_.rank() == 0) {
    LOG(INFO) << provenance_summary(provenance_);
    log_model_summary(), log_statistics_batches(), log_pn_warmup();
  }
}

void Trainer::choose_probed_norms() {
  std::set<std::string> chosen;
  std::stringstream list(opt_.probe_norm_stats);
  for (std::string item; std::getline(list, item, ',');) chosen.insert(item);
  // Block indices name LM blocks, or for translation the encoder blocks (where the paper puts
  // its batch-type norms); 'final' is the LM's or the encoder's final norm.
  const int L = task_->probe_blocks();
  for (const std::string& item : chosen)
    if (item != "all" && item != "final" &&
        (item.find_first_not_of("0123456789") != std::string::npos || std::stoi(item) >= L))
      throw std::invalid_argument("--probe-norm-stats: '" + item + "' is not 'all', 'final' " +
                                  "or a block index below " + std::to_string(L));
  const bool all = chosen.count("all") > 0;
  for (int l = 0; l < L; ++l)
    if (all || chosen.count(std::to_string(l))) {
      probed_.emplace_back(std::to_string(l) + ".self", task_->block_norm(l, true));
      probed_.emplace_back(std::to_string(l) + ".ff", task_->block_norm(l, false));
    }
  if (all || chosen.count("final")) probed_.emplace_back("final", task_->final_norm());
  for (auto& [name, norm] : probed_) norm->probed()->probe = true;
}

}  // namespace pn
