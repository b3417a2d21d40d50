#include "kernels/cpu/cpu_features.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace pn {
namespace {

// The value of the first "key : value" line of /proc/cpuinfo whose key is `key` ("" if none).
std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = line.substr(0, colon);
    k.erase(k.find_last_not_of(" \t") + 1);
    if (k == key) return line.substr(colon + 1 + (colon + 1 < line.size() && line[colon + 1] == ' '));
  }
  return "";
}

bool listed(const std::string& list, const std::string& word, char sep) {
  std::istringstream words(list);
  std::string w;
  while (std::getline(words, w, sep))
    if (w == word) return true;
  return false;
}

}  // namespace

bool cpu_has(const std::string& flag) {
  const char* mask = std::getenv("PN_CPU_WITHOUT");
  if (mask && listed(mask, flag, ',')) return false;
  return listed(cpuinfo_field("flags"), flag, ' ');
}

std::string cpu_model_name() {
  const std::string name = cpuinfo_field("model name");
  return name.empty() ? "this CPU" : name;
}

std::string cpu_isa() {
  static const char* const kIsa[] = {"sse4_2",      "avx",          "avx2",     "fma",
                                     "avx512f",     "avx512bw",     "avx512vl", "avx512dq",
                                     "avx512_vnni", "avx512_bf16",  "amx_tile", "amx_bf16",
                                     "asimd",       "sve"};
  std::string out;
  for (const char* flag : kIsa)
    if (cpu_has(flag)) out += (out.empty() ? "" : ",") + std::string(flag);
  return out;
}

}  // namespace pn
