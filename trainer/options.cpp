#include "trainer/options.h"

#include <boost/program_options.hpp>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "layers/norms/norm.h"

namespace po = boost::program_options;

namespace pn {

namespace {

po::options_description describe(Options& o) {
  po::options_description data("Data");
  data.add_options()
    ("data", po::value(&o.data)->default_value(o.data),
     "corpus directory holding train/valid/test (train.txt, ptb.train.txt or wiki.train.tokens "
     "names, or fairseq-preprocess output: dict.txt and <split>.bin/.idx), or 'builtin' for the "
     "generated corpus embedded in pntrain")
    ("tokens-per-sample", po::value(&o.tokens_per_sample)->default_value(o.tokens_per_sample),
     "tokens per sample (sequence length)")
    ("max-tokens", po::value(&o.max_tokens)->default_value(o.max_tokens),
     "tokens per rank per micro-step (a multiple of --tokens-per-sample)")
    ("update-freq", po::value(&o.update_freq)->default_value(o.update_freq),
     "micro-steps accumulated per update")
    ("seed", po::value(&o.seed)->default_value(o.seed), "seed of data order, init and dropout");

  po::options_description model("Model");
  model.add_options()
    ("decoder-layers", po::value(&o.decoder_layers)->default_value(o.decoder_layers), "blocks")
    ("decoder-embed-dim", po::value(&o.decoder_embed_dim)->default_value(o.decoder_embed_dim),
     "model dimension d")
    ("decoder-attention-heads",
     po::value(&o.decoder_attention_heads)->default_value(o.decoder_attention_heads),
     "attention heads")
    ("decoder-ffn-embed-dim",
     po::value(&o.decoder_ffn_embed_dim)->default_value(o.decoder_ffn_embed_dim),
     "feed-forward hidden dimension")
    ("dropout", po::value(&o.dropout)->default_value(o.dropout),
     "dropout after attention and feed-forward")
    ("norm", po::value(&o.norm), "norm of every place (overrides --norm-self/-ff/-final)")
    ("norm-self", po::value(&o.norm_self)->default_value(o.norm_self), "norm before attention")
    ("norm-ff", po::value(&o.norm_ff)->default_value(o.norm_ff), "norm before feed-forward")
    ("norm-final", po::value(&o.norm_final)->default_value(o.norm_final), "final norm")
    ("norm-groups", po::value(&o.norm_groups)->default_value(o.norm_groups),
     "groups of the 'group' norm (0: the number of attention heads)")
    ("norm-prescale-groups",
     po::value(&o.norm_prescale_groups)->default_value(o.norm_prescale_groups),
     "pre-scaling groups before batch-type norms (0: off)")
    ("norm-eps", po::value(&o.norm_eps)->default_value(o.norm_eps), "eps inside square roots")
    ("norm-alpha", po::value(&o.norm_alpha)->default_value(o.norm_alpha),
     "running-statistics momentum of batch and power_v")
    ("pn-alpha-fwd", po::value(&o.pn_alpha_fwd)->default_value(o.pn_alpha_fwd),
     "PN forward momentum")
    ("pn-alpha-bkw", po::value(&o.pn_alpha_bkw)->default_value(o.pn_alpha_bkw),
     "PN backward momentum")
    ("pn-warmup", po::value(&o.pn_warmup)->default_value(o.pn_warmup),
     "PN warmup iterations (-1: warmup-updates * statistics batches per update)")
    ("stats-batch-tokens",
     po::value(&o.stats_batch_tokens)->default_value(o.stats_batch_tokens),
     "ghost statistics: batch-type norms take their statistics (and update their running "
     "state) over groups of this many tokens of a rank's micro-batch, as K-token gradient "
     "accumulation would, in one large micro-batch (a multiple of --tokens-per-sample; "
     "0: the whole micro-batch)");

  po::options_description optim("Optimisation");
  optim.add_options()
    ("lr", po::value(&o.lr)->default_value(o.lr), "peak learning rate")
    ("lr-scheduler", po::value(&o.lr_scheduler)->default_value(o.lr_scheduler),
     "inverse_sqrt or fixed")
    ("warmup-updates", po::value(&o.warmup_updates)->default_value(o.warmup_updates),
     "linear warmup updates")
    ("warmup-init-lr", po::value(&o.warmup_init_lr)->default_value(o.warmup_init_lr),
     "learning rate at update 0 of the warmup")
    ("adam-betas-1", po::value(&o.adam_beta1)->default_value(o.adam_beta1), "Adam beta1")
    ("adam-betas-2", po::value(&o.adam_beta2)->default_value(o.adam_beta2), "Adam beta2")
    ("adam-eps", po::value(&o.adam_eps)->default_value(o.adam_eps), "Adam epsilon")
    ("weight-decay", po::value(&o.weight_decay)->default_value(o.weight_decay),
     "decoupled weight decay")
    ("clip-norm", po::value(&o.clip_norm)->default_value(o.clip_norm),
     "clip the gradient norm (0: off)")
    ("label-smoothing", po::value(&o.label_smoothing)->default_value(o.label_smoothing),
     "label smoothing epsilon")
    ("max-update", po::value(&o.max_update)->default_value(o.max_update), "updates to train")
    ("max-epoch", po::value(&o.max_epoch)->default_value(o.max_epoch),
     "stop after this many epochs (0: no limit)");

  po::options_description run("Evaluation, logging and output");
  run.add_options()
    ("validate-interval-updates",
     po::value(&o.validate_interval_updates)->default_value(o.validate_interval_updates),
     "validate every N updates (and at the end)")
    ("log-interval", po::value(&o.log_interval)->default_value(o.log_interval),
     "progress line every N updates")
    ("metrics", po::value(&o.metrics), "write one JSON object per update/validation to FILE")
    ("probe-norm-stats", po::value(&o.probe_norm_stats),
     "add batch-vs-running statistic distances and gradient-part norms of these norm layers to "
     "the metrics: 'all', or block indices like '0' or '0,3' (and/or 'final')")
    ("save-dir", po::value(&o.save_dir), "directory for checkpoints (none: no checkpoints)")
    ("save-interval-updates",
     po::value(&o.save_interval_updates)->default_value(o.save_interval_updates),
     "save every N updates (0: at the end only)")
    ("keep-last", po::value(&o.keep_last)->default_value(o.keep_last),
     "keep the newest N checkpoints (0: all)")
    ("restore-file", po::value(&o.restore_file),
     "checkpoint directory to resume from (default: the last one in --save-dir)")
    ("threads", po::value(&o.threads)->default_value(o.threads),
     "threads per rank (0: the node's cores divided by its ranks)");

  po::options_description dist("Distributed training, guards and evaluation");
  dist.add_options()
    ("bucket-mb", po::value(&o.bucket_mb)->default_value(o.bucket_mb),
     "gradient all-reduce bucket size in MB, reduced as the backward finishes with it "
     "(0: one blocking all-reduce after the backward)")
    ("log-timing", po::bool_switch(&o.log_timing),
     "print the per-update time split (forward, backward, statistics and gradient all-reduce)")
    ("consistency-interval",
     po::value(&o.consistency_interval)->default_value(o.consistency_interval),
     "every N updates ranks compare parameter checksums (0: off)")
    ("max-bad-updates", po::value(&o.max_bad_updates)->default_value(o.max_bad_updates),
     "NaN/Inf updates skipped in a row before the job stops")
    ("comm-timeout", po::value(&o.comm_timeout)->default_value(o.comm_timeout),
     "seconds a rank may make no progress (or wait in a collective) before the job stops")
    ("debug-fault", po::value(&o.debug_fault),
     "test hook: nan@U (NaN loss at update U), exit@U:R, hang@U:R, perturb@U:R (rank R)")
    ("eval-only", po::bool_switch(&o.eval_only),
     "evaluate the checkpoint (--restore-file or the last in --save-dir) on valid and test")
    ("patience", po::value(&o.patience)->default_value(o.patience),
     "stop after N validations without improvement (0: off)")
    ("pn-eval-state", po::value(&o.pn_eval_state)->default_value(o.pn_eval_state),
     "rank-local norm state used for evaluation: rank0 or mean (over ranks)");

  po::options_description mt("Translation (--arch transformer; sizes of the decoder: --decoder-*)");
  mt.add_options()
    ("arch", po::value(&o.arch)->default_value(o.arch),
     "transformer_lm (decoder-only LM) or transformer (encoder-decoder translation)")
    ("source-lang", po::value(&o.source_lang)->default_value(o.source_lang),
     "source language: files <split>.<source-lang> in --data")
    ("target-lang", po::value(&o.target_lang)->default_value(o.target_lang), "target language")
    ("train-subset", po::value(&o.train_subset)->default_value(o.train_subset),
     "split to train on (e.g. valid when only valid and test exist)")
    ("valid-subset", po::value(&o.valid_subset)->default_value(o.valid_subset),
     "split for validation loss")
    ("gen-subset", po::value(&o.gen_subset)->default_value(o.gen_subset),
     "split to translate and score with BLEU under --eval-only")
    ("share-all-embeddings", po::bool_switch(&o.share_all_embeddings),
     "one joint vocabulary from both sides of train; encoder, decoder and output share it")
    ("encoder-layers", po::value(&o.encoder_layers)->default_value(o.encoder_layers),
     "encoder blocks")
    ("encoder-embed-dim", po::value(&o.encoder_embed_dim)->default_value(o.encoder_embed_dim),
     "encoder dimension (must equal --decoder-embed-dim)")
    ("encoder-attention-heads",
     po::value(&o.encoder_attention_heads)->default_value(o.encoder_attention_heads),
     "encoder attention heads")
    ("encoder-ffn-embed-dim",
     po::value(&o.encoder_ffn_embed_dim)->default_value(o.encoder_ffn_embed_dim),
     "encoder feed-forward hidden dimension")
    ("attention-dropout", po::value(&o.attention_dropout)->default_value(o.attention_dropout),
     "dropout on attention probabilities")
    ("encoder-norm-self", po::value(&o.encoder_norm_self)->default_value(o.encoder_norm_self),
     "encoder norm before self-attention")
    ("encoder-norm-ff", po::value(&o.encoder_norm_ff)->default_value(o.encoder_norm_ff),
     "encoder norm before feed-forward")
    ("encoder-norm-final", po::value(&o.encoder_norm_final)->default_value(o.encoder_norm_final),
     "norm after the last encoder block")
    ("decoder-norm-self", po::value(&o.decoder_norm_self)->default_value(o.decoder_norm_self),
     "decoder norm before self-attention")
    ("decoder-norm-cross",
     po::value(&o.decoder_norm_cross)->default_value(o.decoder_norm_cross),
     "decoder norm before cross-attention")
    ("decoder-norm-ff", po::value(&o.decoder_norm_ff)->default_value(o.decoder_norm_ff),
     "decoder norm before feed-forward")
    ("decoder-norm-final", po::value(&o.decoder_norm_final)->default_value(o.decoder_norm_final),
     "norm after the last decoder block")
    ("beam", po::value(&o.beam)->default_value(o.beam), "beam size of --eval-only generation")
    ("lenpen", po::value(&o.lenpen)->default_value(o.lenpen),
     "length penalty: hypotheses rank by log-prob sum / length^lenpen")
    ("max-len-a", po::value(&o.max_len_a)->default_value(o.max_len_a),
     "generate at most a * source length + b tokens")
    ("max-len-b", po::value(&o.max_len_b)->default_value(o.max_len_b), "see --max-len-a")
    ("remove-bpe", po::value(&o.remove_bpe)->implicit_value("@@ "),
     "remove BPE continuation markers (default '@@ ') from hypotheses and references")
    ("bleu-lowercase", po::bool_switch(&o.bleu_lowercase), "case-insensitive BLEU")
    ("gen-max-sentences", po::value(&o.gen_max_sentences)->default_value(o.gen_max_sentences),
     "translate only the first N sentences of --gen-subset (0: all)")
    ("results-path", po::value(&o.results_path),
     "write the hypotheses to this file (one line per sentence; .r<rank> per rank)");

  po::options_description gen("Text from a language model (with --restore-file)");
  gen.add_options()
    ("sample", po::value(&o.sample)->default_value(o.sample),
     "print N samples from the checkpoint's LM instead of training (seeded by --seed)")
    ("prompt", po::value(&o.prompt), "words the samples continue (default: a sentence start)")
    ("temperature", po::value(&o.temperature)->default_value(o.temperature),
     "softmax temperature of the draws (0: always the most likely token)")
    ("top-k", po::value(&o.top_k)->default_value(o.top_k),
     "draw among the k most likely tokens only (0: the whole vocabulary)")
    ("max-len", po::value(&o.max_len)->default_value(o.max_len),
     "generated tokens per sample at most (a sample also ends at <eos>)");

  po::options_description all;
  all.add(data).add(model).add(optim).add(run).add(dist).add(mt).add(gen);
  return all;
}

}  // namespace

bool parse_options(int argc, char** argv, Options* out, std::string* help) {
  Options o;
  po::options_description file_opts = describe(o);
  po::options_description cmdline("pntrain: data-parallel Transformer LM training with "
                                  "LayerNorm, BatchNorm and PowerNorm\n\nUsage: [mpirun -np R] "
                                  "pntrain [--config FILE] [options]\n\nGeneral");
  cmdline.add_options()("help,h", "print this help")(
      "config", po::value(&o.config), "INI file of options (the command line wins)");
  cmdline.add(file_opts);
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, cmdline), vm);
    if (vm.count("help")) {
      std::ostringstream ss;
      ss << cmdline;
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
        po::store(po::parse_config_file(in, file_opts), vm);
      } catch (const po::error& e) {
        throw std::invalid_argument("in config file '" + path + "': " + e.what() +
                                    " (see pntrain --help for the option names and types)");
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw std::invalid_argument(std::string(e.what()) + " (see pntrain --help)");
  }
  // --norm sets every place; a place named explicitly (--norm-final ...) keeps its own.
  if (!o.norm.empty()) {
    if (vm["norm-self"].defaulted()) o.norm_self = o.norm;
    if (vm["norm-ff"].defaulted()) o.norm_ff = o.norm;
    if (vm["norm-final"].defaulted()) o.norm_final = o.norm;
    for (auto [flag, place] : {std::pair<const char*, std::string*>{"encoder-norm-self",
                                                                   &o.encoder_norm_self},
                               {"encoder-norm-ff", &o.encoder_norm_ff},
                               {"encoder-norm-final", &o.encoder_norm_final},
                               {"decoder-norm-self", &o.decoder_norm_self},
                               {"decoder-norm-cross", &o.decoder_norm_cross},
                               {"decoder-norm-ff", &o.decoder_norm_ff},
                               {"decoder-norm-final", &o.decoder_norm_final}})
      if (vm[flag].defaulted()) *place = o.norm;
  }
  *out = o;
  return true;
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
  if (o.lr_scheduler != "inverse_sqrt" && o.lr_scheduler != "fixed")
    fail("--lr-scheduler '" + o.lr_scheduler + "' is unknown: use inverse_sqrt or fixed");
  if (o.max_update < 0) fail("--max-update must be >= 0");
  if (o.norm_eps <= 0) fail("--norm-eps must be positive");
  if (o.bucket_mb < 0) fail("--bucket-mb must be >= 0");
  if (o.pn_eval_state != "rank0" && o.pn_eval_state != "mean")
    fail("--pn-eval-state '" + o.pn_eval_state + "' is unknown: use rank0 or mean");
  if (o.arch != "transformer_lm" && o.arch != "transformer")
    fail("--arch '" + o.arch + "' is unknown: use transformer_lm or transformer");
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

}  // namespace pn
