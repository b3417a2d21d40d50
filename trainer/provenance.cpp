// A run's provenance (trainer/provenance.h). The commit, tree state and flags come from the
// header cmake/build_info.cmake writes at every build.
#include "trainer/provenance.h"

#include <unistd.h>

#include <ctime>
#include <sstream>

#include "kernels/cpu/cpu_features.h"
#include "kernels/device.h"
#include "pn_build_info.h"

namespace pn {

namespace {
nlohmann::json or_null(const std::string& s) { return s.empty() ? nlohmann::json() : nlohmann::json(s); }
}  // namespace

nlohmann::json run_provenance(const Options& opt, const Communicator& comm) {
  const DeviceVersions v = device_versions();
  const Device device = current_context().device;
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  // tree_clean: whether the tracked files equalled the commit when built; null off a checkout.
  const nlohmann::json clean =
      PN_GIT_TREE_CLEAN < 0 ? nlohmann::json() : nlohmann::json(PN_GIT_TREE_CLEAN == 1);
  nlohmann::json p = {
      {"commit", PN_GIT_COMMIT},
      {"tree_clean", clean},
      {"build_type", PN_BUILD_TYPE},
      {"build_flags", PN_BUILD_FLAGS},
      {"device", device_name(device)},
      {"cpu_model", cpu_model_name()},
      {"cpu_isa", cpu_isa()},
      {"blas", v.blas},
      {"gpu_name", or_null(v.gpu_name)},
      {"gpu_driver", or_null(v.gpu_driver)},
      {"cuda", or_null(v.cuda)},
      {"cudnn", or_null(v.cudnn)},
      // NCCL carries a GPU run's sums; a CPU run's go through MPI whatever the build links.
      {"nccl", device == Device::CUDA ? or_null(nccl_version()) : nlohmann::json()},
      {"precision", opt.precision},
      {"ranks", comm.size()},
      {"threads", num_threads()},
      {"host", std::string(host)}};
  return p;
}

std::string provenance_summary(const nlohmann::json& p) {
  const std::string commit = p.value("commit", "unknown");
  const nlohmann::json clean = p.value("tree_clean", nlohmann::json());
  // The BLAS as its name and version (the configuration's first two words) and its core.
  const std::string blas = p.value("blas", "?");
  std::istringstream words(blas);
  std::string name, version;
  words >> name >> version;
  const size_t core = blas.find(", core ");
  return "build: commit " + (commit == "unknown" ? commit : commit.substr(0, 10)) + " (" +
         (clean.is_boolean() ? (clean.get<bool>() ? "clean tree" : "tree with local changes")
                             : "not a git checkout") +
         "), " + p.value("build_type", "?") + ", " + name + " " + version +
         (core == std::string::npos ? std::string() : blas.substr(core));
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace pn
