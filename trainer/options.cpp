#include "trainer/options.h"

#include <boost/program_options.hpp>
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <charconv>
#include <deque>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "kernels/cpu/cpu_features.h"
#include "kernels/device.h"
#include "layers/norms/norm.h"

namespace po = boost::program_options;

namespace pn {

namespace {

// Defaults as written in --help ("0.1", not "0.10000000000000001").
std::string as_text(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
template <class T>
std::string as_text(const T& v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
template <class T>
po::typed_value<T>* dflt(T* v) {
  return po::value(v)->default_value(*v, as_text(*v));
}
std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& k : items) out += (out.empty() ? "" : ", ") + k;
  return out;
}
// The choices of each enumerated flag, for --help and for the checks.
const std::vector<std::string> kSchedulers = {"inverse_sqrt", "fixed", "cosine",
                                              "polynomial_decay"};
const std::vector<std::string> kArchs = {"transformer_lm", "transformer"};
const std::vector<std::string> kEvalStates = {"rank0", "mean"};
const std::vector<std::string> kDevices = {"auto", "cpu", "cuda", "sim"};
const std::vector<std::string> kPrecisions = {"fp32", "tf32", "bf16"};
const std::vector<std::string> kAttentions = {"fused", "materialized"};
const std::vector<std::string> kLogFormats = {"simple", "json", "glog"};
const std::vector<std::string> kOptimizers = {"adam"};
// Help texts with their choices; Boost copies them, the deque keeps them for the call.
const char* choices(const std::string& what, const std::vector<std::string>& c) {
  static std::deque<std::string> texts;
  texts.push_back(what + " (choices: " + join(c) + ")");
  return texts.back().c_str();
}
const char* norm_help(const std::string& what) { return choices(what, norm_kinds()); }

// fairseq flags pntrain does not have, with what to use instead.
const std::map<std::string, std::string>& fairseq_redirects() {
  static const std::map<std::string, std::string> m = {
      {"num-workers", "pntrain reads its data in the training process; drop --num-workers"},
      {"ddp-backend", "gradients are always all-reduced in buckets over MPI (--bucket-mb sets "
                      "their size); drop --ddp-backend"},
      {"batch-size", "batches are counted in tokens: use --max-tokens (per rank and micro-step) "
                     "with --tokens-per-sample"},
      {"max-sentences", "batches are counted in tokens: use --max-tokens (per rank and "
                        "micro-step) with --tokens-per-sample"},
      {"fp16-init-scale", "there is no loss scaling (bf16 needs none): drop it"},
      {"fp16-scale-window", "there is no loss scaling (bf16 needs none): drop it"},
      {"fp16-scale-tolerance", "there is no loss scaling (bf16 needs none): drop it"},
      {"min-loss-scale", "there is no loss scaling (bf16 needs none): drop it"},
      {"memory-efficient-fp16", "use --bf16 (--precision bf16) on a GPU"},
      {"criterion", "the criterion is label-smoothed cross-entropy: set --label-smoothing "
                    "(0: plain cross-entropy)"},
      {"task", "use --arch transformer_lm (language modeling) or --arch transformer "
               "(translation)"},
      {"sample-break-mode", "samples are consecutive --tokens-per-sample windows of the token "
                            "stream (fairseq's 'none')"},
      {"distributed-world-size", "start R ranks with mpirun -np R"},
      {"distributed-backend", "ranks talk over MPI (and NCCL on GPUs); start them with mpirun"},
      {"distributed-port", "start ranks with mpirun -np R"},
      {"share-decoder-input-output-embed",
       "the language model always ties its input and output embeddings; drop it"},
      {"max-lr", "--lr is the peak learning rate of every schedule; cosine decays to --min-lr"},
      {"tensorboard-logdir", "use --metrics FILE (JSON lines) and launcher/pn plot"},
      {"wandb-project", "use --metrics FILE (JSON lines) and launcher/pn plot"},
      {"no-progress-bar", "there is no progress bar; --log-interval sets the progress lines"},
      {"validate-interval", "use --validate-interval-updates N"},
      {"user-dir", "pntrain has no plugins; drop --user-dir"},
      {"no-epoch-checkpoints", "checkpoints are written at --save-interval epochs and "
                               "--save-interval-updates only; drop it"},
      {"fp32", "fp32 is the default (--precision fp32)"},
  };
  return m;
}

std::string unknown_flag_message(const std::string& name) {
  std::string bare = name;
  while (!bare.empty() && bare[0] == '-') bare.erase(0, 1);
  const auto it = fairseq_redirects().find(bare);
  if (it != fairseq_redirects().end())
    return "pntrain has no --" + bare + ": " + it->second;
  const std::string near = nearest_flag(bare);
  return "unrecognised option '--" + bare + "'" +
         (near.empty() ? "" : ": did you mean --" + near + "?") + " (see pntrain --help)";
}

// argparse's rule, which fairseq users rely on to override a flag by appending it: the last of
// a repeated flag wins. Earlier occurrences are dropped, each repeated flag named in a note.
void keep_last_of_repeated(po::parsed_options* parsed, const std::string& where,
                           std::vector<std::string>* notes) {
  std::map<std::string, int> count, seen;
  for (const po::option& op : parsed->options) ++count[op.string_key];
  std::vector<po::option> kept;
  for (const po::option& op : parsed->options) {
    if (++seen[op.string_key] < count[op.string_key]) continue;
    kept.push_back(op);
    if (count[op.string_key] < 2) continue;
    std::string value;
    for (const std::string& v : op.value) value += " " + v;
    notes->push_back("--" + op.string_key + " is given " + std::to_string(count[op.string_key]) +
                     " times" + where + ": the last one wins (--" + op.string_key + value + ")");
  }
  parsed->options = std::move(kept);
}

// The text of a given flag as an INI line takes it back: its value, or "true" for a switch.
std::string given_text(const po::option& op) {
  std::string text;
  for (const std::string& v : op.value) text += (text.empty() ? "" : " ") + v;
  return op.value.empty() ? "true" : text;
}

// An option's value as text, whatever its type (every typed option of describe()).
std::string value_text(const boost::any& v) {
  if (const auto* x = boost::any_cast<std::string>(&v)) return *x;
  if (const auto* x = boost::any_cast<double>(&v)) return as_text(*x);
  if (const auto* x = boost::any_cast<float>(&v)) return as_text(double(*x));
  if (const auto* x = boost::any_cast<int>(&v)) return std::to_string(*x);
  if (const auto* x = boost::any_cast<int64_t>(&v)) return std::to_string(*x);
  if (const auto* x = boost::any_cast<uint64_t>(&v)) return std::to_string(*x);
  if (const auto* x = boost::any_cast<bool>(&v)) return *x ? "true" : "false";
  return "?";
}

po::options_description describe(Options& o) {
  po::options_description data("Data");
  data.add_options()
    ("data", dflt(&o.data),
     "corpus directory holding train/valid/test (train.txt, ptb.train.txt or wiki.train.tokens "
     "names, or fairseq-preprocess output: dict.txt and <split>.bin/.idx), or 'builtin' for the "
     "generated corpus embedded in pntrain")
    ("tokens-per-sample", dflt(&o.tokens_per_sample),
     "tokens per sample (sequence length)")
    ("max-tokens", dflt(&o.max_tokens),
     "tokens per rank per micro-step (a multiple of --tokens-per-sample)")
    ("update-freq", dflt(&o.update_freq),
     "micro-steps accumulated per update")
    ("seed", dflt(&o.seed), "seed of data order, init and dropout");

  po::options_description model("Model");
  model.add_options()
    ("decoder-layers", dflt(&o.decoder_layers), "blocks")
    ("decoder-embed-dim", dflt(&o.decoder_embed_dim),
     "model dimension d")
    ("decoder-attention-heads",
     dflt(&o.decoder_attention_heads),
     "attention heads")
    ("decoder-ffn-embed-dim",
     dflt(&o.decoder_ffn_embed_dim),
     "feed-forward hidden dimension")
    ("dropout", dflt(&o.dropout),
     "dropout after attention and feed-forward")
    ("norm", po::value(&o.norm),
     norm_help("norm of every place; a place named beside it (--norm-final ...) keeps its own, "
               "one named only in --config does not"))
    ("norm-self", dflt(&o.norm_self), norm_help("norm before attention"))
    ("norm-ff", dflt(&o.norm_ff), norm_help("norm before feed-forward"))
    ("norm-final", dflt(&o.norm_final), norm_help("final norm"))
    ("norm-groups", dflt(&o.norm_groups),
     "groups of the 'group' norm (0: the number of attention heads)")
    ("norm-prescale-groups",
     dflt(&o.norm_prescale_groups),
     "pre-scaling groups before batch-type norms (0: off)")
    ("norm-eps", dflt(&o.norm_eps), "eps inside square roots")
    ("norm-alpha", dflt(&o.norm_alpha),
     "running-statistics momentum of batch and power_v")
    ("pn-alpha-fwd", dflt(&o.pn_alpha_fwd),
     "PN forward momentum")
    ("pn-alpha-bkw", dflt(&o.pn_alpha_bkw),
     "PN backward momentum")
    ("pn-warmup", dflt(&o.pn_warmup),
     "PN warmup iterations (-1: warmup-updates * statistics batches per update)")
    ("stats-batch-tokens",
     dflt(&o.stats_batch_tokens),
     "ghost statistics: batch-type norms take their statistics (and update their running "
     "state) over groups of this many tokens of a rank's micro-batch, as K-token gradient "
     "accumulation would, in one large micro-batch (a multiple of --tokens-per-sample; "
     "0: the whole micro-batch)");

  po::options_description optim("Optimisation");
  optim.add_options()
    ("lr", dflt(&o.lr), "peak learning rate")
    ("lr-scheduler", dflt(&o.lr_scheduler),
     choices("learning-rate schedule after the linear warmup (see --min-lr, --power)",
             kSchedulers))
    ("warmup-updates", dflt(&o.warmup_updates),
     "linear warmup updates")
    ("warmup-init-lr", dflt(&o.warmup_init_lr),
     "learning rate at update 0 of the warmup")
    ("adam-betas-1", dflt(&o.adam_beta1), "Adam beta1")
    ("adam-betas-2", dflt(&o.adam_beta2), "Adam beta2")
    ("adam-eps", dflt(&o.adam_eps), "Adam epsilon")
    ("weight-decay", dflt(&o.weight_decay),
     "decoupled weight decay")
    ("clip-norm", dflt(&o.clip_norm),
     "clip the gradient norm (0: off)")
    ("label-smoothing", dflt(&o.label_smoothing),
     "label smoothing epsilon")
    ("max-update", dflt(&o.max_update), "updates to train")
    ("max-epoch", dflt(&o.max_epoch),
     "stop after this many epochs (0: no limit)");

  po::options_description run("Evaluation, logging and output");
  run.add_options()
    ("validate-interval-updates",
     dflt(&o.validate_interval_updates),
     "validate every N updates (and at the end)")
    ("log-interval", dflt(&o.log_interval),
     "progress line every N updates")
    ("metrics", po::value(&o.metrics), "write one JSON object per update/validation to FILE")
    ("probe-norm-stats", po::value(&o.probe_norm_stats),
     "add batch-vs-running statistic distances and gradient-part norms of these norm layers to "
     "the metrics: 'all', or block indices like '0' or '0,3' (and/or 'final')")
    ("save-dir", po::value(&o.save_dir), "directory for checkpoints (none: no checkpoints)")
    ("save-interval-updates",
     dflt(&o.save_interval_updates),
     "save every N updates (0: at the end only)")
    ("keep-last", dflt(&o.keep_last),
     "keep the newest N checkpoints (0: all)")
    ("restore-file", po::value(&o.restore_file),
     "checkpoint directory to resume from (default: the last one in --save-dir)")
    ("threads", dflt(&o.threads),
     "threads per rank (0: the node's cores divided by its ranks)");

  po::options_description dist("Distributed training, guards and evaluation");
  dist.add_options()
    ("bucket-mb", dflt(&o.bucket_mb),
     "gradient all-reduce bucket size in MB, reduced as the backward finishes with it "
     "(0: one blocking all-reduce after the backward)")
    ("log-timing", po::bool_switch(&o.log_timing),
     "print the per-update time split (forward, backward, statistics and gradient all-reduce)")
    ("consistency-interval",
     dflt(&o.consistency_interval),
     "every N updates ranks compare parameter checksums (0: off)")
    ("max-bad-updates", dflt(&o.max_bad_updates),
     "NaN/Inf updates skipped in a row before the job stops")
    ("comm-timeout", dflt(&o.comm_timeout),
     "seconds a rank may make no progress (or wait in a collective) before the job stops")
    ("debug-fault", po::value(&o.debug_fault),
     "test hook: nan@U (NaN loss at update U), exit@U:R, hang@U:R, perturb@U:R, sigterm@U:R, "
     "sigterm-mpirun@U:R (SIGTERM to the parent process), savefail@U:R (rank R)")
    ("eval-only", po::bool_switch(&o.eval_only),
     "evaluate the checkpoint (--restore-file or the last in --save-dir) on valid and test")
    ("patience", dflt(&o.patience),
     "stop after N validations without improvement (0: off)")
    ("pn-eval-state", dflt(&o.pn_eval_state),
     choices("rank-local norm state used for evaluation: rank 0's (with --sync-group-size, "
             "that of the first sync group), or the mean over ranks (the mean of the sync "
             "groups' states)", kEvalStates))
    ("sync-group-size", dflt(&o.sync_group_size),
     "synchronized norms (sync_*) all-reduce their statistics within groups of this many "
     "consecutive ranks, a divisor of the world size (1: each rank alone, as the local twin; "
     "0: one group of all ranks); the gradient all-reduce stays over all ranks");

  po::options_description mt("Translation (--arch transformer; sizes of the decoder: --decoder-*)");
  mt.add_options()
    ("arch", dflt(&o.arch),
     choices("decoder-only LM or encoder-decoder translation", kArchs))
    ("source-lang", dflt(&o.source_lang),
     "source language: files <split>.<source-lang> in --data")
    ("target-lang", dflt(&o.target_lang), "target language")
    ("train-subset", dflt(&o.train_subset),
     "split to train on (e.g. valid when only valid and test exist)")
    ("valid-subset", dflt(&o.valid_subset),
     "split for validation loss")
    ("gen-subset", dflt(&o.gen_subset),
     "split to translate and score with BLEU under --eval-only")
    ("share-all-embeddings", po::bool_switch(&o.share_all_embeddings),
     "one joint vocabulary from both sides of train; encoder, decoder and output share it")
    ("encoder-layers", dflt(&o.encoder_layers),
     "encoder blocks")
    ("encoder-embed-dim", dflt(&o.encoder_embed_dim),
     "encoder dimension (must equal --decoder-embed-dim)")
    ("encoder-attention-heads",
     dflt(&o.encoder_attention_heads),
     "encoder attention heads")
    ("encoder-ffn-embed-dim",
     dflt(&o.encoder_ffn_embed_dim),
     "encoder feed-forward hidden dimension")
    ("attention-dropout", dflt(&o.attention_dropout),
     "dropout on attention probabilities")
    ("encoder-norm-self", dflt(&o.encoder_norm_self),
     norm_help("encoder norm before self-attention"))
    ("encoder-norm-ff", dflt(&o.encoder_norm_ff),
     norm_help("encoder norm before feed-forward"))
    ("encoder-norm-final", dflt(&o.encoder_norm_final),
     norm_help("norm after the last encoder block"))
    ("decoder-norm-self", dflt(&o.decoder_norm_self),
     norm_help("decoder norm before self-attention"))
    ("decoder-norm-cross",
     dflt(&o.decoder_norm_cross),
     norm_help("decoder norm before cross-attention"))
    ("decoder-norm-ff", dflt(&o.decoder_norm_ff),
     norm_help("decoder norm before feed-forward"))
    ("decoder-norm-final", dflt(&o.decoder_norm_final),
     norm_help("norm after the last decoder block"))
    ("beam", dflt(&o.beam), "beam size of --eval-only generation")
    ("lenpen", dflt(&o.lenpen),
     "length penalty: hypotheses rank by log-prob sum / length^lenpen")
    ("max-len-a", dflt(&o.max_len_a),
     "generate at most a * source length + b tokens")
    ("max-len-b", dflt(&o.max_len_b), "see --max-len-a")
    ("remove-bpe", po::value(&o.remove_bpe)->implicit_value("@@ "),
     "remove BPE continuation markers (default '@@ ') from hypotheses and references")
    ("bleu-lowercase", po::bool_switch(&o.bleu_lowercase), "case-insensitive BLEU")
    ("gen-max-sentences", dflt(&o.gen_max_sentences),
     "translate only the first N sentences of --gen-subset (0: all)")
    ("results-path", po::value(&o.results_path),
     "write the hypotheses to this file (one line per sentence; .r<rank> per rank)");

  po::options_description paper("Reproduction of the paper");
  paper.add_options()
    ("pn-variant", dflt(&o.pn_variant),
     "PN (power, sync_power) as the paper writes it (paper) or as the authors' public code "
     "computes it (authors: EMA of psi^2 also in warmup, approximate backward with the batch "
     "psi_B^2)")
    ("pn-warmup-psi", dflt(&o.pn_warmup_psi),
     "PN's running psi^2 during warmup, which validation uses: cumulative (the mean of every "
     "batch psi_B^2 since the start, SPEC) or ema (the authors' code: also the EMA in every "
     "warmup iteration, so validation follows recent batches; --pn-variant authors always "
     "does this)");

  po::options_description fs("fairseq's flags, schedules and devices");
  fs.add_options()
    ("save-interval", dflt(&o.save_interval), "save a checkpoint every N epochs (0: off)")
    ("keep-last-epochs", dflt(&o.keep_last_epochs),
     "keep the newest N checkpoints (as --keep-last; 0: all)")
    ("adam-betas", po::value(&o.adam_betas), "Adam betas as fairseq writes them: '(0.9, 0.98)'")
    ("optimizer", dflt(&o.optimizer), choices("the optimizer", kOptimizers))
    ("device", dflt(&o.device), choices("where ranks compute (auto: a GPU when one is there)",
                                        kDevices))
    ("cpu", po::bool_switch(), "compute on the CPU (--device cpu)")
    ("precision", dflt(&o.precision),
     choices("arithmetic of the GEMMs: tf32 (GPU) and bf16 round their operands to 10 and 7 "
                 "bits of mantissa; storage, accumulation, weights, Adam and norm statistics "
                 "stay fp32; bf16 on a CPU needs AVX512_BF16 (or PN_BF16_EMULATE=1)",
                 kPrecisions))
    ("attention", dflt(&o.attention),
     choices("the language model's attention on a GPU with --precision bf16: fused on the "
                 "tensor cores (no T x T matrices in memory; head sizes 32, 64, 128) or "
                 "materialized as everywhere else", kAttentions))
    ("bf16", po::bool_switch(), "--precision bf16")
    ("fp16", po::bool_switch(), "--precision bf16 (bf16 needs no loss scaling)")
    ("log-format", dflt(&o.log_format),
     choices("progress lines: plain text, JSON objects, or with glog's prefix", kLogFormats))
    ("min-lr", dflt(&o.min_lr), "cosine: the lowest learning rate of a period")
    ("lr-period-updates", dflt(&o.lr_period_updates),
     "cosine: updates of the first period (-1: --max-update minus --warmup-updates)")
    ("lr-shrink", dflt(&o.lr_shrink), "cosine: factor on --lr and --min-lr after each period")
    ("t-mult", dflt(&o.t_mult), "cosine: each period is this times longer than the last")
    ("end-learning-rate", dflt(&o.end_learning_rate),
     "polynomial_decay: learning rate reached at --total-num-update")
    ("power", dflt(&o.power), "polynomial_decay: exponent of the decay")
    ("total-num-update", dflt(&o.total_num_update),
     "polynomial_decay: updates over which it decays (-1: --max-update)");

  po::options_description gen("Text from a language model (with --restore-file)");
  gen.add_options()
    ("sample", dflt(&o.sample),
     "print N samples from the checkpoint's LM instead of training (seeded by --seed)")
    ("prompt", po::value(&o.prompt), "words the samples continue (default: a sentence start)")
    ("temperature", dflt(&o.temperature),
     "softmax temperature of the draws (0: always the most likely token)")
    ("top-k", dflt(&o.top_k), "draw among the k most likely tokens only (0: the whole vocabulary)")
    ("max-len", dflt(&o.max_len),
     "generated tokens per sample at most (a sample also ends at <eos>)");

  po::options_description all;
  all.add(data).add(model).add(optim).add(run).add(dist).add(mt).add(paper).add(fs).add(gen);
  return all;
}

}  // namespace

bool parse_options(int argc, char** argv, Options* out, std::string* help,
                   const std::string& inherited) {
  Options o;
  po::options_description file_opts = describe(o);
  po::options_description cmdline("pntrain: data-parallel Transformer training with "
                                  "LayerNorm, BatchNorm and PowerNorm\n\nUsage: [mpirun -np R] "
                                  "pntrain [--config FILE] [options]\n\nGeneral");
  cmdline.add_options()("help,h", "print this help")("version", "print the version")(
      "config", po::value(&o.config), "INI file of options (the command line wins)");
  cmdline.add(file_opts);
  po::variables_map vm;
  std::set<std::string> on_command_line;  // the flags given as arguments, not by --config
  // Whole flag names only: prefix guessing would turn fairseq's --save-interval into
  // --save-interval-updates.
  const int style = po::command_line_style::default_style &
                    ~po::command_line_style::allow_guessing;
  try {
    po::parsed_options parsed =
        po::command_line_parser(argc, argv).options(cmdline).style(style).run();
    keep_last_of_repeated(&parsed, "", &o.notes);
    po::store(parsed, vm);
    for (const po::option& op : parsed.options) {
      on_command_line.insert(op.string_key);
      if (op.string_key != "config" && op.string_key != "help" && op.string_key != "version")
        o.given_text[op.string_key] = given_text(op);
    }
    if (vm.count("help") || vm.count("version")) {
      std::ostringstream ss;
      if (vm.count("help")) ss << cmdline;
      else ss << version_string();
      *help = ss.str();
      return false;
    }
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!in)
        throw std::invalid_argument("cannot read the config file '" + path +
                                    "': check the path given to --config");
      try {
        po::parsed_options in_file = po::parse_config_file(in, file_opts);
        keep_last_of_repeated(&in_file, " in '" + path + "'", &o.notes);
        po::store(in_file, vm);
        for (const po::option& op : in_file.options)  // the command line wins
          o.given_text.emplace(op.string_key, given_text(op));
      } catch (const po::unknown_option& e) {
        throw std::invalid_argument("in config file '" + path + "': " +
                                    unknown_flag_message(e.get_option_name()));
      } catch (const po::error& e) {
        throw std::invalid_argument("in config file '" + path + "': " + e.what() +
                                    " (see pntrain --help for the option names and types)");
      }
    }
    // The flags of a checkpoint's run, below the command line and --config (store keeps the
    // first value of a flag).
    if (!inherited.empty()) {
      std::istringstream in(inherited);
      const po::parsed_options stored = po::parse_config_file(in, file_opts, true);
      po::store(stored, vm);
      for (const po::option& op : stored.options) o.given_text.emplace(op.string_key, given_text(op));
    }
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    throw std::invalid_argument(unknown_flag_message(e.get_option_name()));
  } catch (const po::error& e) {
    throw std::invalid_argument(std::string(e.what()) + " (see pntrain --help)");
  }
  for (const auto& [name, value] : vm) {
    if (!value.defaulted()) o.given.insert(name);
    if (name != "help" && name != "version" && name != "config")
      o.values[name] = value_text(value.value());
  }
  // --norm sets every place; a place named explicitly (--norm-final ...) keeps its own, unless
  // --norm is on the command line and the place only in --config (the command line wins).
  if (!o.norm.empty()) {
    for (auto [flag, place] : {std::pair<const char*, std::string*>{"norm-self", &o.norm_self},
                               {"norm-ff", &o.norm_ff},
                               {"norm-final", &o.norm_final},
                               {"encoder-norm-self", &o.encoder_norm_self},
                               {"encoder-norm-ff", &o.encoder_norm_ff},
                               {"encoder-norm-final", &o.encoder_norm_final},
                               {"decoder-norm-self", &o.decoder_norm_self},
                               {"decoder-norm-cross", &o.decoder_norm_cross},
                               {"decoder-norm-ff", &o.decoder_norm_ff},
                               {"decoder-norm-final", &o.decoder_norm_final}})
      if (vm[flag].defaulted() || (on_command_line.count("norm") && !on_command_line.count(flag)))
        *place = o.norm, o.given.insert(flag), o.values[flag] = o.norm;
  }
  // fairseq's spellings.
  if (!o.adam_betas.empty()) {
    std::string t = o.adam_betas;
    for (char& c : t)
      if (c == '(' || c == ')' || c == '[' || c == ']' || c == ',') c = ' ';
    std::istringstream in(t);
    double b1, b2;
    std::string rest;
    if (!(in >> b1 >> b2) || (in >> rest))
      throw std::invalid_argument("--adam-betas '" + o.adam_betas +
                                  "' is not two numbers: write it as '(0.9, 0.98)'");
    o.adam_beta1 = b1, o.adam_beta2 = b2;
  }
  if (vm.count("cpu") && vm["cpu"].as<bool>()) {
    if (o.given.count("device") && o.device != "cpu")
      throw std::invalid_argument("--cpu contradicts --device " + o.device);
    o.device = "cpu";
  }
  for (const char* half : {"bf16", "fp16"})
    if (vm.count(half) && vm[half].as<bool>()) {
      if (o.given.count("precision") && o.precision != "bf16")
        throw std::invalid_argument(std::string("--") + half + " contradicts --precision " +
                                    o.precision);
      o.precision = "bf16";
      o.given.insert("precision");
      if (std::string(half) == "fp16")
        o.notes.push_back("--fp16 trains in bf16 (--precision bf16): the same range as fp32, "
                          "so no loss scaling");
    }
  // A language-model micro-batch holds whole samples: round down, and say so.
  if (o.arch == "transformer_lm" && o.tokens_per_sample >= 2 &&
      o.max_tokens >= o.tokens_per_sample && o.max_tokens % o.tokens_per_sample != 0) {
    const int rounded = o.max_tokens / o.tokens_per_sample * o.tokens_per_sample;
    o.notes.push_back("--max-tokens " + std::to_string(o.max_tokens) +
                      " is not a multiple of --tokens-per-sample " +
                      std::to_string(o.tokens_per_sample) + ": rounded down to " +
                      std::to_string(rounded) + " (" +
                      std::to_string(rounded / o.tokens_per_sample) + " samples per rank)");
    o.max_tokens = rounded;
  }
  // The values the spellings above decided.
  o.values["device"] = o.device, o.values["precision"] = o.precision;
  o.values["max-tokens"] = std::to_string(o.max_tokens);
  *out = o;
  return true;
}

std::string version_string() {
  return std::string("pntrain 1.0 (C++17") + (cuda_built() ? ", CUDA" : "") + ")";
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string nearest_flag(const std::string& unknown) {
  Options o;
  const po::options_description all = describe(o);
  std::string best;
  // Scores in half edits: a flag that starts with the unknown one (a prefix, no longer guessed)
  // counts one and a half, so a one-letter typo of another flag still wins.
  size_t best_d = 2 * (std::max<size_t>(2, unknown.size() / 3) + 1);
  for (const auto& opt : all.options()) {
    const std::string name = opt->long_name();
    size_t d = 2 * edit_distance(unknown, name);
    if (name.rfind(unknown, 0) == 0 && unknown.size() >= 4) d = std::min<size_t>(d, 3);
    if (d < best_d) best_d = d, best = name;
  }
  return best;
}

namespace {
// The flags a checkpoint carries: the model, the task and the data they were built from.
struct ConfigFlag {
  const char* name;
  std::function<nlohmann::json(const Options&)> get;
  std::function<void(Options&, const nlohmann::json&)> set;
};
#define PN_FLAG(flag, field) \
  ConfigFlag { flag, [](const Options& o) { return nlohmann::json(o.field); }, \
               [](Options& o, const nlohmann::json& j) { j.get_to(o.field); } }
const std::vector<ConfigFlag>& config_flags() {
  static const std::vector<ConfigFlag> f = {
      PN_FLAG("arch", arch),
      PN_FLAG("data", data),
      PN_FLAG("tokens-per-sample", tokens_per_sample),
      PN_FLAG("decoder-layers", decoder_layers),
      PN_FLAG("decoder-embed-dim", decoder_embed_dim),
      PN_FLAG("decoder-attention-heads", decoder_attention_heads),
      PN_FLAG("decoder-ffn-embed-dim", decoder_ffn_embed_dim),
      PN_FLAG("norm-self", norm_self),
      PN_FLAG("norm-ff", norm_ff),
      PN_FLAG("norm-final", norm_final),
      PN_FLAG("norm-groups", norm_groups),
      PN_FLAG("norm-prescale-groups", norm_prescale_groups),
      PN_FLAG("norm-eps", norm_eps),
      PN_FLAG("source-lang", source_lang),
      PN_FLAG("target-lang", target_lang),
      PN_FLAG("train-subset", train_subset),
      PN_FLAG("share-all-embeddings", share_all_embeddings),
      PN_FLAG("encoder-layers", encoder_layers),
      PN_FLAG("encoder-embed-dim", encoder_embed_dim),
      PN_FLAG("encoder-attention-heads", encoder_attention_heads),
      PN_FLAG("encoder-ffn-embed-dim", encoder_ffn_embed_dim),
      PN_FLAG("encoder-norm-self", encoder_norm_self),
      PN_FLAG("encoder-norm-ff", encoder_norm_ff),
      PN_FLAG("encoder-norm-final", encoder_norm_final),
      PN_FLAG("decoder-norm-self", decoder_norm_self),
      PN_FLAG("decoder-norm-cross", decoder_norm_cross),
      PN_FLAG("decoder-norm-ff", decoder_norm_ff),
      PN_FLAG("decoder-norm-final", decoder_norm_final),
  };
  return f;
}
#undef PN_FLAG
}  // namespace

std::vector<std::pair<std::string, std::string>> model_config_flags(const Options& o) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const ConfigFlag& f : config_flags()) out.emplace_back(f.name, f.get(o).dump());
  return out;
}

void apply_checkpoint_flags(const std::vector<std::pair<std::string, std::string>>& stored,
                            const std::string& checkpoint, Options* o) {
  auto show = [](const nlohmann::json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); };
  for (const auto& [name, text] : stored) {
    const auto f = std::find_if(config_flags().begin(), config_flags().end(),
                                [&](const ConfigFlag& c) { return name == c.name; });
    if (f == config_flags().end()) continue;
    const nlohmann::json want = nlohmann::json::parse(text), have = f->get(*o);
    // A data directory may be given another way (a relative path, a copy); the vocabulary
    // fingerprint decides whether it is the same data.
    if (o->given.count(name) && have != want && name != std::string("data"))
      throw std::invalid_argument("--" + name + " " + show(have) + " disagrees with checkpoint '" +
                                  checkpoint + "' (trained with --" + name + " " + show(want) +
                                  "): drop the flag, or start a new run with another --save-dir");
    if (!o->given.count(name)) f->set(*o, want);
  }
}

std::map<std::string, std::string> checkpoint_flags(const std::map<std::string, std::string>& f) {
  std::map<std::string, std::string> kept = f;
  for (const char* path : {"save-dir", "metrics", "results-path", "restore-file"}) kept.erase(path);
  return kept;
}

void resume_flags(int argc, char** argv, const std::map<std::string, std::string>& stored,
                  const std::map<std::string, std::string>& stored_values,
                  const std::string& checkpoint, Options* o) {
  static const std::set<std::string> kNeverTaken = {
      "device", "cpu", "threads", "precision", "attention", "bf16", "fp16", "data", "eval-only",
      "sample",
      "config", "debug-fault"};
  std::string ini;
  std::vector<std::string> differ;
  for (const auto& [name, text] : stored) {
    if (kNeverTaken.count(name)) continue;
    if (!o->given.count(name)) {
      ini += name + " = " + text + "\n";
      continue;
    }
    if (name == "max-update" || name == "max-epoch") continue;  // a resume's usual extension
    const auto was = stored_values.find(name);
    const auto now = o->values.find(name);
    if (was != stored_values.end() && now != o->values.end() && was->second != now->second)
      differ.push_back("--" + name + " " + now->second + " (the checkpoint's run: " +
                       was->second + ")");
  }
  if (!ini.empty()) {
    std::string unused;
    std::vector<std::string> notes = o->notes;
    Options taken;
    parse_options(argc, argv, &taken, &unused, ini);
    *o = std::move(taken);
    o->notes = std::move(notes);
  }
  if (!differ.empty()) {
    std::string text;
    for (const std::string& d : differ) text += (text.empty() ? "" : ", ") + d;
    o->notes.push_back("resuming from '" + checkpoint + "' with flags other than its run's: " +
                       text + "; the flags given here apply");
  }
}

bool bf16_emulation_asked() {
  const char* v = std::getenv("PN_BF16_EMULATE");
  return v && std::string(v) == "1";
}

void validate_options(const Options& o) {
  auto fail = [](const std::string& m) { throw std::invalid_argument(m); };
  if (o.tokens_per_sample < 2) fail("--tokens-per-sample must be at least 2");
  if (o.max_tokens < o.tokens_per_sample)
    fail("--max-tokens " + std::to_string(o.max_tokens) + " is smaller than one sample (" +
         "--tokens-per-sample " + std::to_string(o.tokens_per_sample) +
         "): raise --max-tokens or lower --tokens-per-sample");
  if (o.update_freq < 1) fail("--update-freq must be at least 1");
  // Whole samples per group, whole groups per rank: every rank then runs the same number of
  // groups, which synchronized norms need to meet in every collective.
  if (o.stats_batch_tokens < 0 ||
      (o.stats_batch_tokens > 0 && (o.stats_batch_tokens % o.tokens_per_sample != 0 ||
                                    o.max_tokens % o.stats_batch_tokens != 0)))
    fail("--stats-batch-tokens " + std::to_string(o.stats_batch_tokens) + " must be 0 or a " +
         "multiple of --tokens-per-sample (" + std::to_string(o.tokens_per_sample) +
         ") that divides --max-tokens (" + std::to_string(o.max_tokens) + ")");
  if (o.decoder_layers < 0 || o.decoder_embed_dim < 1 || o.decoder_ffn_embed_dim < 1)
    fail("model sizes must be positive");
  if (o.decoder_attention_heads < 1 || o.decoder_embed_dim % o.decoder_attention_heads)
    fail("--decoder-attention-heads " + std::to_string(o.decoder_attention_heads) +
         " must divide --decoder-embed-dim " + std::to_string(o.decoder_embed_dim));
  if (o.dropout < 0 || o.dropout >= 1) fail("--dropout must be in [0, 1)");
  if (o.label_smoothing < 0 || o.label_smoothing >= 1) fail("--label-smoothing must be in [0, 1)");
  if (!(o.lr > 0)) fail("--lr must be positive");
  auto one_of = [&](const char* flag, const std::string& v, const std::vector<std::string>& c) {
    if (std::find(c.begin(), c.end(), v) == c.end())
      fail(std::string("--") + flag + " '" + v + "' is unknown: choose one of " + join(c));
  };
  one_of("lr-scheduler", o.lr_scheduler, kSchedulers);
  one_of("device", o.device, kDevices);
  one_of("precision", o.precision, kPrecisions);
  one_of("attention", o.attention, kAttentions);
  one_of("log-format", o.log_format, kLogFormats);
  one_of("optimizer", o.optimizer, kOptimizers);
  const bool on_cpu = o.device == "cpu" || o.device == "sim" ||
                      (o.device == "auto" && cuda_device_count() == 0);
  // bf16 on a CPU runs its GEMMs on the CPU's bf16 instructions (kernels/cpu/gemm_bf16.cpp).
  // Without AVX512_BF16 only bf16's numerics remain (operands rounded, fp32 sgemm), at fp32's
  // speed, so the flag is named before any work, unless PN_BF16_EMULATE=1 asks for the numerics.
  if (o.precision == "bf16" && on_cpu && !cpu_has("avx512_bf16") && !bf16_emulation_asked())
    fail("--precision bf16 (or --bf16/--fp16) on the CPU needs the AVX512_BF16 instructions, "
         "which " + cpu_model_name() + " lacks (no avx512_bf16 among the flags of "
         "/proc/cpuinfo): train in fp32 (drop the flag) or on a GPU; PN_BF16_EMULATE=1 runs "
         "bf16's numerics at fp32's speed");
  if (o.precision == "tf32" && on_cpu)
    fail("--precision tf32 needs a GPU's tensor cores: the CPU path has fp32 and bf16; drop the "
         "flag" + (o.device == "cpu" ? std::string(" or --cpu") : ""));
  if (o.lr_scheduler == "cosine") {
    if (o.min_lr > o.lr) fail("--min-lr must not exceed --lr (the peak) for cosine");
    if (o.t_mult <= 0) fail("--t-mult must be positive");
    if (o.lr_period_updates <= 0 && o.max_update - o.warmup_updates <= 0)
      fail("cosine needs --lr-period-updates or a --max-update above --warmup-updates");
  }
  if (o.lr_scheduler == "polynomial_decay" &&
      (o.total_num_update > 0 ? o.total_num_update : o.max_update) <= o.warmup_updates)
    fail("polynomial_decay needs --total-num-update (or --max-update) above --warmup-updates");
  if (o.save_interval < 0 || o.keep_last_epochs < 0)
    fail("--save-interval and --keep-last-epochs must be >= 0");
  if (o.max_update < 0) fail("--max-update must be >= 0");
  if (o.norm_eps <= 0) fail("--norm-eps must be positive");
  if (o.bucket_mb < 0) fail("--bucket-mb must be >= 0");
  if (o.sync_group_size < 0)
    fail("--sync-group-size must be >= 0 (0: one group of all ranks)");
  if (o.pn_variant != "paper" && o.pn_variant != "authors")
    fail("--pn-variant '" + o.pn_variant + "' is unknown: use paper or authors");
  if (o.pn_warmup_psi != "cumulative" && o.pn_warmup_psi != "ema")
    fail("--pn-warmup-psi '" + o.pn_warmup_psi + "' is unknown: use cumulative or ema");
  one_of("pn-eval-state", o.pn_eval_state, kEvalStates);
  one_of("arch", o.arch, kArchs);
  if (o.arch == "transformer") {
    if (o.encoder_embed_dim != o.decoder_embed_dim)
      fail("--encoder-embed-dim " + std::to_string(o.encoder_embed_dim) +
           " must equal --decoder-embed-dim " + std::to_string(o.decoder_embed_dim) +
           " (cross-attention maps one onto the other)");
    if (o.encoder_layers < 0 || o.encoder_ffn_embed_dim < 1) fail("model sizes must be positive");
    if (o.encoder_attention_heads < 1 || o.encoder_embed_dim % o.encoder_attention_heads)
      fail("--encoder-attention-heads " + std::to_string(o.encoder_attention_heads) +
           " must divide --encoder-embed-dim " + std::to_string(o.encoder_embed_dim));
    if (o.attention_dropout < 0 || o.attention_dropout >= 1)
      fail("--attention-dropout must be in [0, 1)");
    if (o.beam < 1) fail("--beam must be at least 1");
    if (o.stats_batch_tokens > 0)
      fail("--stats-batch-tokens is not supported with --arch transformer (padded batches)");
    if (o.data == "builtin")
      fail("--arch transformer needs --data DIR with <split>.<source-lang> and "
           "<split>.<target-lang> files");
    for (const std::string& n :
         {o.encoder_norm_self, o.encoder_norm_ff, o.encoder_norm_final, o.decoder_norm_self,
          o.decoder_norm_cross, o.decoder_norm_ff, o.decoder_norm_final})
      if (!is_norm_kind(n)) fail("unknown norm '" + n + "' (see --norm in pntrain --help)");
  }
  if (o.sample < 0 || o.max_len < 1 || o.temperature < 0 || o.top_k < 0)
    fail("--sample, --top-k and --temperature must be >= 0 and --max-len >= 1");
  if (o.sample > 0 && o.arch != "transformer_lm")
    fail("--sample needs a language model (--arch transformer_lm)");
  for (const std::string& n : {o.norm_self, o.norm_ff, o.norm_final})
    if (!is_norm_kind(n)) {
      std::string known;
      for (const auto& k : norm_kinds()) known += (known.empty() ? "" : ", ") + k;
      fail("unknown norm '" + n + "': choose one of " + known);
    }
}

NormOptions norm_options(const Options& o, const std::string& place) {
  NormOptions n;
  n.kind = place == "self" ? o.norm_self : place == "ff" ? o.norm_ff : o.norm_final;
  n.groups = o.norm_groups > 0 ? o.norm_groups : o.decoder_attention_heads;
  n.prescale_groups = o.norm_prescale_groups;
  n.eps = o.norm_eps;
  n.alpha = o.norm_alpha;
  n.alpha_fwd = o.pn_alpha_fwd;
  n.alpha_bkw = o.pn_alpha_bkw;
  n.pn_variant = o.pn_variant;
  n.pn_warmup_psi = o.pn_warmup_psi;
  // PN's t counts statistics batches: the default warmup spans warmup_updates updates.
  n.warmup = o.pn_warmup >= 0
                 ? o.pn_warmup
                 : int64_t(o.warmup_updates) * o.update_freq * stats_groups_per_micro_step(o);
  if (o.stats_batch_tokens > 0) {
    n.stats_rows = o.stats_batch_tokens;
    n.stats_groups = stats_groups_per_micro_step(o);
  }
  return n;
}

int stats_groups_per_micro_step(const Options& o) {
  if (o.stats_batch_tokens <= 0) return 1;
  return o.max_tokens / o.stats_batch_tokens;  // validate_options: it divides
}

int sync_group_ranks(const Options& o, int world_size) {
  return o.sync_group_size > 0 ? o.sync_group_size : world_size;
}

double statistics_batch_tokens(const Options& o, const std::string& norm_kind, int world_size) {
  const bool local = norm_kind == "batch" || norm_kind == "power_v" || norm_kind == "power";
  const bool synced = norm_kind.rfind("sync_", 0) == 0;
  if (!local && !synced) return 0;
  const double ranks = synced ? sync_group_ranks(o, world_size) : 1;
  return double(o.max_tokens) * ranks / stats_groups_per_micro_step(o);
}

}  // namespace pn
