// Stopping on a signal. The first of these asks the training loop to stop after the current
// update (on every rank: the loop agrees on it through an all-reduce at the update boundary),
// save and exit:
//   SIGINT   Ctrl-C;
//   SIGTERM  kill, scancel, a scheduler's preemption or time limit;
//   SIGUSR1  an early warning (Slurm's --signal=B:USR1@SECONDS, forwarded by the job script and
//            `launcher/pn run`; mpirun passes SIGUSR1 on to its ranks at once);
//   SIGCONT  that does not resume a stop: what Open MPI's mpirun sends its ranks at once when it
//            is itself terminated (its SIGTERM follows odls_base_sigkill_timeout seconds later,
//            SIGKILL as long again), so a SIGTERM to mpirun saves within one update.
// A Ctrl-Z (SIGTSTP) or a SIGSTOP (kill -STOP, a suspended Slurm job) stops the process as
// usual, and the SIGCONT that resumes it is no notice (a stop of under a second is not told
// from mpirun's notice).
// A second SIGINT ends the process at once without saving; a later SIGTERM does not (a
// launcher's SIGTERM after its notice must not end the save it asked for).
#pragma once
#include <string>

namespace pn {

void install_interrupt_handlers();
// The stop asked for: SIGINT for Ctrl-C, SIGTERM for every termination notice (SIGTERM, SIGUSR1,
// mpirun's SIGCONT), or 0. The exit status is 128 + this.
int interrupt_signal();
// The signal that asked first on this process (SIGINT, SIGTERM, SIGUSR1 or SIGCONT), or 0.
int interrupt_cause();
// The name of a signal ("SIGTERM"), for the log.
const char* signal_name(int sig);
// What interrupted this process, for the log line of an interruption: the first signal that
// asked, in words ("SIGUSR1, a request to save and stop"), else the stop's signal's name.
std::string interrupt_description(int stop_signal);

}  // namespace pn
