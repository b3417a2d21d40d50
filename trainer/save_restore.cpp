// How the trainer writes and restores its checkpoints (the file format, verification and finding
// them: checkpoint.h): rank 0's parameters and Adam moments with the model's flags and shape,
// every rank's norm state, committed when all ranks' files are on disk.
#include <glog/logging.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kernels/device.h"
#include "kernels/kernels.h"
#include "trainer/checkpoint.h"
#include "trainer/trainer.h"

namespace pn {

namespace {
// The model shape a checkpoint must match: every parameter's name and shape.
nlohmann::json param_table(const ParamStore<float>& p) {
  nlohmann::json t = nlohmann::json::array();
  for (const auto& s : p.specs) t.push_back({{"name", s.name}, {"shape", s.shape}});
  return t;
}
template <class V>
void append(std::vector<char>* out, const V& v) {
  const char* b = reinterpret_cast<const char*>(v.data());
  out->insert(out->end(), b, b + v.size() * sizeof(v[0]));
}
}  // namespace

bool Trainer::save_checkpoint(int64_t update, const std::string& name, int keep, bool final) {
  namespace fs = std::filesystem;
  // A named checkpoint (checkpoint_best) is written beside its old copy and swapped in.
  const std::string final_dir =
      (fs::path(opt_.save_dir) / (name.empty() ? "checkpoint_" + std::to_string(update) : name))
          .string();
  const std::string dir = name.empty() ? final_dir : final_dir + ".new";
  const std::string previous =
      last_checkpoint_.empty() ? "no checkpoint of this run is on disk yet"
                               : "the previous checkpoint " + last_checkpoint_ + " is intact";
  if (!k::all_finite(params().data.data(), params().size())) {
    if (comm_.rank() == 0)
      LOG(ERROR) << "checkpoint " << final_dir << " not saved: parameters are not finite; "
                 << previous;
    return false;
  }
  std::string error;
  // Only what this save created is removed on failure (not a file that was in the way). Rank 0
  // looks before any rank creates the directory: the all-reduce holds every rank until it has.
  double existed = comm_.rank() == 0 && name.empty() && fs::exists(dir) ? 1.0 : 0.0;
  comm_.allreduce_max(&existed, 1);
  const bool ours = existed == 0;
  // Every rank learns whether all files are on disk; the lowest failing rank reports, once.
  auto agree = [&]() {
    double who = error.empty() ? 0.0 : double(comm_.size() - comm_.rank());
    comm_.allreduce_max(&who, 1);
    if (who == 0) return true;
    const int first = comm_.size() - int(who);
    if (comm_.rank() == first)
      LOG(ERROR) << "checkpoint " << final_dir << " not saved"
                 << (comm_.size() > 1 ? " (rank " + std::to_string(first) + ")" : std::string())
                 << ": " << error << "; " << previous
                 << (final ? "" : "; training continues");
    if (comm_.rank() == 0 && ours) {  // no half-written checkpoint_N/ or checkpoint_best.new/
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
    comm_.barrier();
    return false;
  };
  try {
    fs::create_directories(dir);
    const Fault fault = parse_fault(opt_.debug_fault);
    if (fault.kind == "savefail" && fault.update == update && fault.rank == comm_.rank())
      throw std::runtime_error("cannot write '" + dir + "' (--debug-fault " + opt_.debug_fault +
                               ")");
    CheckpointFile rank_file;
    rank_file.header = {{"update", update}, {"rank", comm_.rank()}, {"world_size", comm_.size()}};
    nlohmann::json tensors = nlohmann::json::array();
    const auto norms = this->norms();
    for (size_t l = 0; l < norms.size(); ++l)
      for (const StateTensor& t : norms[l]->state()) {
        tensors.push_back({{"layer", l}, {"name", t.name}, {"n", t.n}});
        append(&rank_file.payload, read_state(t));
      }
    rank_file.header["state"] = tensors;
    write_checkpoint_file(dir + "/rank" + std::to_string(comm_.rank()) + ".bin", rank_file);
    if (comm_.rank() == 0) {
      CheckpointFile model_file;
      model_file.header = {{"format", "pntrain-checkpoint-1"},
                           {"update", update},
                           {"world_size", comm_.size()},
                           {"sync_group_size", sync_group_ranks(opt_, comm_.size())},
                           {"seed", opt_.seed},
                           {"tokens_per_update",
                            int64_t(opt_.max_tokens) * comm_.size() * opt_.update_freq},
                           // The run's flags, so that a resume and --eval-only need none
                           // repeated (trainer/options.h).
                           {"options", checkpoint_options(opt_)},
                           {"vocab", task_->vocab_fingerprint()},
                           {"params", param_table(params())},
                           {"validations_without_gain", validations_without_gain_}};
      if (std::isfinite(best_valid_)) model_file.header["best_valid_loss"] = best_valid_;
      if (validation_pending_) model_file.header["validation_pending"] = true;
      if (!provenance_.is_null()) model_file.header["provenance"] = provenance_;  // this attempt's
      // Packed: the tensors alone, whatever padding this device reserved (layers/params.h).
      const ParamStore<float>& p = params();
      model_file.payload.reserve(3 * p.packed_size() * sizeof(float));
      append(&model_file.payload, p.packed(p.data.to_host()));
      append(&model_file.payload, p.packed(adam_m_.to_host()));
      append(&model_file.payload, p.packed(adam_v_.to_host()));
      write_checkpoint_file(dir + "/model.bin", model_file);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!agree()) return false;
  if (comm_.rank() == 0) {
    try {
      if (name.empty()) {
        commit_checkpoint(opt_.save_dir, dir);
        prune_checkpoints(opt_.save_dir, keep, dir);
      } else {
        write_done_marker(dir);
        fs::remove_all(final_dir + ".old");
        if (fs::exists(final_dir)) fs::rename(final_dir, final_dir + ".old");
        fs::rename(dir, final_dir);
        fs::remove_all(final_dir + ".old");
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!agree()) return false;
  if (comm_.rank() == 0) LOG(INFO) << "saved checkpoint " << final_dir;
  if (name.empty()) last_checkpoint_ = final_dir;
  return true;
}

std::map<std::string, std::string> checkpoint_flags(const std::string& dir) {
  return stored_flags(read_checkpoint_header(dir + "/model.bin"));
}

void Trainer::restore_checkpoint(const std::string& dir) {
  check_checkpoint_dir(dir);
  const CheckpointFile m = read_checkpoint_file(dir + "/model.bin");
  const nlohmann::json want = param_table(params());
  const nlohmann::json& have = m.header.at("params");
  if (have != want) {
    std::string what = "a different number of tensors";
    for (size_t i = 0; i < std::min(have.size(), want.size()); ++i)
      if (have[i] != want[i]) {
        what = "tensor " + have[i].dump() + " where this model has " + want[i].dump();
        break;
      }
    throw std::runtime_error("checkpoint '" + dir + "' is from another model shape (" + what +
                             "): use the --decoder-*, --norm* flags and data it was trained with");
  }
  // Older checkpoints carry no fingerprint; the parameter shapes above still guard them.
  if (m.header.contains("vocab") && m.header["vocab"].get<std::string>() != task_->vocab_fingerprint())
    throw std::invalid_argument(
        "checkpoint '" + dir + "' was trained on another vocabulary (" +
        m.header["vocab"].get<std::string>() + ") than --data " + opt_.data + " gives (" +
        task_->vocab_fingerprint() + "): use the data it was trained with");
  const size_t n = params().packed_size();
  if (m.payload.size() != 3 * n * sizeof(float))
    throw std::runtime_error("checkpoint '" + dir + "/model.bin' has the wrong payload size");
  const float* saved = reinterpret_cast<const float*>(m.payload.data());
  params().data.from_host(params().unpacked(saved));
  adam_m_.from_host(params().unpacked(saved + n));
  adam_v_.from_host(params().unpacked(saved + 2 * n));
  start_update_ = m.header.at("update").get<int64_t>();
  restored_ = true;
  if (m.header.contains("best_valid_loss")) best_valid_ = m.header["best_valid_loss"].get<double>();
  validations_without_gain_ = m.header.value("validations_without_gain", 0);
  validation_pending_ = m.header.value("validation_pending", false);
  const int saved_world = m.header.at("world_size").get<int>();
  // Sync groups (older checkpoints: one group of every rank) share their norm state.
  const int saved_group = m.header.contains("sync_group_size")
                              ? m.header["sync_group_size"].get<int>()
                              : saved_world;
  const int group = sync_group_ranks(opt_, comm_.size());
  // Norm running state: this rank's own file, or the mean over the saved ranks.
  const auto norms = this->norms();
  std::vector<int> sources;
  if (saved_world == comm_.size() && saved_group == group) {
    sources = {comm_.rank()};
  } else {
    for (int r = 0; r < saved_world; ++r) sources.push_back(r);
  }
  std::vector<std::vector<double>> sum, first;  // first: the first saved rank's state
  bool ranks_differ = false;  // some saved rank's state is not rank 0's: the mean is new state
  for (int r : sources) {
    const CheckpointFile f = read_checkpoint_file(dir + "/rank" + std::to_string(r) + ".bin");
    const double* p = reinterpret_cast<const double*>(f.payload.data());
    size_t k = 0, off = 0;
    for (size_t l = 0; l < norms.size(); ++l)
      for (const StateTensor& t : norms[l]->state()) {
        const auto& entry = f.header.at("state").at(k);
        if (entry.at("name") != t.name || entry.at("n").get<size_t>() != t.n)
          throw std::runtime_error("checkpoint '" + dir + "' holds other norm state than this "
                                   "model (" + entry.dump() + "): use the same --norm* flags");
        if (sum.size() <= k) sum.emplace_back(t.n, 0.0), first.emplace_back(p + off, p + off + t.n);
        for (size_t i = 0; i < t.n; ++i) {
          ranks_differ = ranks_differ || p[off + i] != first[k][i];
          sum[k][i] += p[off + i];
        }
        off += t.n, ++k;
      }
  }
  if (ranks_differ && comm_.rank() == 0)
    LOG(WARNING) << "checkpoint " << dir << " was saved by " << saved_world
                 << " ranks in sync groups of " << saved_group << ", resuming on "
                 << comm_.size() << " in groups of " << group
                 << ": rank-local norm state starts from the mean over the saved ranks";
  size_t k = 0;
  for (size_t l = 0; l < norms.size(); ++l)
    for (const StateTensor& t : norms[l]->state()) {
      for (size_t i = 0; i < t.n; ++i) sum[k][i] /= double(sources.size());
      write_state(t, sum[k].data());
      ++k;
    }
  synchronize();  // the payloads go out of scope
  if (comm_.rank() == 0) LOG(INFO) << "restored " << dir << " at update " << start_update_;
}

}  // namespace pn
