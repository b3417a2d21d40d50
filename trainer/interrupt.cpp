#include "trainer/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace pn {

namespace {
std::atomic<int> g_signal{0};

void on_signal(int sig) {
  if (g_signal.exchange(sig) != 0) {  // the second signal: stop now (async-signal-safe calls)
    const char msg[] = "pntrain: second interrupt, stopping at once without saving\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(128 + sig);
  }
}
}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int interrupt_signal() { return g_signal.load(); }

}  // namespace pn
