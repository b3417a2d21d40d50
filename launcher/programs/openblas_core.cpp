#include "launcher/programs/openblas_core.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iterator>
#include <string>

#include "kernels/cpu/cpu_features.h"

namespace pn {

std::string openblas_better_core() {
  if (std::getenv("OPENBLAS_CORETYPE")) return "";  // chosen by the user (or by a rerun)
  return better_core_than(openblas_get_corename());
}

std::string better_core_than(const std::string& openblas_core) {
  std::string core = openblas_core;
  for (char& ch : core) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  static const char* const kOld[] = {"prescott", "core2",     "penryn",  "dunnington",
                                     "nehalem",  "atom",      "katmai",  "coppermine",
                                     "northwood", "banias",   "sandybridge", "barcelona",
                                     "opteron",  "opteron_sse3", "bobcat", "bulldozer",
                                     "piledriver", "steamroller", "excavator", "unknown"};
  if (std::find(std::begin(kOld), std::end(kOld), core) == std::end(kOld)) return "";
  if (cpu_has("avx512f") && cpu_has("avx512bw") && cpu_has("avx512vl") && cpu_has("avx512dq"))
    return "SkylakeX";
  if (cpu_has("avx2") && cpu_has("fma")) return "Haswell";
  return "";
}

void rerun_with_openblas_core(char** argv) {
  if (std::getenv("PN_OPENBLAS_FALLBACK")) return;  // this is the rerun
  const std::string core = openblas_better_core();
  if (core.empty()) return;
  // The program's own path, not /proc/self/exe: the process keeps its name (ps, pkill pntrain).
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  setenv("PN_OPENBLAS_FALLBACK", openblas_get_corename(), 1);
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  execv(self, argv);
  unsetenv("OPENBLAS_CORETYPE");  // execv failed: go on with the kernels OpenBLAS chose
  unsetenv("PN_OPENBLAS_FALLBACK");
}

}  // namespace pn
