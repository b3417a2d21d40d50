// Checkpoints (docs/contract.md §6). One directory per save, save_dir/checkpoint_<update>/, holding
//   model.bin      rank 0: parameters, Adam moments, update counter, model shape (JSON header)
//   rank<r>.bin    every rank: the running state of its norm layers (rank-local for PN)
//   DONE           written last, after every rank's files are on disk
// and save_dir/last naming the newest complete one. Every file is written to a temporary name,
// fsync'ed and renamed, and ends with a CRC32 that is verified on load.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace pn {

// One file: a JSON header and a payload of raw bytes, checksummed.
struct CheckpointFile {
  nlohmann::json header;
  std::vector<char> payload;
};

// A checkpoint file that fails verification. what() adds the fix; `damage` alone names the file
// and the damage ("checkpoint file 'F' is corrupt (CRC32 mismatch)").
struct CorruptCheckpoint : std::runtime_error {
  CorruptCheckpoint(const std::string& damage, const std::string& fix)
      : std::runtime_error(damage + ": " + fix), damage(damage) {}
  std::string damage;
};

// Writes atomically (tmp, fsync, rename, fsync of the directory). Throws std::runtime_error.
void write_checkpoint_file(const std::string& path, const CheckpointFile& f);
// Reads and verifies magic, lengths and the CRC32 (which covers the header too) before parsing
// the header. Throws CorruptCheckpoint naming the file for any damage.
CheckpointFile read_checkpoint_file(const std::string& path);

// The JSON header of a checkpoint file, verified as read_checkpoint_file does.
nlohmann::json read_checkpoint_header(const std::string& path);
// Writes dir/DONE (the mark of a complete checkpoint), fsync'ed. Throws std::runtime_error.
void write_done_marker(const std::string& dir);

// Creates dir and writes, fsyncs and removes a probe file in it, so that a save directory that
// cannot hold checkpoints stops the run before training. Throws std::invalid_argument naming
// the path, the rank and the reason.
void check_writable_dir(const std::string& dir, int rank);

// The newest complete checkpoint directory under save_dir ("" when none).
std::string last_checkpoint(const std::string& save_dir);
// Throws std::invalid_argument when dir is no complete checkpoint: one that does not exist is
// reported with the checkpoints its parent folder holds.
void check_checkpoint_dir(const std::string& dir);
// Why the checkpoint dir cannot be restored ("" when it can): incomplete, or a file (model.bin,
// every rank<r>.bin) that fails verification. Reads every file.
std::string checkpoint_problem(const std::string& dir);
// The checkpoint a run resumes from on its own (no --restore-file): the newest of save_dir
// ("" when none), or when that one fails verification, the newest older one that verifies, with
// `warning` naming both. Throws std::runtime_error when none verifies.
struct ResumePoint {
  std::string dir, warning;
};
ResumePoint checkpoint_to_resume(const std::string& save_dir);
// Marks dir complete and points save_dir/last at it (rank 0, after all ranks wrote).
void commit_checkpoint(const std::string& save_dir, const std::string& dir);
// Removes complete checkpoint directories beyond the newest keep (keep <= 0: keep all).
void prune_checkpoints(const std::string& save_dir, int keep, const std::string& protect);

}  // namespace pn
