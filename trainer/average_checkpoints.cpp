#include "trainer/average_checkpoints.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "trainer/checkpoint.h"

namespace fs = std::filesystem;

namespace pn {

std::vector<std::string> newest_checkpoints(const std::string& save_dir, int num) {
  if (!fs::is_directory(save_dir))
    throw std::runtime_error("'" + save_dir + "' is not a directory: pass the --save-dir of a run");
  std::vector<std::pair<long long, std::string>> found;
  for (const auto& e : fs::directory_iterator(save_dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("checkpoint_", 0) != 0 || !fs::exists(e.path() / "DONE"))
      continue;
    const std::string num_part = name.substr(11);
    if (num_part.empty() || num_part.find_first_not_of("0123456789") != std::string::npos)
      continue;  // checkpoint_best, checkpoint_avg
    found.emplace_back(std::stoll(num_part), e.path().string());
  }
  std::sort(found.begin(), found.end());
  if (int(found.size()) < num)
    throw std::runtime_error("'" + save_dir + "' holds " + std::to_string(found.size()) +
                             " complete checkpoint_<update> directories, fewer than --num " +
                             std::to_string(num) + ": lower --num or save more often");
  std::vector<std::string> out;
  for (size_t i = found.size() - size_t(num); i < found.size(); ++i) out.push_back(found[i].second);
  return out;
}

namespace {
// Averages the first `count` floats (T float) or doubles of each payload; the rest is taken
// from the newest file.
template <class T>
void average_payloads(std::vector<CheckpointFile>& files, size_t count, const std::string& what,
                      const std::vector<std::string>& inputs,
                      const std::vector<size_t>& keep_newest = {}) {
  CheckpointFile& out = files.back();
  for (size_t f = 0; f + 1 < files.size(); ++f)
    if (files[f].payload.size() != out.payload.size())
      throw std::runtime_error(inputs[f] + "/" + what + " has another size than " +
                               inputs.back() + "/" + what + ": checkpoints of one run only");
  T* acc = reinterpret_cast<T*>(out.payload.data());
  std::vector<double> sum(count, 0.0);
  for (const CheckpointFile& file : files) {
    const T* p = reinterpret_cast<const T*>(file.payload.data());
    for (size_t i = 0; i < count; ++i) sum[i] += double(p[i]);
  }
  std::vector<char> keep(count, 0);
  for (size_t i : keep_newest) keep[i] = 1;
  for (size_t i = 0; i < count; ++i)
    if (!keep[i]) acc[i] = T(sum[i] / double(files.size()));
}
}  // namespace

void average_checkpoints(const std::vector<std::string>& inputs, const std::string& output) {
  if (inputs.empty()) throw std::runtime_error("no checkpoints to average");
  // model.bin: parameters (the first third of the payload) averaged.
  std::vector<CheckpointFile> models;
  for (const std::string& dir : inputs) models.push_back(read_checkpoint_file(dir + "/model.bin"));
  for (size_t f = 0; f < models.size(); ++f)
    if (models[f].header.at("params") != models.back().header.at("params") ||
        models[f].header.at("world_size") != models.back().header.at("world_size"))
      throw std::runtime_error("'" + inputs[f] + "' has another model shape or world size than '" +
                               inputs.back() + "': average checkpoints of one run only");
  const size_t nparam = models.back().payload.size() / (3 * sizeof(float));
  average_payloads<float>(models, nparam, "model.bin", inputs);
  CheckpointFile model = models.back();
  model.header["averaged"] = inputs;
  // rank<r>.bin: running norm statistics averaged; PN's t stays the newest.
  const int world = model.header.at("world_size").get<int>();
  std::vector<CheckpointFile> rank_out;
  for (int r = 0; r < world; ++r) {
    std::vector<CheckpointFile> files;
    for (const std::string& dir : inputs)
      files.push_back(read_checkpoint_file(dir + "/rank" + std::to_string(r) + ".bin"));
    std::vector<size_t> keep;
    size_t off = 0;
    for (const auto& t : files.back().header.at("state")) {
      const size_t n = t.at("n").get<size_t>();
      if (t.at("name") == "t")
        for (size_t i = 0; i < n; ++i) keep.push_back(off + i);
      off += n;
    }
    average_payloads<double>(files, off, "rank" + std::to_string(r) + ".bin", inputs, keep);
    rank_out.push_back(files.back());
  }
  fs::remove_all(output);
  fs::create_directories(output);
  write_checkpoint_file(output + "/model.bin", model);
  for (int r = 0; r < world; ++r)
    write_checkpoint_file(output + "/rank" + std::to_string(r) + ".bin", rank_out[size_t(r)]);
  std::ofstream(fs::path(output) / "DONE") << "complete\n";
}

}  // namespace pn
