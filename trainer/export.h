// Export of a checkpoint as one safetensors file (launcher/pn export, pnexport), for PyTorch and
// other tools (python/pntrain_torch.py rebuilds the model from it).
//
// safetensors: an 8-byte little-endian header length N, N bytes of JSON
//   {"<tensor>": {"dtype": "F32"|"F64", "shape": [...], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>", ...}}
// (padded with spaces to a multiple of 8), then the tensors' raw little-endian bytes; offsets
// count from the end of the header.
//
// Tensors, under fairseq's names (F32 parameters, F64 norm state):
//   LM:           decoder.embed_tokens.weight, decoder.layers.<l>.self_attn.{q,k,v,out}_proj.*,
//                 decoder.layers.<l>.{self_attn_layer_norm,final_layer_norm,fc1,fc2}.*,
//                 decoder.layer_norm.*        (the output projection is tied to embed_tokens)
//   translation:  encoder.* and decoder.* likewise, decoder.layers.<l>.encoder_attn.* and
//                 encoder_attn_layer_norm.*; with shared embeddings both embed_tokens hold
//                 the one joint table
// pntrain's fused qkv_proj (rows q, k, v) and kv_proj (rows k, v) are split into fairseq's
// q_proj, k_proj, v_proj. Each norm's running state (running_mean, running_var, running_psi2,
// nu, t) follows its weight: <norm>.<state> is the evaluation state (--pn-eval-state: rank 0's,
// or the mean over the saved ranks), and for rank-local norms of a checkpoint saved by R > 1
// ranks, ranks.<r>.<norm>.<state> is rank r's own.
// Metadata (string values): format, arch, sizes, norm kinds and options, the vocabularies
// (words joined by '\n', in id order), update and world size.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainer/options.h"

namespace pn {

struct SafeTensor {
  std::string name, dtype;  // dtype: F32 or F64
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

// Writes a safetensors file (tensors in the given order). Throws std::runtime_error.
void write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);
// Reads one back: the JSON header and every tensor (in file order). Throws naming the problem.
struct SafeTensorsFile {
  nlohmann::json header;
  std::map<std::string, SafeTensor> tensors;
};
SafeTensorsFile read_safetensors(const std::string& path);

struct ExportSummary {
  size_t tensors = 0, parameters = 0;
  int64_t update = 0;
  int world_size = 1;
};
// Exports checkpoint directory `checkpoint` to `out`. The model is the one the checkpoint's
// stored configuration describes (its flags and --data path); options supply what it lacks (an
// older checkpoint's flags, --data where the corpus has moved, --pn-eval-state). A flag given
// (options.given) that differs from the stored one is refused (std::invalid_argument), naming
// both values; a checkpoint that does not fit, or another vocabulary, throws
// std::runtime_error naming the mismatch.
ExportSummary export_checkpoint(const Options& options, const std::string& checkpoint,
                                const std::string& out);

}  // namespace pn
