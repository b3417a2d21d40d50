// SIGINT and SIGTERM (Ctrl-C, Slurm's preemption notice): the first one asks the training loop
// to stop after the current update (on every rank: the loop agrees on it through an all-reduce
// at the update boundary), save and exit; a second one ends the process at once.
#pragma once

namespace pn {

void install_interrupt_handlers();
// The signal received (SIGINT or SIGTERM), or 0.
int interrupt_signal();

}  // namespace pn
