#include "kernels/sim_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace pn::sim {
namespace {

constexpr size_t kSpan = size_t(32) << 30;  // address space of the stand-in device
constexpr size_t kAlign = 256;              // as cudaMalloc's alignment
constexpr unsigned char kPoison = 0xFF;

struct Space {
  char* device = nullptr;  // PROT_NONE: what the host sees
  char* twin = nullptr;    // readable: what the kernels use
  size_t top = 0;
  std::map<size_t, size_t> free_blocks;  // offset -> bytes
  std::map<size_t, size_t> live;         // offset -> bytes
  size_t live_bytes = 0, peak_bytes = 0;  // of the blocks, alignment included
  std::vector<std::function<void()>> queue;
  std::mutex mu;

  Space() {
    void* d = mmap(nullptr, kSpan, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void* t = mmap(nullptr, kSpan, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (d == MAP_FAILED || t == MAP_FAILED)
      throw std::runtime_error("sim device: cannot reserve its address space");
    device = static_cast<char*>(d);
    twin = static_cast<char*>(t);
  }
};

Space& space() {
  static Space* s = new Space();  // never unmapped: buffers may be released during exit
  return *s;
}

}  // namespace

void* alloc(size_t bytes) {
  Space& s = space();
  const size_t want = (bytes + kAlign - 1) / kAlign * kAlign + kAlign;
  std::lock_guard<std::mutex> lock(s.mu);
  size_t at = s.top;
  auto it = s.free_blocks.begin();
  for (; it != s.free_blocks.end(); ++it)
    if (it->second >= want) break;
  if (it != s.free_blocks.end()) {
    at = it->first;
    if (it->second > want) s.free_blocks[at + want] = it->second - want;
    s.free_blocks.erase(it);
  } else {
    if (s.top + want > kSpan) throw std::bad_alloc();
    s.top += want;
  }
  s.live[at] = want;
  s.live_bytes += want;
  s.peak_bytes = std::max(s.peak_bytes, s.live_bytes);
  std::memset(s.twin + at, kPoison, want);
  return s.device + at;
}

void free(void* p) {
  if (!p) return;
  enqueue([p] {
    Space& s = space();
    std::lock_guard<std::mutex> lock(s.mu);
    const size_t at = static_cast<char*>(p) - s.device;
    auto it = s.live.find(at);
    if (it == s.live.end()) throw std::logic_error("sim device: free of an unknown address");
    // Return the block's whole pages to the system. Only those: madvise zeroes whole pages, and
    // a page the block shares with a live neighbour would lose the neighbour's contents.
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t first = (at + page - 1) / page * page, last = (at + it->second) / page * page;
    if (last > first) madvise(s.twin + first, last - first, MADV_DONTNEED);
    s.free_blocks[at] = it->second;
    s.live_bytes -= it->second;
    s.live.erase(it);
  });
}

size_t peak_bytes() {
  Space& s = space();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.peak_bytes;
}

void reset_peak() {
  Space& s = space();
  std::lock_guard<std::mutex> lock(s.mu);
  s.peak_bytes = s.live_bytes;
}

bool owns(const void* p) {
  Space& s = space();
  const char* c = static_cast<const char*>(p);
  return c >= s.device && c < s.device + kSpan;
}

void* real_address(const void* p) {
  if (!p || !owns(p)) return const_cast<void*>(p);
  Space& s = space();
  return s.twin + (static_cast<const char*>(p) - s.device);
}

void enqueue(std::function<void()> work) {
  Space& s = space();
  std::lock_guard<std::mutex> lock(s.mu);
  s.queue.push_back(std::move(work));
}

void synchronize() {
  Space& s = space();
  std::vector<std::function<void()>> run;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    run.swap(s.queue);
  }
  for (auto& work : run) work();
}

size_t queued() {
  Space& s = space();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.queue.size();
}

}  // namespace pn::sim
