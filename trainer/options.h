// Every pntrain option, declared once with its default and help text (trainer/options.cpp).
// The same declarations serve the command line and INI config files (--config FILE); the
// command line wins over the file.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/lm.h"

namespace pn {

struct Options {
  // data
  std::string data = "builtin";  // a directory with train/valid/test files, or "builtin"
  int tokens_per_sample = 64;
  int max_tokens = 2048;          // tokens per rank per micro-step
  int update_freq = 1;
  uint64_t seed = 1;
  // model
  int decoder_layers = 2, decoder_embed_dim = 128, decoder_attention_heads = 4,
      decoder_ffn_embed_dim = 512;
  double dropout = 0.1;
  std::string norm, norm_self = "layer", norm_ff = "layer", norm_final = "layer";
  int norm_groups = 0;  // 0: the number of attention heads
  int norm_prescale_groups = 0;
  double norm_eps = 1e-5, norm_alpha = 0.9, pn_alpha_fwd = 0.9, pn_alpha_bkw = 0.9;
  int64_t pn_warmup = -1;  // -1: warmup_updates * statistics batches per update
  int stats_batch_tokens = 0;  // ghost statistics groups per rank (0: the whole micro-batch)
  // optimisation
  double lr = 5e-4, adam_eps = 1e-8, weight_decay = 0.0, clip_norm = 0.0;
  double adam_beta1 = 0.9, adam_beta2 = 0.98;
  double label_smoothing = 0.1;
  std::string lr_scheduler = "inverse_sqrt";
  int warmup_updates = 100;
  double warmup_init_lr = 0.0;
  int max_update = 1000;
  int max_epoch = 0;
  // evaluation, logging, output
  int validate_interval_updates = 200;
  int log_interval = 10;
  std::string metrics;
  std::string probe_norm_stats;  // "", "all", or block indices "0,2" (and/or "final")
  std::string save_dir, restore_file;  // restore_file "" = last checkpoint in save_dir, if any
  int save_interval_updates = 0;       // 0: save only at the end (when --save-dir is given)
  int keep_last = 0;                   // 0: keep every checkpoint
  int threads = 0;  // 0: cores of the node divided by its ranks
  // gradient all-reduce, guards, failure handling
  double bucket_mb = 4;           // overlapped all-reduce bucket size; 0: one all-reduce after
  bool log_timing = false;        // print the per-update time split
  int consistency_interval = 100; // updates between cross-rank parameter checks (0: off)
  int max_bad_updates = 5;        // consecutive NaN/Inf updates skipped before aborting
  double comm_timeout = 300;      // seconds without progress before the job is stopped
  std::string debug_fault;        // test hook: nan@U, exit@U:R, hang@U:R, perturb@U:R
  // evaluation
  bool eval_only = false;
  int patience = 0;               // stop after N validations without improvement (0: off)
  std::string pn_eval_state = "rank0";  // rank-local norm state used in evaluation: rank0|mean
  int sync_group_size = 0;  // ranks per statistics group of the sync_* norms (0: every rank)
  // translation: --arch transformer; --data holds <split>.<lang> files
  std::string arch = "transformer_lm";  // transformer_lm | transformer
  std::string source_lang = "de", target_lang = "en";
  std::string train_subset = "train", valid_subset = "valid", gen_subset = "test";
  bool share_all_embeddings = false;
  int encoder_layers = 2, encoder_embed_dim = 128, encoder_attention_heads = 4,
      encoder_ffn_embed_dim = 512;
  double attention_dropout = 0.0;
  std::string encoder_norm_self = "layer", encoder_norm_ff = "layer",
              encoder_norm_final = "layer";
  std::string decoder_norm_self = "layer", decoder_norm_cross = "layer",
              decoder_norm_ff = "layer", decoder_norm_final = "layer";
  int beam = 5;                   // beam search width (--eval-only of a translation model)
  double lenpen = 1.0;            // score / length^lenpen
  double max_len_a = 0, max_len_b = 200;  // generated length <= a * source length + b
  std::string remove_bpe;         // continuation marker to remove ("@@ "), "" keeps BPE
  bool bleu_lowercase = false;    // case-insensitive BLEU (multi-bleu.perl -lc)
  int gen_max_sentences = 0;      // decode only the first N sentences of --gen-subset (0: all)
  std::string results_path;       // write hypotheses here (rank r appends .r<r> when ranks > 1)
  std::string config;
  // reproduction of the paper
  std::string pn_variant = "paper";  // PN's math: paper (Algorithm 2) or authors (their code)
  std::string pn_warmup_psi = "cumulative";  // PN's running psi^2 in warmup: cumulative | ema
  // fairseq's flags with fairseq's meaning, schedules, run control and startup notes
  int save_interval = 0;          // save at the end of every N epochs (0: off)
  int keep_last_epochs = 0;       // keep the newest N checkpoints (as --keep-last; 0: all)
  std::string adam_betas;         // "(0.9, 0.98)": sets adam_beta1/2
  std::string optimizer = "adam"; // adam only
  std::string device = "auto";    // auto | cpu | cuda | sim (--cpu: cpu; sim: the CPU stand-in
                                  // for a GPU, kernels/sim_device.h, for tests)
  std::string precision = "fp32"; // fp32 | tf32 | bf16 (--bf16, --fp16: bf16)
  std::string attention = "fused";  // fused (a GPU with bf16 GEMMs) | materialized
  std::string log_format = "simple";  // simple | json | glog
  double min_lr = 0.0;            // cosine: the floor of each period
  int lr_period_updates = -1;     // cosine: updates of the first period (-1: max_update - warmup)
  double lr_shrink = 0.1;         // cosine: lr and min_lr shrink by this each period
  double t_mult = 1.0;            // cosine: each period is t_mult times the previous
  double end_learning_rate = 0.0; // polynomial_decay: the lr after total_num_update
  double power = 1.0;             // polynomial_decay: exponent of the decay
  int total_num_update = -1;      // polynomial_decay: updates of the decay (-1: max_update)
  std::set<std::string> given;    // flags given on the command line or in --config
  // The given flags as written (a switch: "true"), which a checkpoint keeps so that a resume
  // needs none repeated; and every option's value as text, defaults included.
  std::map<std::string, std::string> given_text, values;
  std::vector<std::string> notes; // messages of the parse for rank 0 to print (rounded values)
  // text from a language model (trainer/sample.h): --restore-file CK --sample N
  int sample = 0;                 // samples to print (0: train or evaluate as usual)
  std::string prompt;             // words the samples continue ("" : a sentence start)
  double temperature = 1.0;       // 0: always the most likely token
  int top_k = 0;                  // draw among the k most likely tokens (0: all)
  int max_len = 50;               // generated tokens per sample at most
};

// Parses argv (and --config FILE). Returns false with `help` filled for --help. Throws
// std::invalid_argument with a message naming the culprit and the fix on bad input.
// `inherited`: INI text of flags below the command line and --config (a checkpoint's run's, from
// resume_flags).
bool parse_options(int argc, char** argv, Options* out, std::string* help,
                   const std::string& inherited = "");
// The flags a checkpoint keeps of its run: all but the paths of the run's outputs and input
// (--save-dir, --metrics, --results-path, --restore-file), so that its bytes do not depend on
// where the run wrote.
std::map<std::string, std::string> checkpoint_flags(const std::map<std::string, std::string>& f);
// A resume, --eval-only and --sample take the flags of the run that wrote `checkpoint` (`stored`:
// its given flags as written, `stored_values`: its every option's value) where argv gives none,
// by parsing argv again above them. A flag given with another value than the run's is applied
// with a note naming both (but --max-update and --max-epoch, which a resume usually extends). Not taken: where and how the ranks compute (--device, --cpu,
// --threads, --precision, --bf16, --fp16), --data (the model's configuration holds it), the
// verbs (--eval-only, --sample, --config, --debug-fault), and the outputs' paths, which a
// checkpoint does not keep.
void resume_flags(int argc, char** argv, const std::map<std::string, std::string>& stored,
                  const std::map<std::string, std::string>& stored_values,
                  const std::string& checkpoint, Options* o);
// Checks values against each other (after parsing), throwing std::invalid_argument.
void validate_options(const Options& o);
// PN_BF16_EMULATE=1: bf16 on a CPU without AVX512_BF16, for its numerics (tests, checks).
bool bf16_emulation_asked();
// The version string of --version.
std::string version_string();
// The model and task flags a checkpoint stores (flag name -> value as JSON text), so that
// --eval-only and resuming need none of them repeated.
std::vector<std::pair<std::string, std::string>> model_config_flags(const Options& o);
// Takes the stored flags into o; a flag given (o.given) with another value is refused naming
// both values and the checkpoint. Unknown stored names are ignored (newer checkpoints).
void apply_checkpoint_flags(const std::vector<std::pair<std::string, std::string>>& stored,
                            const std::string& checkpoint, Options* o);
// Closest flag name to an unknown one ("" when none is near), for "did you mean".
std::string nearest_flag(const std::string& unknown);
// Norm options of one place ("self", "ff" or "final") from the flat options.
NormOptions norm_options(const Options& o, const std::string& kind);
// Statistics batches of a batch-type norm per rank and micro-step: 1, or the ghost groups.
int stats_groups_per_micro_step(const Options& o);
// Ranks whose statistics a synchronized norm shares: --sync-group-size, or the world size.
int sync_group_ranks(const Options& o, int world_size);
// Tokens in one statistics batch of the place's norm ("self", "ff", "final"), on average:
// --max-tokens per rank, times the ranks of a sync group for a synchronized norm, divided by
// the ghost groups (--stats-batch-tokens). 0 for norms without batch statistics.
double statistics_batch_tokens(const Options& o, const std::string& norm_kind, int world_size);

}  // namespace pn
