// Kernel launches in the CUDA emulation. Blocks run one after another, one kernel at a time,
// which makes a function-local static the running block's shared memory. The GPU threads of a
// block run as one of two kinds of thread:
//   * fibers (the default): cooperative stacks switched on one OS thread, fast enough for the
//     whole test suite; __syncthreads() and __shfl_xor_sync() are points where a fiber yields;
//   * OS threads (PN_EMU_THREADS=os, and always under a sanitizer): truly concurrent, so a
//     missing __syncthreads() is a real data race that ThreadSanitizer reports.
// Warps of 32 exchange __shfl_xor_sync values through per-warp slots between two barriers.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_runtime.h"

thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace pn_emu {
int dynamic_smem_limit(const char* kernel);  // runtime.cpp
namespace {

#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
constexpr bool kHaveFibers = true;
// Saves the callee-saved registers on the current stack, stores its pointer in *from and
// continues on the stack `to` (System V x86-64: rbx, rbp, r12-r15 are callee-saved).
extern "C" void pn_emu_switch(void** from, void* to);
asm(R"(
.text
.globl pn_emu_switch
.type pn_emu_switch,@function
pn_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size pn_emu_switch,.-pn_emu_switch
.section .note.GNU-stack,"",@progbits
.text
)");
#else
constexpr bool kHaveFibers = false;  // sanitizers need OS threads (and see their races)
inline void pn_emu_switch(void**, void*) {}
#endif

bool use_fibers() {
  static const bool fibers = [] {
    const char* v = std::getenv("PN_EMU_THREADS");
    return kHaveFibers && !(v && std::string(v) == "os");
  }();
  return fibers;
}

void yield_fiber();           // back to the block's scheduler (fiber mode)
uint64_t fiber_progress = 0;  // arrivals at barriers and exits: a pass without any is a deadlock

// A barrier for `live` threads; a thread that exits leaves it (retire), as an exited GPU thread
// no longer counts at __syncthreads.
struct Barrier {
  std::mutex m;
  std::condition_variable cv;
  int live = 0, arrived = 0;
  uint64_t generation = 0;
  void reset(int n) {
    std::lock_guard<std::mutex> l(m);
    live = n;
    arrived = 0;
  }
  void release_all() {
    arrived = 0;
    ++generation;
    cv.notify_all();
  }
  void arrive_and_wait() {
    if (use_fibers()) {  // one OS thread: no lock, and waiting is yielding
      const uint64_t g = generation;
      ++fiber_progress;
      if (++arrived == live) return release_all();
      while (generation == g) yield_fiber();
      return;
    }
    std::unique_lock<std::mutex> l(m);
    const uint64_t g = generation;
    if (++arrived == live) return release_all();
    cv.wait(l, [&] { return generation != g; });
  }
  void retire() {
    if (use_fibers()) {
      if (--live > 0 && arrived == live) release_all();
      return;
    }
    std::lock_guard<std::mutex> l(m);
    --live;
    if (arrived > 0 && arrived == live) release_all();
  }
};

// A shuffle is one barrier: lanes write their slot of one of two slot sets, meet, read, and the
// next shuffle uses the other set. Every running lane takes part in every shuffle (the mask must
// name them all), so the lanes agree on the set; a lane can write a set again only after the
// barrier of the shuffle between, which every lane reaches after its read of that set.
struct Warp {
  Barrier barrier;
  unsigned live_mask = 0;  // lanes that exist and have not exited (under barrier.m)
  uint64_t slot[2][32];    // one exchange value per lane, in two sets used in turn
  unsigned char set[32];   // the set each lane's next shuffle uses
};

// The running block: written by the launching thread while no GPU thread runs.
struct Block {
  Barrier barrier;
  Warp warps[32];
  std::vector<unsigned char> smem;
  const std::function<void()>* body = nullptr;
  dim3 grid, block, index;
  int threads = 0;
};
Block& block() {
  static Block* b = new Block;  // lives for the process, as the threads that use it
  return *b;
}

int linear_thread() {
  return int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}
dim3 thread_index(int id, const dim3& b) {
  return dim3(id % b.x, id / b.x % b.y, id / (b.x * b.y));
}

// Runs GPU thread `id` of the current block on the calling OS thread or fiber, then leaves the
// warp and the block, as an exited GPU thread does.
void run_thread(int id) {
  Block& b = block();
  threadIdx = thread_index(id, b.block);
  blockIdx = b.index;
  blockDim = b.block;
  gridDim = b.grid;
  (*b.body)();
  Warp& wp = b.warps[id / 32];
  if (use_fibers()) {
    wp.live_mask &= ~(1u << (id % 32));
  } else {
    std::lock_guard<std::mutex> l(wp.barrier.m);
    wp.live_mask &= ~(1u << (id % 32));
  }
  wp.barrier.retire();
  b.barrier.retire();
}

void reset_block(dim3 index) {
  Block& b = block();
  b.index = index;
  b.barrier.reset(b.threads);
  for (int w = 0; w * 32 < b.threads; ++w) {
    const int lanes = std::min(32, b.threads - w * 32);
    b.warps[w].barrier.reset(lanes);
    b.warps[w].live_mask = lanes == 32 ? ~0u : (1u << lanes) - 1;
    std::memset(b.warps[w].set, 0, sizeof b.warps[w].set);
  }
}

// ---- fibers: one stack per GPU thread slot, round-robin on the kernel's OS thread -----------
struct Fibers {
  static constexpr size_t kStack = size_t(256) << 10;
  struct Fiber {
    void* sp = nullptr;
    char* stack = nullptr;
    bool done = false;
    dim3 index;  // threadIdx, set at each switch to the fiber
  };
  std::vector<Fiber> fibers;
  void* scheduler_sp = nullptr;
  int current = -1, threads = 0;
  uint64_t pass_start = 0;  // fiber_progress when the current round-robin pass began

  static void entry() {  // a fiber's first frame; never returns
    Fibers& f = fibers_();
    run_thread(f.current);
    Fiber& me = f.fibers[f.current];
    me.done = true;
    ++fiber_progress;
    const int next = f.next();
    if (next < 0) pn_emu_switch(&me.sp, f.scheduler_sp);  // the block is done
    f.switch_to(&me.sp, next);
  }
  static Fibers& fibers_() {
    static Fibers* f = new Fibers;
    return *f;
  }
  void start(int id) {
    Fiber& fb = fibers[id];
    if (!fb.stack) {
      void* m = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) die("cannot map a fiber stack of %zu bytes", kStack);
      fb.stack = static_cast<char*>(m);
    }
    // The initial frame pn_emu_switch pops: six registers, then entry() as the return address.
    // The tops of the stacks are staggered by a few cache lines each: at the same offset in
    // 256 KiB stacks, the hot frames of all fibers would fall into the same cache sets and
    // evict each other at every switch.
    void** top = reinterpret_cast<void**>(fb.stack + kStack - (size_t(id) * 1088) % 65536);
    *--top = nullptr;  // entry()'s own return address slot (keeps the ABI's 16-byte alignment)
    *--top = reinterpret_cast<void*>(&entry);
    for (int r = 0; r < 6; ++r) *--top = nullptr;
    fb.sp = top;
    fb.done = false;
    fb.index = thread_index(id, block().block);
  }
  // The fiber after the current one in round-robin order that has not exited, -1 when none is
  // left. A pass over the block in which no fiber arrived at a barrier or exited is a deadlock.
  int next() {
    for (int t = current + 1;; ++t) {
      if (t == threads) {
        t = 0;
        int left = 0;
        for (int u = 0; u < threads; ++u) left += !fibers[u].done;
        if (left == 0) return -1;
        if (fiber_progress == pass_start)
          die("block (%u,%u,%u): %d threads wait at a __syncthreads() or __shfl_xor_sync() that "
              "the other threads of the block or warp never reach",
              block().index.x, block().index.y, block().index.z, left);
        pass_start = fiber_progress;
      }
      if (!fibers[t].done) return t;
    }
  }
  // Saves the running fiber's stack pointer in *from and continues fiber t, without a detour
  // through the scheduler.
  void switch_to(void** from, int t) {
    current = t;
    threadIdx = fibers[t].index;
    pn_emu_switch(from, fibers[t].sp);
  }
  void run_block(int n) {
    threads = n;
    if (int(fibers.size()) < n) fibers.resize(n);
    for (int t = 0; t < n; ++t) start(t);
    pass_start = fiber_progress;
    switch_to(&scheduler_sp, 0);  // back when every fiber has exited
    current = -1;
  }
  void yield() {
    const int me = current, t = next();
    if (t == me) return;  // the only fiber left (next() has checked for progress)
    switch_to(&fibers[me].sp, t);
    // Whoever switched back here set current and threadIdx.
  }
};
void yield_fiber() { Fibers::fibers_().yield(); }

// ---- OS threads: one per GPU thread slot (up to 1024), reused by every block ----------------
struct Pool {
  struct Worker {
    std::mutex m;
    std::condition_variable cv;
    bool go = false;
  };
  std::vector<std::unique_ptr<Worker>> workers;
  std::mutex done_mu;
  std::condition_variable done_cv;
  int running = 0;

  void grow(int n) {
    while (int(workers.size()) < n) {
      const int id = int(workers.size());
      workers.push_back(std::make_unique<Worker>());
      std::thread([this, id, w = workers.back().get()] { serve(id, *w); }).detach();
    }
  }
  void serve(int id, Worker& w) {
    for (;;) {
      {
        std::unique_lock<std::mutex> l(w.m);
        w.cv.wait(l, [&] { return w.go; });
        w.go = false;
      }
      run_thread(id);
      std::lock_guard<std::mutex> l(done_mu);
      if (--running == 0) done_cv.notify_all();
    }
  }
  void run_block(int threads) {
    grow(threads);
    {
      std::lock_guard<std::mutex> l(done_mu);
      running = threads;
    }
    for (int t = 0; t < threads; ++t) {
      Worker& w = *workers[t];
      std::lock_guard<std::mutex> l(w.m);
      w.go = true;
      w.cv.notify_one();
    }
    std::unique_lock<std::mutex> l(done_mu);
    done_cv.wait(l, [&] { return running == 0; });
  }
};
Pool& pool() {
  static Pool* p = new Pool;  // lives for the process: its threads are never joined
  return *p;
}

std::mutex kernel_mu;  // one kernel at a time (they share the block state and their statics)

// PN_EMU_PROFILE=1: at exit, each kernel's launches, blocks, GPU threads and seconds on stderr.
struct Profile {
  struct Row {
    uint64_t launches = 0, blocks = 0, threads = 0;
    double seconds = 0;
  };
  std::map<std::string, Row> rows;  // under kernel_mu
  static Profile* get() {
    static Profile* p = [] {
      const char* v = std::getenv("PN_EMU_PROFILE");
      if (!v || std::string(v) != "1") return static_cast<Profile*>(nullptr);
      auto* q = new Profile;
      std::atexit([] { get()->print(); });
      return q;
    }();
    return p;
  }
  void print() {
    std::lock_guard<std::mutex> l(kernel_mu);
    std::vector<std::pair<std::string, Row>> v(rows.begin(), rows.end());
    std::sort(v.begin(), v.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    std::fprintf(stderr, "pn CUDA emulation profile: seconds, launches, blocks, threads, kernel\n");
    for (const auto& [name, r] : v)
      std::fprintf(stderr, "%9.3f %9llu %11llu %13llu %s\n", r.seconds,
                   (unsigned long long)r.launches, (unsigned long long)r.blocks,
                   (unsigned long long)r.threads, name.c_str());
  }
};

void run_kernel(const LaunchConfig& c, const std::function<void()>& body) {
  std::lock_guard<std::mutex> l(kernel_mu);
  Profile* const profile = Profile::get();
  const auto start = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  Block& b = block();
  b.threads = int(c.block.x * c.block.y * c.block.z);
  b.body = &body;
  b.grid = c.grid;
  b.block = c.block;
  b.smem.assign(c.smem, 0xff);  // uninitialised shared memory: NaN bytes
  blockDim = c.block;
  gridDim = c.grid;
  for (unsigned z = 0; z < c.grid.z; ++z)
    for (unsigned y = 0; y < c.grid.y; ++y)
      for (unsigned x = 0; x < c.grid.x; ++x) {
        reset_block(dim3(x, y, z));
        blockIdx = b.index;
        if (use_fibers())
          Fibers::fibers_().run_block(b.threads);
        else
          pool().run_block(b.threads);
      }
  if (profile) {
    Profile::Row& r = profile->rows[c.kernel];
    const uint64_t blocks = uint64_t(c.grid.x) * c.grid.y * c.grid.z;
    r.launches += 1;
    r.blocks += blocks;
    r.threads += blocks * b.threads;
    r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
}

}  // namespace

void syncthreads() { block().barrier.arrive_and_wait(); }

uint64_t shfl_xor(unsigned mask, uint64_t bits, int lane_mask, int width) {
  const int id = linear_thread(), lane = id % 32;
  Warp& w = block().warps[id / 32];
  unsigned live;
  if (use_fibers()) {
    live = w.live_mask;
  } else {
    std::lock_guard<std::mutex> l(w.barrier.m);
    live = w.live_mask;
  }
  if (mask != live)
    die("__shfl_xor_sync with mask 0x%08x in block (%u,%u,%u), warp %d, lane %d: the warp's "
        "running lanes are 0x%08x; a mask must name exactly the lanes that take part (lanes "
        "0x%08x are left out, 0x%08x have exited or do not exist)",
        mask, blockIdx.x, blockIdx.y, blockIdx.z, id / 32, lane, live, live & ~mask,
        mask & ~live);
  const int set = w.set[lane];
  w.set[lane] = !set;
  w.slot[set][lane] = bits;
  w.barrier.arrive_and_wait();
  int src = lane ^ lane_mask;
  if ((src ^ lane) & -width) src = lane;  // outside the lane's segment (width: a power of 2)
  return w.slot[set][src];
}

void* dynamic_shared() { return block().smem.data(); }
void launch_kernel(const LaunchConfig& c, std::function<void()> body) {
  const dim3 g = c.grid, b = c.block;
  const unsigned long long threads = 1ull * b.x * b.y * b.z;
  // The limits of a compute capability 9.0 device; a launch beyond them fails at the launch.
  if (!g.x || !g.y || !g.z || !threads || threads > 1024 || b.x > 1024 || b.y > 1024 ||
      b.z > 64 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
    fail_with(cudaErrorInvalidConfiguration,
              "%s<<<(%u,%u,%u), (%u,%u,%u)>>>: beyond the launch limits (block <= 1024 threads, "
              "block.z <= 64, grid.y and grid.z <= 65535)",
              c.kernel, g.x, g.y, g.z, b.x, b.y, b.z);
    return;
  }
  if (c.smem > size_t(dynamic_smem_limit(c.kernel))) {
    fail_with(cudaErrorInvalidValue,
              "%s: %zu bytes of dynamic shared memory, above the %d the kernel may use "
              "(cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) raises it)",
              c.kernel, c.smem, dynamic_smem_limit(c.kernel));
    return;
  }
  const LaunchConfig config = c;
  enqueue(c.stream, [config, body = std::move(body)] { run_kernel(config, body); });
}

}  // namespace pn_emu
