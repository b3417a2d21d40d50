#include "trainer/export.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "comm/communicator.h"
#include "model/lm.h"
#include "model/translation.h"
#include "trainer/checkpoint.h"
#include "trainer/data.h"
#include "trainer/trainer.h"
#include "trainer/translation_data.h"

namespace fs = std::filesystem;

namespace pn {

void write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  size_t offset = 0;
  for (const SafeTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // aligns the tensors to 8 bytes
  const uint64_t n = text.size();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write '" + tmp + "': check the --out directory");
    out.write(reinterpret_cast<const char*>(&n), 8);  // little-endian hosts only
    out.write(text.data(), std::streamsize(text.size()));
    for (const SafeTensor& t : tensors) out.write(t.bytes.data(), std::streamsize(t.bytes.size()));
    if (!out) throw std::runtime_error("cannot write '" + tmp + "' (disk full?)");
  }
  fs::rename(tmp, path);
}

SafeTensorsFile read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  std::vector<char> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  if (all.size() < 8 || (std::memcpy(&n, all.data(), 8), n > all.size() - 8))
    throw std::runtime_error("'" + path + "' is not a safetensors file (header length)");
  SafeTensorsFile f;
  f.header = nlohmann::json::parse(all.begin() + 8, all.begin() + 8 + long(n));
  const size_t data = 8 + n;
  for (const auto& [name, t] : f.header.items()) {
    if (name == "__metadata__") continue;
    SafeTensor s;
    s.name = name;
    s.dtype = t.at("dtype").get<std::string>();
    s.shape = t.at("shape").get<std::vector<int64_t>>();
    const size_t b = t.at("data_offsets")[0].get<size_t>();
    const size_t e = t.at("data_offsets")[1].get<size_t>();
    if (b > e || data + e > all.size())
      throw std::runtime_error("'" + path + "': tensor " + name + " lies outside the file");
    s.bytes.assign(all.begin() + long(data + b), all.begin() + long(data + e));
    f.tensors[name] = std::move(s);
  }
  return f;
}

namespace {

template <class V>
std::vector<char> bytes_of(const V* p, size_t n) {
  const char* b = reinterpret_cast<const char*>(p);
  return std::vector<char>(b, b + n * sizeof(V));
}

// Appends pntrain parameter `name` [shape] at p as fairseq-named tensors (splitting fused
// projections); `prefix` is "decoder." for the LM, "" for translation.
void add_parameter(std::vector<SafeTensor>* out, const std::string& name,
                   const std::vector<int>& shape, const float* p, const std::string& prefix,
                   bool shared_embedding) {
  std::vector<int64_t> s(shape.begin(), shape.end());
  if (shared_embedding && name == "embed_tokens.weight") {  // the joint table, both sides
    for (const char* side : {"encoder.", "decoder."})
      out->push_back({side + name, "F32", s, bytes_of(p, size_t(s[0] * s[1]))});
    return;
  }
  for (const auto& [fused, parts] :
       {std::pair<std::string, std::vector<std::string>>{".qkv_proj.", {"q", "k", "v"}},
        {".kv_proj.", {"k", "v"}}}) {
    const size_t at = name.find(fused);
    if (at == std::string::npos) continue;
    const std::string head = name.substr(0, at + 1), tail = name.substr(at + fused.size());
    const int64_t rows = s[0] / int64_t(parts.size());
    const int64_t cols = s.size() > 1 ? s[1] : 1;
    for (size_t k = 0; k < parts.size(); ++k) {
      std::vector<int64_t> ps = s;
      ps[0] = rows;
      out->push_back({prefix + head + parts[k] + "_proj." + tail, "F32", ps,
                      bytes_of(p + size_t(k) * rows * cols, size_t(rows * cols))});
    }
    return;
  }
  size_t numel = 1;
  for (int64_t v : s) numel *= size_t(v);
  out->push_back({prefix + name, "F32", s, bytes_of(p, numel)});
}

std::string join_words(const Vocabulary& v) {
  std::string s;
  for (size_t i = 0; i < v.words.size(); ++i) s += (i ? "\n" : "") + v.words[i];
  return s;
}

std::string join_words_of(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

std::string num(double v) {
  std::ostringstream ss;
  ss.precision(17);
  ss << v;
  return ss.str();
}

void add_norm_metadata(std::map<std::string, std::string>* m, const std::string& place,
                       const NormOptions& n) {
  // The norm's row of the registry (layers/norms/norms.inc): a reader rebuilds its inference
  // form from the statistic, not from the name.
  const NormInfo& info = norm_info(n.kind);
  (*m)["norm." + place] = n.kind;
  (*m)["norm." + place + ".statistic"] = norm_statistic_names()[size_t(info.statistic)];
  (*m)["norm." + place + ".params"] = join_words_of(info.params);
  (*m)["norm." + place + ".state"] = join_words_of(info.state);
  (*m)["norm." + place + ".groups"] = std::to_string(n.groups);
  (*m)["norm." + place + ".prescale_groups"] = std::to_string(n.prescale_groups);
}

}  // namespace

ExportSummary export_checkpoint(const Options& options, const std::string& checkpoint,
                                const std::string& out) {
  if (!fs::exists(fs::path(checkpoint) / "DONE"))
    throw std::runtime_error("'" + checkpoint + "' is not a complete checkpoint directory (no "
                             "DONE marker): give a checkpoint_<update> directory of --save-dir");
  // The checkpoint's configuration fills every model flag not given; one given otherwise is
  // refused, naming both values.
  Options o = options;
  take_checkpoint_flags(checkpoint_flags(checkpoint), checkpoint, &o, TakeFlags::Model);
  validate_options(o);
  if (o.data != "builtin" && !fs::is_directory(o.data))
    throw std::runtime_error(
        "the vocabulary of '" + checkpoint + "' comes from its corpus, --data '" + o.data + "' (" +
        (o.given.count("data") ? "given" : "stored in the checkpoint") +
        "), which is not a directory here: give --data DIR where that corpus is now");
  std::string vocab;  // the fingerprint of the vocabulary the data gives
  auto comm = make_single_communicator();
  std::map<std::string, std::string> meta;
  meta["format"] = "pntrain-export-1";
  meta["arch"] = name_of(o.arch);
  meta["norm_eps"] = num(o.norm_eps);
  meta["label_smoothing"] = num(o.label_smoothing);
  meta["pn_eval_state"] = name_of(o.pn_eval_state);
  std::unique_ptr<LanguageModel<float>> lm;
  std::unique_ptr<TranslationModel<float>> mt;
  std::vector<std::string> norm_names;  // fairseq module name of each norm, in norms() order
  const std::string prefix = o.arch == Arch::transformer ? "" : "decoder.";
  if (o.arch == Arch::transformer) {
    const ParallelCorpus c =
        load_parallel_corpus(o.data, o.source_lang, o.target_lang, o.share_all_embeddings,
                             o.train_subset, o.valid_subset, o.gen_subset);
    vocab = vocabulary_fingerprint({&c.src_vocab, &c.tgt_vocab});
    const TranslationConfig tc = translation_config(o, c.src_vocab.size(), c.tgt_vocab.size());
    mt = std::make_unique<TranslationModel<float>>(tc, o.seed, comm.get());
    meta["dim"] = std::to_string(tc.dim);
    meta["encoder_layers"] = std::to_string(tc.encoder_layers);
    meta["encoder_heads"] = std::to_string(tc.encoder_heads);
    meta["encoder_ffn_dim"] = std::to_string(tc.encoder_ffn_dim);
    meta["decoder_layers"] = std::to_string(tc.decoder_layers);
    meta["decoder_heads"] = std::to_string(tc.decoder_heads);
    meta["decoder_ffn_dim"] = std::to_string(tc.decoder_ffn_dim);
    meta["max_len"] = std::to_string(tc.max_len);
    meta["share_all_embeddings"] = tc.share_all_embeddings ? "true" : "false";
    meta["source_lang"] = o.source_lang;
    meta["target_lang"] = o.target_lang;
    meta["src_vocab"] = join_words(c.src_vocab);
    meta["tgt_vocab"] = join_words(c.tgt_vocab);
    add_norm_metadata(&meta, "encoder_self", tc.enc_norm_self);
    add_norm_metadata(&meta, "encoder_ff", tc.enc_norm_ff);
    add_norm_metadata(&meta, "encoder_final", tc.enc_norm_final);
    add_norm_metadata(&meta, "decoder_self", tc.dec_norm_self);
    add_norm_metadata(&meta, "decoder_cross", tc.dec_norm_cross);
    add_norm_metadata(&meta, "decoder_ff", tc.dec_norm_ff);
    add_norm_metadata(&meta, "decoder_final", tc.dec_norm_final);
    for (int l = 0; l < tc.encoder_layers; ++l)
      for (const char* n : {"self_attn_layer_norm", "final_layer_norm"})
        norm_names.push_back("encoder.layers." + std::to_string(l) + "." + n);
    norm_names.push_back("encoder.layer_norm");
    for (int l = 0; l < tc.decoder_layers; ++l)
      for (const char* n : {"self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"})
        norm_names.push_back("decoder.layers." + std::to_string(l) + "." + n);
    norm_names.push_back("decoder.layer_norm");
  } else {
    const Corpus c = o.data == "builtin" ? builtin_corpus() : load_corpus(o.data);
    vocab = vocabulary_fingerprint({&c.vocab});
    const ModelConfig mc = model_config(o, c.vocab.size());
    lm = std::make_unique<LanguageModel<float>>(mc, o.seed, comm.get());
    meta["dim"] = std::to_string(mc.dim);
    meta["decoder_layers"] = std::to_string(mc.layers);
    meta["decoder_heads"] = std::to_string(mc.heads);
    meta["decoder_ffn_dim"] = std::to_string(mc.ffn_dim);
    meta["max_len"] = std::to_string(mc.max_len);
    meta["tokens_per_sample"] = std::to_string(o.tokens_per_sample);
    meta["vocab"] = join_words(c.vocab);
    add_norm_metadata(&meta, "decoder_self", mc.norm_self);
    add_norm_metadata(&meta, "decoder_ff", mc.norm_ff);
    add_norm_metadata(&meta, "decoder_final", mc.norm_final);
    for (int l = 0; l < mc.layers; ++l)
      for (const char* n : {"self_attn_layer_norm", "final_layer_norm"})
        norm_names.push_back("decoder.layers." + std::to_string(l) + "." + n);
    norm_names.push_back("decoder.layer_norm");
  }
  ParamStore<float>& params = mt ? mt->params : lm->params;
  const std::vector<Norm<float>*> norms = mt ? mt->norms() : lm->norms();

  const CheckpointFile m = read_checkpoint_file(checkpoint + "/model.bin");
  const nlohmann::json& have = m.header.at("params");
  std::string diff = have.size() == params.specs.size() ? "" : "a different number of tensors";
  for (size_t i = 0; diff.empty() && i < have.size(); ++i) {
    const nlohmann::json want = {{"name", params.specs[i].name}, {"shape", params.specs[i].shape}};
    if (have[i] != want)
      diff = "tensor " + have[i].dump() + " where the options give " + want.dump();
  }
  if (!diff.empty())
    throw std::runtime_error("checkpoint '" + checkpoint + "' holds another model than these "
                             "options describe (" + diff + "): give the flags (or --config) and "
                             "--data it was trained with");
  // Older checkpoints carry no fingerprint; the parameter shapes above still guard them.
  if (m.header.contains("vocab") && m.header["vocab"].get<std::string>() != vocab)
    throw std::runtime_error("checkpoint '" + checkpoint + "' was trained on another vocabulary (" +
                             m.header["vocab"].get<std::string>() + ") than --data " + o.data +
                             " gives (" + vocab + "): give --data the corpus it was trained on");
  if (m.payload.size() < params.packed_size() * sizeof(float))
    throw std::runtime_error("checkpoint '" + checkpoint + "/model.bin' is too short");
  // The payload holds the tensors packed; this model's buffer may reserve padding between them.
  const std::vector<float> values =
      params.unpacked(reinterpret_cast<const float*>(m.payload.data()));

  ExportSummary summary;
  summary.update = m.header.at("update").get<int64_t>();
  summary.world_size = m.header.at("world_size").get<int>();
  summary.parameters = params.packed_size();
  meta["update"] = std::to_string(summary.update);
  meta["world_size"] = std::to_string(summary.world_size);

  std::vector<SafeTensor> tensors;
  for (const ParamSpec& s : params.specs)
    add_parameter(&tensors, s.name, s.shape, values.data() + s.offset, prefix,
                  mt && mt->config.share_all_embeddings);

  // Norm state of every saved rank: rank_state[r][k] is state tensor k (model order) of rank r.
  const int R = summary.world_size;
  std::vector<std::vector<std::vector<double>>> rank_state(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    const std::string path = checkpoint + "/rank" + std::to_string(r) + ".bin";
    const CheckpointFile f = read_checkpoint_file(path);
    const double* p = reinterpret_cast<const double*>(f.payload.data());
    size_t k = 0, off = 0;
    for (Norm<float>* n : norms)
      for (const StateTensor& t : n->state()) {
        const auto& e = f.header.at("state").at(k++);
        if (e.at("name") != t.name || e.at("n").get<size_t>() != t.n)
          throw std::runtime_error("'" + path + "' holds other norm state (" + e.dump() +
                                   ") than these options' model: use its --norm* flags");
        rank_state[size_t(r)].emplace_back(p + off, p + off + t.n);
        off += t.n;
      }
  }
  size_t k = 0;
  for (size_t l = 0; l < norms.size(); ++l)
    for (const StateTensor& t : norms[l]->state()) {
      std::vector<double> eval = rank_state[0][k];
      if (o.pn_eval_state == EvalState::mean && !norms[l]->synchronized()) {
        for (int r = 1; r < R; ++r)
          for (size_t i = 0; i < t.n; ++i) eval[i] += rank_state[size_t(r)][k][i];
        for (double& v : eval) v /= R;
      }
      const std::vector<int64_t> shape = {int64_t(t.n)};
      tensors.push_back({norm_names[l] + "." + t.name, "F64", shape, bytes_of(eval.data(), t.n)});
      if (R > 1 && !norms[l]->synchronized())
        for (int r = 0; r < R; ++r)
          tensors.push_back({"ranks." + std::to_string(r) + "." + norm_names[l] + "." + t.name,
                             "F64", shape, bytes_of(rank_state[size_t(r)][k].data(), t.n)});
      ++k;
    }
  write_safetensors(out, tensors, meta);
  summary.tensors = tensors.size();
  return summary;
}

}  // namespace pn
