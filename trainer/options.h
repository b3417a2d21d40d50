// Every pntrain option, declared once in trainer/flags.inc (its member, default, help, choices,
// group, and whether a checkpoint keeps it and a resume takes it); trainer/options.cpp makes the
// command line, INI config files (--config FILE; the command line wins over the file), --help
// and the checkpoint's stored flags of it.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "model/lm.h"
#include "trainer/schedule.h"

namespace pn {

// The values of the enumerated flags the code branches on, parsed once from their names (the
// flag's choices: choice_names, in the enum's order). LrScheduler: trainer/schedule.h;
// PnVariant and PnWarmupPsi: layers/norms/norm.h.
enum class Arch { transformer_lm, transformer };  // decoder-only LM | encoder-decoder
enum class EvalState { rank0, mean };             // --pn-eval-state
enum class LogFormat { simple, json, glog };
const std::vector<std::string>& choice_names(Arch);
const std::vector<std::string>& choice_names(EvalState);
const std::vector<std::string>& choice_names(LogFormat);
const std::vector<std::string>& choice_names(LrScheduler);
template <class E>
const std::string& name_of(E value) {
  return choice_names(value)[size_t(value)];
}

struct Options {
  // The flags' values, one member per row of trainer/flags.inc, with its default.
#define PN_FLAG(type, member, name, default_value, ...) type member = default_value;
#include "trainer/flags.inc"
#undef PN_FLAG
  std::set<std::string> given;    // flags given on the command line or in --config
  std::vector<std::string> notes; // messages of the parse for rank 0 to print (rounded values)
};

// Parses argv (and --config FILE). Returns false with `help` filled for --help. Throws
// std::invalid_argument with a message naming the culprit and the fix on bad input.
bool parse_options(int argc, char** argv, Options* out, std::string* help);
// The run's flags as a checkpoint stores them (model.bin's "options"): every flag's value as
// text ("0.003", "true", "sync_power"), defaults included, a flag without a default only when
// given, the data directory made absolute; not the paths of the run's outputs and input
// (--save-dir, --metrics, --results-path, --restore-file) nor --config, so that its bytes do not
// depend on where the run wrote.
std::map<std::string, std::string> checkpoint_options(const Options& o);
// The flags of a checkpoint's run from its header, in every form pntrain wrote: "options" alone,
// or (older) "flags" (the run's given flags), "options" and "config" (its model and data flags
// as JSON values), or "config" alone; empty for a header with none.
std::map<std::string, std::string> stored_flags(const nlohmann::json& header);
// A resume, --eval-only, --sample and pnexport take the flags of the run that wrote `checkpoint`
// (`stored`, from stored_flags) where this command line gives none (o->given), as flags.inc marks
// them: not where and how the ranks compute (--device, --cpu, --threads, --precision,
// --attention, --bf16, --fp16), the verbs (--eval-only, --sample, --debug-fault) and the paths.
// A model or data flag given with another value is refused naming both (std::invalid_argument;
// --data may be given as another path, the vocabulary decides); another training flag is applied
// with a note naming both (but --max-update and --max-epoch, which a resume usually extends).
// Unknown stored names are ignored (newer checkpoints). `which`: Model takes the model and data
// flags only (pnexport).
enum class TakeFlags { All, Model };
void take_checkpoint_flags(const std::map<std::string, std::string>& stored,
                           const std::string& checkpoint, Options* o,
                           TakeFlags which = TakeFlags::All);
// Checks values against each other (after parsing), throwing std::invalid_argument.
void validate_options(const Options& o);
// PN_BF16_EMULATE=1: bf16 on a CPU without AVX512_BF16, for its numerics (tests, checks).
bool bf16_emulation_asked();
// The version string of --version.
std::string version_string();
// Closest flag name to an unknown one ("" when none is near), for "did you mean".
std::string nearest_flag(const std::string& unknown);
// Norm options of one place ("self", "ff" or "final") from the flat options.
NormOptions norm_options(const Options& o, const std::string& kind);
// Statistics batches of a batch-type norm per rank and micro-step: 1, or the ghost groups.
int stats_groups_per_micro_step(const Options& o);
// PN's statistics batches (its t) per update: --update-freq x the ghost groups.
int64_t pn_batches_per_update(const Options& o);
// PN's warmup W in statistics batches: --pn-warmup N, or (-1) --warmup-updates' batches.
int64_t pn_warmup_batches(const Options& o);
// The updates after which PN is still in its warmup (t <= W): floor(W / batches per update).
int64_t pn_warmup_updates(const Options& o);
// How W was chosen, in words for the startup summary.
std::string pn_warmup_origin(const Options& o);
// Ranks whose statistics a synchronized norm shares: --sync-group-size, or the world size.
int sync_group_ranks(const Options& o, int world_size);
// Tokens in one statistics batch of the place's norm ("self", "ff", "final"), on average:
// --max-tokens per rank, times the ranks of a sync group for a synchronized norm, divided by
// the ghost groups (--stats-batch-tokens). 0 for norms without batch statistics.
double statistics_batch_tokens(const Options& o, const std::string& norm_kind, int world_size);

}  // namespace pn
