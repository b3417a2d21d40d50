// cuDNN's fused attention behind kernels/cuda/cudnn_sdpa.h, through the cuDNN frontend's graph
// API (header-only; `launcher/pn cudnn-frontend` fetches it from PyPI's nvidia-cudnn-frontend).
//
// cuDNN is opened at run time (the frontend's dynamic loading): the GPU machine's copy may be
// older or newer than the headers here, or absent, and then every shape is unsupported with the
// loader's words and the attention runs on the other kernels; the process never fails to start
// for want of cuDNN. PN_CUDNN_LIBRARY names the library to open (default libcudnn.so.9 on the
// loader's path).
//
// One graph per shape and direction, built on first use and kept: building costs milliseconds
// (heuristics choose the engine), executing it microseconds. The backward asks for cuDNN's
// deterministic algorithm (dq without atomics) so that a run repeats bit for bit, and takes the
// other one only where that is unsupported (sdpa_description() says which).
#include "kernels/cuda/cudnn_sdpa.h"

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#ifdef PN_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <cstdlib>

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's dynamic loading calls through this handle
}

namespace pn::cuda {
namespace {

namespace fe = cudnn_frontend;
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDout, kDq, kDk, kDv };

struct Plans {
  std::shared_ptr<fe::graph::Graph> forward, backward;
  int64_t workspace = 0;
  std::string why;  // non-empty: this shape is unsupported
};

struct Library {
  std::mutex lock;
  bool opened = false;
  std::string missing;  // why cuDNN could not be opened ("" when it was)
  cudnnHandle_t handle = nullptr;
  bool deterministic = true;  // every backward built so far reduces dq without atomics
  std::map<std::tuple<int, int, int, int>, Plans> plans;
};
Library& library() {
  static Library* lib = new Library;  // outlives the plans' users at exit
  return *lib;
}

// Opens cuDNN and makes a handle; "" on success, else the reason.
std::string open_cudnn(Library& lib) {
  const char* name = std::getenv("PN_CUDNN_LIBRARY");
  if (!name || !*name) name = "libcudnn.so.9";
  fe::cudnn_dlhandle = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
  if (!fe::cudnn_dlhandle) {
    const char* e = dlerror();
    return std::string("cuDNN could not be opened (") + (e ? e : name) +
           "): set PN_CUDNN_LIBRARY or add its folder to LD_LIBRARY_PATH";
  }
  // The frontend opens the CUDA runtime itself; it must be the one this program runs on.
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  const std::string cudart = "libcudart.so." + std::to_string(runtime / 1000);
  setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", cudart.c_str(), 0);
  try {
    if (fe::detail::get_backend_version() < 90000) return "cuDNN older than 9.0 (no SDPA graphs)";
    if (fe::detail::create_handle(&lib.handle) != CUDNN_STATUS_SUCCESS)
      return "cudnnCreate failed";
  } catch (const std::exception& e) {
    return std::string("cuDNN: ") + e.what();
  }
  return "";
}

std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& g, const char* name,
                                                     int64_t uid, const SdpaShape& s,
                                                     int64_t row_stride) {
  const int64_t T = s.seq_len, dh = s.head_dim;
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({s.nseq, s.heads, T, dh})
                      .set_stride({T * row_stride, dh, row_stride, 1}));
}
void as_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, int64_t uid,
               const SdpaShape& s, int64_t row_stride) {
  const int64_t T = s.seq_len, dh = s.head_dim;
  t->set_output(true).set_uid(uid).set_dim({s.nseq, s.heads, T, dh}).set_stride(
      {T * row_stride, dh, row_stride, 1});
}
std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}
std::string build(fe::graph::Graph& g, cudnnHandle_t h, int64_t* workspace) {
  auto st = g.build(h, {fe::HeurMode_t::A});
  if (!st.is_good()) return st.get_message();
  int64_t ws = 0;
  st = g.get_workspace_size(ws);
  if (!st.is_good()) return st.get_message();
  *workspace = std::max(*workspace, ws);
  return "";
}

Plans make_plans(Library& lib, const SdpaShape& s) {
  Plans p;
  const int64_t d = int64_t(s.heads) * s.head_dim;
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  const auto stats_layout = [&](const std::shared_ptr<fe::graph::Tensor_attributes>& t) {
    t->set_data_type(fe::DataType_t::FLOAT)
        .set_dim({s.nseq, s.heads, s.seq_len, 1})
        .set_stride({int64_t(s.heads) * s.seq_len, s.seq_len, 1, 1});
  };
  // forward: o and each row's log-sum-exp (the "stats" the backward recomputes P from)
  p.forward = new_graph();
  {
    auto& g = *p.forward;
    auto q = tensor(g, "q", kQ, s, 3 * d), k = tensor(g, "k", kK, s, 3 * d),
         v = tensor(g, "v", kV, s, 3 * d);
    auto opt = fe::graph::SDPA_attributes()
                   .set_name("causal_attention")
                   .set_generate_stats(true)
                   .set_causal_mask(true)
                   .set_attn_scale(scale);
    auto [o, stats] = g.sdpa(q, k, v, opt);
    as_output(o, kO, s, d);
    stats->set_output(true).set_uid(kStats);
    stats_layout(stats);
  }
  p.why = build(*p.forward, lib.handle, &p.workspace);
  if (!p.why.empty()) return p.why = "cuDNN's SDPA forward: " + p.why, p;
  for (bool deterministic : {true, false}) {
    p.backward = new_graph();
    auto& g = *p.backward;
    auto q = tensor(g, "q", kQ, s, 3 * d), k = tensor(g, "k", kK, s, 3 * d),
         v = tensor(g, "v", kV, s, 3 * d), o = tensor(g, "o", kO, s, d),
         dout = tensor(g, "dout", kDout, s, d);
    auto stats = g.tensor(fe::graph::Tensor_attributes().set_name("stats").set_uid(kStats));
    stats_layout(stats);
    auto opt = fe::graph::SDPA_backward_attributes()
                   .set_name("causal_attention_backward")
                   .set_causal_mask(true)
                   .set_attn_scale(scale)
                   .set_deterministic_algorithm(deterministic);
    auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, dout, stats, opt);
    as_output(dq, kDq, s, 3 * d);
    as_output(dk, kDk, s, 3 * d);
    as_output(dv, kDv, s, 3 * d);
    p.why = build(g, lib.handle, &p.workspace);
    if (p.why.empty()) {
      lib.deterministic = lib.deterministic && deterministic;
      return p;
    }
  }
  p.why = "cuDNN's SDPA backward: " + p.why;
  return p;
}

Plans& plans_for(const SdpaShape& s) {
  Library& lib = library();
  std::lock_guard<std::mutex> guard(lib.lock);
  if (!lib.opened) lib.opened = true, lib.missing = open_cudnn(lib);
  const auto key = std::make_tuple(s.nseq, s.heads, s.seq_len, s.head_dim);
  auto it = lib.plans.find(key);
  if (it != lib.plans.end()) return it->second;
  Plans p;
  p.why = lib.missing.empty() ? sdpa_shape_refused(s) : lib.missing;
  if (p.why.empty()) try {
      p = make_plans(lib, s);
    } catch (const std::exception& e) {
      p.why = std::string("cuDNN: ") + e.what();
    }
  return lib.plans.emplace(key, std::move(p)).first->second;
}

void execute(fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack, void* workspace,
             cudaStream_t stream, const char* what) {
  Library& lib = library();
  fe::detail::set_stream(lib.handle, stream);
  auto st = g.execute(lib.handle, pack, workspace);
  if (!st.is_good())
    throw std::runtime_error(std::string("cuDNN's SDPA ") + what + " failed: " + st.get_message());
}

// The opened library's version: "9.1.0".
std::string backend_version() {
  const size_t v = fe::detail::get_backend_version();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace

std::string sdpa_unsupported(const SdpaShape& s) { return plans_for(s).why; }

size_t sdpa_workspace_bytes(const SdpaShape& s) { return size_t(plans_for(s).workspace); }

std::string sdpa_description() {
  Library& lib = library();
  std::lock_guard<std::mutex> guard(lib.lock);
  if (!lib.opened) return "cuDNN not opened yet";
  if (!lib.missing.empty()) return lib.missing;
  return "cuDNN " + backend_version() +
         (lib.deterministic ? ", deterministic backward" : ", backward with atomics (not repeatable)");
}

std::string cudnn_version() {
  Library& lib = library();
  std::lock_guard<std::mutex> guard(lib.lock);
  if (!lib.opened) lib.opened = true, lib.missing = open_cudnn(lib);
  return lib.missing.empty() ? backend_version() : "";
}

void sdpa_forward(const SdpaShape& s, const __nv_bfloat16* qkv, __nv_bfloat16* o, float* lse,
                  void* workspace, cudaStream_t stream) {
  Plans& p = plans_for(s);
  if (!p.why.empty()) throw std::runtime_error(p.why);
  const size_t d = size_t(s.heads) * s.head_dim;
  auto* base = const_cast<__nv_bfloat16*>(qkv);
  std::unordered_map<int64_t, void*> pack{
      {kQ, base}, {kK, base + d}, {kV, base + 2 * d}, {kO, o}, {kStats, lse}};
  execute(*p.forward, pack, workspace, stream, "forward");
}

void sdpa_backward(const SdpaShape& s, const __nv_bfloat16* qkv, const __nv_bfloat16* o,
                   const __nv_bfloat16* dout, const float* lse, __nv_bfloat16* dqkv,
                   void* workspace, cudaStream_t stream) {
  Plans& p = plans_for(s);
  if (!p.why.empty()) throw std::runtime_error(p.why);
  const size_t d = size_t(s.heads) * s.head_dim;
  auto* base = const_cast<__nv_bfloat16*>(qkv);
  std::unordered_map<int64_t, void*> pack{{kQ, base},
                                          {kK, base + d},
                                          {kV, base + 2 * d},
                                          {kO, const_cast<__nv_bfloat16*>(o)},
                                          {kDout, const_cast<__nv_bfloat16*>(dout)},
                                          {kStats, const_cast<float*>(lse)},
                                          {kDq, dqkv},
                                          {kDk, dqkv + d},
                                          {kDv, dqkv + 2 * d}};
  execute(*p.backward, pack, workspace, stream, "backward");
}

}  // namespace pn::cuda

#else  // built without the cuDNN frontend's headers

namespace pn::cuda {
namespace {
const char* kAbsent =
    "built without the cuDNN frontend's headers (run 'launcher/pn cudnn-frontend', then rebuild)";
}
std::string sdpa_unsupported(const SdpaShape&) { return kAbsent; }
size_t sdpa_workspace_bytes(const SdpaShape&) { return 0; }
std::string sdpa_description() { return kAbsent; }
std::string cudnn_version() { return ""; }
void sdpa_forward(const SdpaShape&, const __nv_bfloat16*, __nv_bfloat16*, float*, void*,
                  cudaStream_t) {
  throw std::logic_error(kAbsent);
}
void sdpa_backward(const SdpaShape&, const __nv_bfloat16*, const __nv_bfloat16*,
                   const __nv_bfloat16*, const float*, __nv_bfloat16*, void*, cudaStream_t) {
  throw std::logic_error(kAbsent);
}
}  // namespace pn::cuda

#endif
