// The training loop: data -> micro-steps -> one gradient all-reduce -> Adam, with validation,
// progress lines and a metrics file. Talks to other ranks only through the Communicator.
#pragma once
#include <fstream>
#include <memory>

#include "comm/communicator.h"
#include "comm/watchdog.h"
#include "model/lm.h"
#include "trainer/data.h"
#include "trainer/options.h"

namespace pn {

struct TrainResult {
  int64_t updates = 0;
  double last_loss = 0, last_nll = 0;
  double valid_nll = -1;  // per token, natural log
  std::vector<double> losses;  // training loss per update (per target token)
};

struct EvalResult {
  double loss = 0, nll = 0, ntokens = 0;  // per token
};

class Trainer {
 public:
  Trainer(const Options& options, Communicator& comm, Corpus corpus);
  TrainResult train();
  EvalResult evaluate(const std::vector<int32_t>& stream);
  LanguageModel<float>& model() { return *model_; }
  int64_t start_update() const { return start_update_; }
  bool restored() const { return restored_; }
  const Corpus& corpus() const { return corpus_; }

 private:
  void log_model_summary();
  // Saves checkpoint_<update> (all ranks take part). Returns false and warns on failure,
  // leaving the previous checkpoint intact.
  bool save_checkpoint(int64_t update, const std::string& name = "");
  void plan_buckets();
  void check_consistency(int64_t update);
  void restore_checkpoint(const std::string& dir);
  void write_metrics(const std::string& json_line);

  Options opt_;
  Communicator& comm_;
  Corpus corpus_;
  std::unique_ptr<LanguageModel<float>> model_;
  std::vector<float> adam_m_, adam_v_;
  std::ofstream metrics_;
  int64_t start_update_ = 0;
  bool restored_ = false;
  struct Bucket {
    size_t begin, end;
    Communicator::Request request;  // -1: not started in this update
  };
  std::vector<Bucket> buckets_;
  std::unique_ptr<Watchdog> watchdog_;
  std::vector<std::pair<std::string, Norm<float>*>> probed_;  // --probe-norm-stats layers
};

ModelConfig model_config(const Options& o, int vocab);

}  // namespace pn
