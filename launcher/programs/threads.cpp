#include "launcher/programs/threads.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace pn {

namespace {

// A positive count from the environment variable `name` (OMP_NUM_THREADS may be a list: its
// first entry), 0 when unset or not a count.
int env_count(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return n > 0 && (*end == '\0' || *end == ',') ? int(std::min(n, 1L << 20)) : 0;
}

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// ceil(quota / period) CPUs, 0 for no limit.
int quota_cpus(double quota, double period) {
  return quota > 0 && period > 0 ? int(std::ceil(quota / period - 1e-9)) : 0;
}

// The tightest limit of `dir` and its ancestors up to `root`, read by `limit_of` (0: none).
template <class F>
int tightest(std::string root, std::string dir, F limit_of) {
  int best = 0;
  for (;;) {
    const int n = limit_of(root + dir);
    if (n > 0) best = best > 0 ? std::min(best, n) : n;
    if (dir.empty() || dir == "/") break;
    dir = dir.substr(0, dir.rfind('/'));
  }
  return best;
}

// 64-bit FNV-1a of `s`, cut to 48 bits so that a double holds it exactly.
double hash48(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return double(h >> 16);
}

}  // namespace

int cgroup_cpu_limit() {
  std::ifstream in("/proc/self/cgroup");
  int best = 0;
  auto take = [&](int n) { if (n > 0) best = best > 0 ? std::min(best, n) : n; };
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {  // v2: "max 100000" or "Q P"
      take(tightest("/sys/fs/cgroup", path == "/" ? "" : path, [](const std::string& d) {
        std::istringstream f(read_first_line(d + "/cpu.max"));
        std::string quota;
        double period = 0;
        return f >> quota >> period && quota != "max" ? quota_cpus(std::atof(quota.c_str()), period)
                                                     : 0;
      }));
    } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {  // v1
      for (const char* mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"})
        take(tightest(mount, path == "/" ? "" : path, [](const std::string& d) {
          const std::string q = read_first_line(d + "/cpu.cfs_quota_us");
          const std::string p = read_first_line(d + "/cpu.cfs_period_us");
          return q.empty() || p.empty() ? 0
                                        : quota_cpus(std::atof(q.c_str()), std::atof(p.c_str()));
        }));
    }
  }
  return best;
}

ThreadChoice choose_threads(int flag_threads, Communicator& comm) {
  // The mask and node of every rank, known to all (the collective runs whatever decides).
  cpu_set_t set;
  CPU_ZERO(&set);
  int mask_cpus = 0;
  std::string mask;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    mask_cpus = CPU_COUNT(&set);
    for (int c = 0; c < CPU_SETSIZE; ++c) mask += CPU_ISSET(c, &set) ? '1' : '0';
  }
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::vector<double> who(2 * size_t(comm.size()), 0.0);
  who[2 * comm.rank()] = hash48(host);
  who[2 * comm.rank() + 1] = hash48(mask);
  if (comm.size() > 1) comm.allreduce_sum(who.data(), who.size());
  int sharing = 0;
  for (int r = 0; r < comm.size(); ++r)
    sharing += who[2 * r] == who[2 * comm.rank()] && who[2 * r + 1] == who[2 * comm.rank() + 1];

  if (flag_threads > 0) return {flag_threads, "--threads " + std::to_string(flag_threads)};
  for (const char* name : {"OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK"})
    if (const int n = env_count(name)) return {n, std::string(name) + "=" + std::to_string(n)};
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  int cpus = mask_cpus > 0 ? mask_cpus : int(std::max(1L, online));
  std::string source = std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs") +
                       (mask_cpus > 0 ? " of the affinity mask" : " online");
  const int limit = cgroup_cpu_limit();
  if (limit > 0 && limit < cpus) {
    cpus = limit;
    source = "the cgroup's CPU limit of " + std::to_string(limit);
  }
  if (sharing > 1) source += " shared by " + std::to_string(sharing) + " ranks";
  return {std::max(1, cpus / std::max(1, sharing)), source};
}

}  // namespace pn
