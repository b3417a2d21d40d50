// pn export: a checkpoint as safetensors under fairseq's names, with the norm state and the
// model configuration (the PyTorch comparison is tests/cli/torch_twin.sh).
#include <glog/logging.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "lm_fixtures.h"
#include "trainer/export.h"
#include "trainer/trainer.h"

namespace pn {
namespace {

namespace fs = std::filesystem;

template <class V>
std::vector<V> values(const SafeTensor& t) {
  std::vector<V> v(t.bytes.size() / sizeof(V));
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

TEST(Export, LmCheckpointAsSafetensorsWithFairseqNamesStateAndConfig) {
  FLAGS_minloglevel = 1;
  const fs::path dir = fs::temp_directory_path() / ("pn_export_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto comm = make_single_communicator();
  Options o = test::small_lm();
  o.norm_self = o.norm_ff = o.norm_final = "power";
  o.max_update = 3;
  o.save_dir = (dir / "ck").string();
  Trainer t(o, *comm, test::builtin());
  t.train();
  const std::string out = (dir / "m.safetensors").string();
  o.save_dir.clear();
  const ExportSummary s = export_checkpoint(o, (dir / "ck" / "checkpoint_3").string(), out);
  EXPECT_EQ(s.update, 3);
  EXPECT_EQ(s.parameters, t.params().size());
  const SafeTensorsFile f = read_safetensors(out);
  const auto& meta = f.header.at("__metadata__");
  EXPECT_EQ(meta.at("arch"), "transformer_lm");
  EXPECT_EQ(meta.at("decoder_heads"), "4");
  EXPECT_EQ(meta.at("norm.decoder_self"), "power");
  EXPECT_EQ(meta.at("vocab").get<std::string>().substr(0, 18), "<pad>\n<eos>\n<unk>\n");

  // The fused qkv projection comes out as fairseq's q_proj, k_proj, v_proj (rows in that order).
  const int d = o.decoder_embed_dim;
  const ParamSpec* qkv = nullptr;
  for (const auto& spec : t.params().specs)
    if (spec.name == "layers.1.self_attn.qkv_proj.weight") qkv = &spec;
  ASSERT_NE(qkv, nullptr);
  const SafeTensor& k = f.tensors.at("decoder.layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(k.dtype, "F32");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{d, d}));
  const float* want = t.params().data.data() + qkv->offset + size_t(d) * d;
  EXPECT_EQ(values<float>(k), std::vector<float>(want, want + size_t(d) * d));
  EXPECT_EQ(f.tensors.at("decoder.embed_tokens.weight").shape,
            (std::vector<int64_t>{test::builtin().vocab.size(), d}));
  EXPECT_TRUE(f.tensors.count("decoder.layers.0.fc1.bias"));
  EXPECT_FALSE(f.tensors.count("decoder.layers.0.self_attn.qkv_proj.weight"));

  // PN's running state, equal to the trained layer's.
  const SafeTensor& psi = f.tensors.at("decoder.layer_norm.running_psi2");
  EXPECT_EQ(psi.dtype, "F64");
  const StateTensor live = t.norms().back()->state()[0];
  EXPECT_EQ(values<double>(psi), std::vector<double>(live.data, live.data + live.n));
  EXPECT_EQ(values<double>(f.tensors.at("decoder.layer_norm.t")), std::vector<double>{3.0});

  // The checkpoint alone: no flags give the same file.
  const std::string bare = (dir / "bare.safetensors").string();
  export_checkpoint(Options{}, (dir / "ck" / "checkpoint_3").string(), bare);
  const SafeTensorsFile g = read_safetensors(bare);
  EXPECT_EQ(g.header, f.header);
  for (const auto& [name, tensor] : f.tensors) EXPECT_EQ(g.tensors.at(name).bytes, tensor.bytes);

  // A model flag given otherwise than the checkpoint's is refused, naming both values.
  Options other;
  other.decoder_embed_dim = 64;
  other.given.insert("decoder-embed-dim");
  try {
    export_checkpoint(other, (dir / "ck" / "checkpoint_3").string(), out);
    ADD_FAILURE() << "a mismatched model was exported";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--decoder-embed-dim 64 disagrees with checkpoint"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("trained with --decoder-embed-dim " +
                                         std::to_string(d)), std::string::npos) << e.what();
  }
  // A data directory that is not there is named, with the fix.
  Options moved;
  moved.data = (dir / "gone").string();
  moved.given.insert("data");
  try {
    export_checkpoint(moved, (dir / "ck" / "checkpoint_3").string(), out);
    ADD_FAILURE() << "a missing --data was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("give --data DIR where that corpus is now"),
              std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pn
