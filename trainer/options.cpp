// The flags of trainer/flags.inc, made into the command line, config files, --help, the checks of
// their choices, what a checkpoint stores of a run and what a resume takes back.
#include "trainer/options.h"

#include <boost/program_options.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <variant>

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
std::string as_text(const std::string& v) { return v; }
std::string as_text(bool v) { return v ? "true" : "false"; }
template <class T>
std::string as_text(const T& v) {
  if constexpr (std::is_enum_v<T>) return name_of(v);
  else return std::to_string(v);
}
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ") {
  std::string out;
  for (const auto& k : items) out += (out.empty() ? "" : sep) + k;
  return out;
}

// The columns of flags.inc.
enum class HowKind { Value, Bare, Switch, Implicit };
struct How {
  HowKind kind;
  const char* implicit;  // Implicit: the value of the flag given alone
};
constexpr How Value{HowKind::Value, nullptr}, Bare{HowKind::Bare, nullptr},
    Switch{HowKind::Switch, nullptr};
constexpr How Implicit(const char* value) { return {HowKind::Implicit, value}; }
enum class Group { General, Data, Model, Optim, Run, Dist, Translation, Paper, Fairseq, Sample };
const char* group_title(Group g) {
  switch (g) {
    case Group::General: return "General";
    case Group::Data: return "Data";
    case Group::Model: return "Model";
    case Group::Optim: return "Optimisation";
    case Group::Run: return "Evaluation, logging and output";
    case Group::Dist: return "Distributed training, guards and evaluation";
    case Group::Translation: return "Translation (--arch transformer; sizes of the decoder: --decoder-*)";
    case Group::Paper: return "Reproduction of the paper";
    case Group::Fairseq: return "fairseq's flags, schedules and devices";
    case Group::Sample: return "Text from a language model (with --restore-file)";
  }
  return "";
}
enum class Keep { Kept, Path };
enum class Resume { Taken, Extended, Model, Never };
// The values an enumerated flag takes. `listed`: --help appends "(choices: ...)" (a help text
// that explains each choice in its words does not).
struct Choices {
  const std::vector<std::string>& (*names)();
  bool listed;
};
#define PN_CHOICES(id, listed, ...)                                       \
  const std::vector<std::string>& id##_names() {                          \
    static const std::vector<std::string> v = {__VA_ARGS__};              \
    return v;                                                             \
  }                                                                       \
  constexpr Choices id{id##_names, listed};
PN_CHOICES(kDevices, true, "auto", "cpu", "cuda")
PN_CHOICES(kPrecisions, true, "fp32", "tf32", "bf16")
PN_CHOICES(kAttentions, true, "fused", "cudnn", "materialized")
PN_CHOICES(kOptimizers, true, "adam")
PN_CHOICES(kOnOff, true, "on", "off")
#undef PN_CHOICES
// The choices of a flag of an enum type: the enum's names.
template <class E>
const std::vector<std::string>& names_of() {
  return choice_names(E{});
}
constexpr Choices kSchedulers{names_of<LrScheduler>, true}, kArchs{names_of<Arch>, true},
    kEvalStates{names_of<EvalState>, true}, kLogFormats{names_of<LogFormat>, true},
    kPnVariants{names_of<PnVariant>, false}, kPnWarmupPsi{names_of<PnWarmupPsi>, false};
constexpr Choices kNorms{norm_kinds, true}, kNone{nullptr, false};

using Member = std::variant<std::string Options::*, int Options::*, double Options::*,
                            int64_t Options::*, uint64_t Options::*, bool Options::*,
                            Arch Options::*, EvalState Options::*, LogFormat Options::*,
                            LrScheduler Options::*, PnVariant Options::*, PnWarmupPsi Options::*>;
struct FlagSpec {
  const char* name;
  Member member;
  How how;
  Group group;
  Keep kept;
  Resume resumed;
  const Choices* choices;
  const char* help;
};

const std::vector<FlagSpec>& flag_table() {
  static const std::vector<FlagSpec> table = {
#define PN_FLAG(type, member, name, default_value, how, group, kept, resumed, choices, help) \
  FlagSpec{name, &Options::member, how, Group::group, Keep::kept, Resume::resumed, &choices, help},
#include "trainer/flags.inc"
#undef PN_FLAG
  };
  return table;
}
const FlagSpec* find_flag(const std::string& name) {
  for (const FlagSpec& f : flag_table())
    if (name == f.name) return &f;
  return nullptr;
}

// A flag's value in o as text ("0.1", "true", "sync_power").
std::string value_text(const FlagSpec& f, const Options& o) {
  return std::visit([&](auto m) { return as_text(o.*m); }, f.member);
}
// Sets a flag's member from its text, as value_text writes it. Throws std::invalid_argument.
void set_from_text(const FlagSpec& f, const std::string& text, Options* o) {
  std::visit(
      [&](auto m) {
        using T = std::decay_t<decltype(o->*m)>;
        if constexpr (std::is_same_v<T, std::string>) {
          o->*m = text;
        } else if constexpr (std::is_enum_v<T>) {
          const std::vector<std::string>& names = choice_names(T{});
          const auto it = std::find(names.begin(), names.end(), text);
          if (it == names.end())
            throw std::invalid_argument("--" + std::string(f.name) + " '" + text +
                                        "' is unknown: choose one of " + join(names));
          o->*m = T(it - names.begin());
        } else if constexpr (std::is_same_v<T, bool>) {
          if (text != "true" && text != "false" && text != "1" && text != "0")
            throw std::invalid_argument("--" + std::string(f.name) + " '" + text +
                                        "' is not true or false");
          o->*m = text == "true" || text == "1";
        } else {
          std::istringstream in(text);
          T v{};
          std::string rest;
          if (!(in >> v) || (in >> rest))
            throw std::invalid_argument("--" + std::string(f.name) + " '" + text +
                                        "' is not a number");
          o->*m = v;
        }
      },
      f.member);
}

// The places --norm sets: every other flag whose choices are the norm kinds.
std::vector<const FlagSpec*> norm_places() {
  std::vector<const FlagSpec*> out;
  for (const FlagSpec& f : flag_table())
    if (f.choices == &kNorms && std::string(f.name) != "norm") out.push_back(&f);
  return out;
}

// Help texts with their choices; Boost copies them, the deque keeps them for the call.
const char* help_text(const FlagSpec& f) {
  if (!f.choices->names || !f.choices->listed) return f.help;
  static std::deque<std::string> texts;
  texts.push_back(std::string(f.help) + " (choices: " + join(f.choices->names()) + ")");
  return texts.back().c_str();
}

// One flag of the table as Boost declares it, bound to its member of o.
void declare(const FlagSpec& f, Options& o, po::options_description* into) {
  std::visit(
      [&](auto m) {
        using T = std::decay_t<decltype(o.*m)>;
        T* p = &(o.*m);
        const po::value_semantic* v = nullptr;
        switch (f.how.kind) {
          case HowKind::Value:
            // An enum's name is parsed after Boost (parse_enums), with the choices' message.
            if constexpr (std::is_enum_v<T>)
              v = po::value<std::string>()->default_value(name_of(*p));
            else
              v = po::value(p)->default_value(*p, as_text(*p));
            break;
          case HowKind::Bare:
            if constexpr (!std::is_enum_v<T>) v = po::value(p);
            break;
          case HowKind::Switch:
            if constexpr (std::is_same_v<T, bool>) v = po::bool_switch(p);
            break;
          case HowKind::Implicit:
            if constexpr (std::is_same_v<T, std::string>)
              v = po::value(p)->implicit_value(f.how.implicit);
            break;
        }
        if (!v) throw std::logic_error(std::string("flags.inc: --") + f.name + " has no value");
        into->add_options()(f.name, v, help_text(f));
      },
      f.member);
}
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

// The norms' section of --help: each norm with its paper's name and the norm flags it reads.
std::string norms_help() {
  std::string out = "\nNorms (--norm; pntrain --list-norms gives the table):\n";
  for (const NormInfo& n : norm_registry()) {
    std::string line = "  " + n.name;
    line.resize(std::max<size_t>(line.size() + 1, 16), ' ');
    line += n.paper;
    if (!n.flags.empty()) line += "; --" + join(n.flags, ", --");
    out += line + "\n";
  }
  return out;
}

// The flags of one group of --help, in the order of flags.inc.
void describe(Options& o, Group only, po::options_description* into) {
  for (const FlagSpec& f : flag_table())
    if (f.group == only) declare(f, o, into);
}
// Every flag a config file takes: the groups of --help in order, all but General.
po::options_description describe(Options& o) {
  po::options_description all;
  for (Group g : {Group::Data, Group::Model, Group::Optim, Group::Run, Group::Dist,
                  Group::Translation, Group::Paper, Group::Fairseq, Group::Sample}) {
    po::options_description group(group_title(g));
    describe(o, g, &group);
    all.add(group);
  }
  return all;
}

// The flags of an enum type from their names in vm (declare() leaves them to this).
void parse_enums(const po::variables_map& vm, Options* o) {
  for (const FlagSpec& f : flag_table())
    std::visit(
        [&](auto m) {
          using T = std::decay_t<decltype(o->*m)>;
          if constexpr (std::is_enum_v<T>)
            if (vm.count(f.name)) set_from_text(f, vm[f.name].as<std::string>(), o);
        },
        f.member);
}

// fairseq's spelling of Adam's betas, "(0.9, 0.98)", into adam_beta1 and adam_beta2.
void apply_adam_betas(Options* o) {
  if (o->adam_betas.empty()) return;
  std::string t = o->adam_betas;
  for (char& c : t)
    if (c == '(' || c == ')' || c == '[' || c == ']' || c == ',') c = ' ';
  std::istringstream in(t);
  double b1, b2;
  std::string rest;
  if (!(in >> b1 >> b2) || (in >> rest))
    throw std::invalid_argument("--adam-betas '" + o->adam_betas +
                                "' is not two numbers: write it as '(0.9, 0.98)'");
  o->adam_beta1 = b1, o->adam_beta2 = b2;
}

}  // namespace

bool parse_options(int argc, char** argv, Options* out, std::string* help) {
  Options o;
  po::options_description file_opts = describe(o);
  po::options_description cmdline("pntrain: data-parallel Transformer training with "
                                  "LayerNorm, BatchNorm and PowerNorm\n\nUsage: [mpirun -np R] "
                                  "pntrain [--config FILE] [options]\n\nGeneral");
  cmdline.add_options()("help,h", "print this help")("version", "print the version")(
      "list-norms", "print the norms, one JSON object a line (name, paper, statistic, "
                    "synchronized, state, flags, params), and exit");
  describe(o, Group::General, &cmdline);
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
    for (const po::option& op : parsed.options) on_command_line.insert(op.string_key);
    if (vm.count("help") || vm.count("version") || vm.count("list-norms")) {
      std::ostringstream ss;
      if (vm.count("help")) ss << cmdline << norms_help();
      else if (vm.count("list-norms")) ss << norm_registry_json();
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
        po::store(in_file, vm);  // the command line wins: store keeps the first value
      } catch (const po::unknown_option& e) {
        // The line of the unknown key, for the message (boost names the key, not its line).
        std::ifstream again(path);
        int number = 0, at = 0;
        for (std::string line; std::getline(again, line) && at == 0;) {
          ++number;
          const std::string key = line.substr(0, line.find('='));
          const size_t b = key.find_first_not_of(" \t"), e2 = key.find_last_not_of(" \t");
          if (b != std::string::npos && line.find('=') != std::string::npos &&
              key.substr(b, e2 - b + 1) == e.get_option_name())
            at = number;
        }
        throw std::invalid_argument("in config file '" + path + "'" +
                                    (at ? ", line " + std::to_string(at) : std::string()) +
                                    ": " + unknown_flag_message(e.get_option_name()));
      } catch (const po::error& e) {
        throw std::invalid_argument("in config file '" + path + "': " + e.what() +
                                    " (see pntrain --help for the option names and types)");
      }
    }
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    throw std::invalid_argument(unknown_flag_message(e.get_option_name()));
  } catch (const po::error& e) {
    throw std::invalid_argument(std::string(e.what()) + " (see pntrain --help)");
  }
  for (const auto& [name, value] : vm)
    if (!value.defaulted()) o.given.insert(name);
  parse_enums(vm, &o);
  // --norm sets every place; a place named explicitly (--norm-final ...) keeps its own, unless
  // --norm is on the command line and the place only in --config (the command line wins).
  if (!o.norm.empty())
    for (const FlagSpec* place : norm_places())
      if (vm[place->name].defaulted() ||
          (on_command_line.count("norm") && !on_command_line.count(place->name))) {
        set_from_text(*place, o.norm, &o);
        o.given.insert(place->name);
      }
  // fairseq's spellings.
  apply_adam_betas(&o);
  if (o.cpu) {
    if (o.given.count("device") && o.device != "cpu")
      throw std::invalid_argument("--cpu contradicts --device " + o.device);
    o.device = "cpu";
  }
  for (auto [half, on] : {std::pair<const char*, bool>{"bf16", o.bf16}, {"fp16", o.fp16}})
    if (on) {
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
  if (o.arch == Arch::transformer_lm && o.tokens_per_sample >= 2 &&
      o.max_tokens >= o.tokens_per_sample && o.max_tokens % o.tokens_per_sample != 0) {
    const int rounded = o.max_tokens / o.tokens_per_sample * o.tokens_per_sample;
    o.notes.push_back("--max-tokens " + std::to_string(o.max_tokens) +
                      " is not a multiple of --tokens-per-sample " +
                      std::to_string(o.tokens_per_sample) + ": rounded down to " +
                      std::to_string(rounded) + " (" +
                      std::to_string(rounded / o.tokens_per_sample) + " samples per rank)");
    o.max_tokens = rounded;
  }
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

std::string nearest_flag(const std::string& typed) {
  // The names a fairseq (or PyTorch) user types for a flag of another name; '_' as in
  // fairseq's hydra configs.
  static const std::map<std::string, std::string> aliases = {
      {"learning-rate", "lr"}, {"lr-rate", "lr"}, {"batch-size", "max-tokens"},
      {"max-updates", "max-update"}, {"max-epochs", "max-epoch"}, {"warmup", "warmup-updates"},
      {"warmup-steps", "warmup-updates"}, {"num-layers", "decoder-layers"},
      {"layers", "decoder-layers"}, {"embed-dim", "decoder-embed-dim"},
      {"heads", "decoder-attention-heads"}, {"clip-grad", "clip-norm"}, {"epochs", "max-epoch"}};
  std::string unknown = typed;
  std::replace(unknown.begin(), unknown.end(), '_', '-');
  if (const auto a = aliases.find(unknown); a != aliases.end()) return a->second;
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


const std::vector<std::string>& choice_names(Arch) {
  static const std::vector<std::string> names = {"transformer_lm", "transformer"};
  return names;
}
const std::vector<std::string>& choice_names(EvalState) {
  static const std::vector<std::string> names = {"rank0", "mean"};
  return names;
}
const std::vector<std::string>& choice_names(LogFormat) {
  static const std::vector<std::string> names = {"simple", "json", "glog"};
  return names;
}
const std::vector<std::string>& choice_names(LrScheduler) {
  static const std::vector<std::string> names = {"inverse_sqrt", "fixed", "cosine",
                                                 "polynomial_decay"};
  return names;
}

std::map<std::string, std::string> checkpoint_options(const Options& o) {
  std::map<std::string, std::string> out;
  for (const FlagSpec& f : flag_table()) {
    if (f.kept == Keep::Path) continue;
    const std::string text = value_text(f, o);
    const bool has_default = f.how.kind == HowKind::Value || f.how.kind == HowKind::Switch;
    if (has_default || o.given.count(f.name) || !text.empty()) out[f.name] = text;
  }
  // An absolute data path serves a resume or --eval-only from any directory.
  if (o.data != "builtin")
    out["data"] = std::filesystem::absolute(o.data).lexically_normal().string();
  return out;
}

std::map<std::string, std::string> stored_flags(const nlohmann::json& header) {
  using Flags = std::map<std::string, std::string>;
  const Flags options = header.value("options", Flags{});
  Flags out;
  if (!header.contains("flags")) {
    out = options;
  } else {
    // Written before the options were the one form: the flags the run was given, each with the
    // value it took (its options' text), ...
    for (const auto& [name, text] : header["flags"].get<Flags>()) {
      const auto it = options.find(name);
      out[name] = it != options.end() ? it->second : text;
    }
  }
  // ... and its model and data flags (the data path absolute) as JSON values.
  if (header.contains("config") && header["config"].is_object())
    for (const auto& [name, value] : header["config"].items())
      out[name] = value.is_string() ? value.get<std::string>() : value.dump();
  return out;
}

void take_checkpoint_flags(const std::map<std::string, std::string>& stored,
                           const std::string& checkpoint, Options* o, TakeFlags which) {
  std::string differ;
  bool betas_taken = false;
  for (const auto& [name, text] : stored) {
    const FlagSpec* f = find_flag(name);
    if (!f || f->kept == Keep::Path || f->resumed == Resume::Never) continue;  // f null: newer
    if (which == TakeFlags::Model && f->resumed != Resume::Model) continue;
    if (!o->given.count(name)) {
      set_from_text(*f, text, o);
      betas_taken = betas_taken || name == "adam-betas";
      continue;
    }
    const std::string now = value_text(*f, *o);
    if (now == text) continue;
    // A data directory may be given another way (a relative path, a copy); the vocabulary
    // fingerprint decides whether it is the same data.
    if (f->resumed == Resume::Model && name != "data")
      throw std::invalid_argument("--" + name + " " + now + " disagrees with checkpoint '" +
                                  checkpoint + "' (trained with --" + name + " " + text +
                                  "): drop the flag, or start a new run with another --save-dir");
    if (f->resumed == Resume::Taken)
      differ += (differ.empty() ? "" : ", ") + ("--" + name + " " + now +
                                                " (the checkpoint's run: " + text + ")");
  }
  if (betas_taken) apply_adam_betas(o);
  // Sampling trains nothing: the training flags it gives (--max-len, --seed) are no resume's.
  if (!differ.empty() && o->sample == 0)
    o->notes.push_back("resuming from '" + checkpoint + "' with flags other than its run's: " +
                       differ + "; the flags given here apply");
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
  if (o.vocab_size < 0 || (o.vocab_size > 0 && o.vocab_size < 4) || o.vocab_min_count < 0)
    fail("--vocab-size must be 0 (all words) or at least 4 (<pad>, <eos>, <unk> and a word), "
         "--vocab-min-count at least 0");
  if ((o.vocab_size > 0 || o.vocab_min_count > 0) &&
      (o.arch == Arch::transformer || o.data == "builtin"))
    fail("--vocab-size and --vocab-min-count build a text corpus's vocabulary: they take no "
         "effect with --arch transformer or --data builtin; drop them");
  if (o.pn_warmup < -1)
    fail("--pn-warmup " + std::to_string(o.pn_warmup) + " must be a number of statistics "
         "batches (0: none) or -1 (--warmup-updates' batches)");
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
  // The values of every enumerated flag (the norm places below, with their own messages).
  for (const FlagSpec& f : flag_table()) {
    if (!f.choices->names || f.choices == &kNorms) continue;
    const std::vector<std::string>& c = f.choices->names();
    const std::string v = value_text(f, o);
    if (std::find(c.begin(), c.end(), v) == c.end())
      fail(std::string("--") + f.name + " '" + v + "' is unknown: choose one of " + join(c));
  }
  const bool on_cpu = o.device == "cpu" ||
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
  if (o.lr_scheduler == LrScheduler::cosine) {
    if (o.min_lr > o.lr) fail("--min-lr must not exceed --lr (the peak) for cosine");
    if (o.t_mult <= 0) fail("--t-mult must be positive");
    if (o.lr_period_updates <= 0 && o.max_update - o.warmup_updates <= 0)
      fail("cosine needs --lr-period-updates or a --max-update above --warmup-updates");
  }
  if (o.lr_scheduler == LrScheduler::polynomial_decay &&
      (o.total_num_update > 0 ? o.total_num_update : o.max_update) <= o.warmup_updates)
    fail("polynomial_decay needs --total-num-update (or --max-update) above --warmup-updates");
  if (o.save_interval < 0 || o.keep_last_epochs < 0)
    fail("--save-interval and --keep-last-epochs must be >= 0");
  if (o.max_update < 0) fail("--max-update must be >= 0");
  if (o.norm_eps <= 0) fail("--norm-eps must be positive");
  if (o.bucket_mb < 0) fail("--bucket-mb must be >= 0");
  if (o.sync_group_size < 0)
    fail("--sync-group-size must be >= 0 (0: one group of all ranks)");
  if (o.arch == Arch::transformer) {
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
  if (o.sample > 0 && o.arch != Arch::transformer_lm)
    fail("--sample needs a language model (--arch transformer_lm)");
  for (const std::string& n : {o.norm_self, o.norm_ff, o.norm_final})
    if (!is_norm_kind(n)) fail("unknown norm '" + n + "': choose one of " + join(norm_kinds()));
}

NormOptions norm_options(const Options& o, const std::string& place) {
  NormOptions n;
  n.kind = place == "self" ? o.norm_self : place == "ff" ? o.norm_ff : o.norm_final;
#define PN_NORM_FLAG(type, member, name, default_value, pnnorm_name, option, ...) \
  n.member = o.option;
#include "layers/norms/norm_flags.inc"
#undef PN_NORM_FLAG
  // pntrain's values that stand for another: groups 0 is one per attention head; PN's t counts
  // statistics batches, and the default warmup spans warmup_updates updates.
  n.groups = o.norm_groups > 0 ? o.norm_groups : o.decoder_attention_heads;
  n.warmup = pn_warmup_batches(o);
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

int64_t pn_batches_per_update(const Options& o) {
  return int64_t(o.update_freq) * stats_groups_per_micro_step(o);
}

int64_t pn_warmup_batches(const Options& o) {
  return o.pn_warmup >= 0 ? o.pn_warmup : int64_t(o.warmup_updates) * pn_batches_per_update(o);
}

int64_t pn_warmup_updates(const Options& o) {
  return pn_warmup_batches(o) / pn_batches_per_update(o);
}

std::string pn_warmup_origin(const Options& o) {
  if (o.pn_warmup >= 0) return "--pn-warmup " + std::to_string(o.pn_warmup);
  return "--warmup-updates " + std::to_string(o.warmup_updates) +
         (pn_batches_per_update(o) > 1
              ? " x " + std::to_string(pn_batches_per_update(o)) + " statistics batches per update"
              : std::string());
}

int sync_group_ranks(const Options& o, int world_size) {
  return o.sync_group_size > 0 ? o.sync_group_size : world_size;
}

double statistics_batch_tokens(const Options& o, const std::string& norm_kind, int world_size) {
  if (!is_norm_kind(norm_kind)) return 0;
  const NormKind kind = parse_norm_kind(norm_kind);
  if (!is_batch_type(kind)) return 0;
  const double ranks = is_synchronized(kind) ? sync_group_ranks(o, world_size) : 1;
  return double(o.max_tokens) * ranks / stats_groups_per_micro_step(o);
}

}  // namespace pn
