#include "trainer/faults.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "kernels/device.h"
#include "trainer/interrupt.h"
#include "trainer/trainer.h"

namespace pn {

Fault parse_fault(const std::string& spec) {
  Fault f;
  if (spec.empty()) return f;
  const size_t at = spec.find('@'), colon = spec.find(':');
  try {
    f.kind = spec.substr(0, at);
    f.update = std::stoll(spec.substr(at + 1, colon == std::string::npos ? std::string::npos
                                                                            : colon - at - 1));
    if (colon != std::string::npos) f.rank = std::stoi(spec.substr(colon + 1));
  } catch (const std::exception&) {
    f.kind = "";
  }
  if (at == std::string::npos ||
      (f.kind != "nan" && f.kind != "exit" && f.kind != "hang" && f.kind != "perturb" &&
       f.kind != "sigterm" && f.kind != "sigterm-mpirun" && f.kind != "savefail"))
    throw std::invalid_argument("--debug-fault '" + spec + "' is malformed: use nan@U, " +
                                "exit@U:R, hang@U:R, perturb@U:R, sigterm@U:R, "
                                "sigterm-mpirun@U:R or savefail@U:R");
  return f;
}

void Trainer::inject_fault(const Fault& fault, int64_t update) {
  const int rank = comm_.rank();
  if (fault.update != update + 1 || fault.rank != rank) return;
  if (fault.kind == "exit") {
    std::fprintf(stderr, "pntrain: rank %d exits (--debug-fault %s)\n", rank,
                 opt_.debug_fault.c_str());
    std::_Exit(9);
  }
  if (fault.kind == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  if (fault.kind == "perturb") {
    ParamStore<float>& params = this->params();
    float* at = params.data.data() + params.specs.back().offset;
    float v;
    copy_to_host(&v, at, sizeof v);
    synchronize();
    v += 1.0f;
    copy_to_device(at, &v, sizeof v);
  }
  if (fault.kind == "sigterm") ::kill(::getpid(), SIGTERM);  // as Slurm or Ctrl-C would
  if (fault.kind == "sigterm-mpirun") {  // as kill or scancel would, then mpirun's notice
    ::kill(::getppid(), SIGTERM);
    for (int i = 0; i < 600 && !interrupt_signal(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace pn
