// Checkpoint averaging (the paper, like fairseq's scripts/average_checkpoints.py, tests the
// mean of the last N checkpoints' parameters). Reads the N newest complete checkpoint_<update>
// directories of a save dir and writes one checkpoint directory that --restore-file and
// --eval-only accept:
//   model.bin  parameters averaged elementwise; Adam moments and header from the newest
//   rank<r>.bin every running norm statistic averaged over the N (PN's count t: the newest)
// All inputs must come from the same model shape and world size.
#pragma once
#include <string>
#include <vector>

namespace pn {

// The newest `num` complete checkpoint directories under save_dir, oldest first.
std::vector<std::string> newest_checkpoints(const std::string& save_dir, int num);
// Averages `inputs` into `output` (created; an existing one is replaced). Throws
// std::runtime_error naming the checkpoint that does not fit.
void average_checkpoints(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace pn
