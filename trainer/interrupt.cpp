#include "trainer/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <thread>

namespace pn {

namespace {
std::atomic<int> g_stop{0};         // SIGINT or SIGTERM
std::atomic<int> g_cause{0};        // the first signal that asked
std::atomic<bool> g_stopped{false};  // a Ctrl-Z stop is pending: its SIGCONT is no notice

// A SIGSTOP (kill -STOP, a suspended job) cannot be caught, so the SIGCONT that ends it is told
// from mpirun's by a clock: a thread ticks every 100 ms, and a tick late by over a second means
// the process was stopped. The handler reads the ticks with clock_gettime (async-signal-safe).
constexpr int64_t kTickMs = 100, kLateNs = 1000000000;
std::atomic<int64_t> g_tick_ns{0};                // the ticking thread's last tick
std::atomic<int64_t> g_resumed_ns{INT64_MIN / 2};  // when that thread last woke late

int64_t monotonic_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

void tick_forever() {
  for (;;) {
    const int64_t now = monotonic_ns();
    if (now - g_tick_ns.load() > kLateNs) g_resumed_ns.store(now);  // before the tick: see below
    g_tick_ns.store(now);
    std::this_thread::sleep_for(std::chrono::milliseconds(kTickMs));
  }
}

// Whether the process is just back from a stop: the tick is late (the thread has not run since),
// or the thread has seen its late tick within the last two seconds.
bool just_resumed() {
  const int64_t now = monotonic_ns();
  return now - g_tick_ns.load() > kLateNs || now - g_resumed_ns.load() < 2 * kLateNs;
}

void install(int sig, void (*handler)(int)) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, nullptr);
}

// Only async-signal-safe calls below.
void on_signal(int sig) {
  if (sig == SIGTSTP) {  // stop as the default action would, remembering why
    g_stopped.store(true);
    install(SIGTSTP, SIG_DFL);
    ::raise(SIGTSTP);  // delivered when this handler returns
    return;
  }
  if (sig == SIGCONT && g_stopped.exchange(false)) {  // resumed after Ctrl-Z
    install(SIGTSTP, on_signal);
    return;
  }
  if (sig == SIGCONT && just_resumed()) return;  // resumed after SIGSTOP
  if (sig == SIGINT && g_stop.load() == SIGINT) {
    const char msg[] = "pntrain: second interrupt, stopping at once without saving\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(128 + sig);
  }
  int none = 0;
  g_cause.compare_exchange_strong(none, sig);
  const int stop = sig == SIGINT ? SIGINT : SIGTERM;
  int have = g_stop.load();
  while (have < stop && !g_stop.compare_exchange_weak(have, stop)) {
  }
}
}  // namespace

void install_interrupt_handlers() {
  g_tick_ns.store(monotonic_ns());
  std::thread(tick_forever).detach();
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGCONT, SIGTSTP}) install(sig, on_signal);
}

int interrupt_signal() { return g_stop.load(); }

int interrupt_cause() { return g_cause.load(); }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGCONT: return "SIGCONT";
    default: return "a signal";
  }
}

std::string interrupt_description(int stop_signal) {
  switch (interrupt_cause()) {
    case SIGUSR1: return "SIGUSR1, a request to save and stop";
    case SIGCONT: return "SIGCONT: mpirun is ending the job";
    default: return signal_name(stop_signal);
  }
}

}  // namespace pn
