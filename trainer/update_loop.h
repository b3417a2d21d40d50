// What train() carries from update to update and what one update sums (update_loop.cpp, with
// its progress lines in reports.cpp). Internal to the trainer's files.
#pragma once
#include <chrono>

#include "trainer/faults.h"
#include "trainer/schedule.h"
#include "trainer/trainer.h"

namespace pn {

inline double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// What one call of train() carries from update to update.
struct Trainer::Run {
  Fault fault;
  Schedule schedule;
  int keep = 0;  // checkpoints kept (0: all)
  bool json_log = false;
  double t_start = 0;
  // The sums of the updates since the last progress line.
  double log_loss = 0, log_nll = 0, log_tokens = 0, log_time = 0;
  int log_updates = 0;
  int bad_in_row = 0;  // early stopping's state is the trainer's (best_valid_), in checkpoints
  TrainResult result;
};

// One update's sums over every rank and its time split (rank 0's).
struct Trainer::UpdateStats {
  double loss_sum = 0, nll_sum = 0, ntok = 0, loss = 0, nll = 0, grad_sumsq = 0, lr = 0;
  double wall = 0, fwd_s = 0, bwd_s = 0, stats_comm_s = 0, grad_comm_s = 0, optim_s = 0;
  double stats_wait_s = 0;  // of stats_comm_s, the barrier wait when the communicator splits it
};


}  // namespace pn
