// Checkpoints (SPEC section 6). One directory per save, save_dir/checkpoint_<update>/, holding
//   model.bin      rank 0: parameters, Adam moments, update counter, model shape (JSON header)
//   rank<r>.bin    every rank: the running state of its norm layers (rank-local for PN)
//   DONE           written last, after every rank's files are on disk
// and save_dir/last naming the newest complete one. Every file is written to a temporary name,
// fsync'ed and renamed, and ends with a CRC32 that is verified on load.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace pn {

// One file: a JSON header and a payload of raw bytes, checksummed.
struct CheckpointFile {
  nlohmann::json header;
  std::vector<char> payload;
};

// Writes atomically (tmp, fsync, rename, fsync of the directory). Throws std::runtime_error.
void write_checkpoint_file(const std::string& path, const CheckpointFile& f);
// Reads and verifies magic, length and CRC32. Throws std::runtime_error naming what is wrong.
CheckpointFile read_checkpoint_file(const std::string& path);

// Reads only the JSON header of a checkpoint file (no CRC check: the payload is not read).
nlohmann::json read_checkpoint_header(const std::string& path);
// Writes dir/DONE (the mark of a complete checkpoint), fsync'ed. Throws std::runtime_error.
void write_done_marker(const std::string& dir);

// Creates dir and writes, fsyncs and removes a probe file in it, so that a save directory that
// cannot hold checkpoints stops the run before training. Throws std::invalid_argument naming
// the path, the rank and the reason.
void check_writable_dir(const std::string& dir, int rank);

// The newest complete checkpoint directory under save_dir ("" when none).
std::string last_checkpoint(const std::string& save_dir);
// Marks dir complete and points save_dir/last at it (rank 0, after all ranks wrote).
void commit_checkpoint(const std::string& save_dir, const std::string& dir);
// Removes complete checkpoint directories beyond the newest keep (keep <= 0: keep all).
void prune_checkpoints(const std::string& save_dir, int keep, const std::string& protect);

}  // namespace pn
