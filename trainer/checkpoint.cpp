#include "trainer/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace pn {

namespace {
constexpr char kMagic[8] = {'P', 'N', 'C', 'K', 'P', 'T', '0', '1'};

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno));
    }
    p += w;
    n -= size_t(w);
  }
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

uint32_t crc(uint32_t c, const void* data, size_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = uInt(std::min<size_t>(n, 1u << 30));
    c = uint32_t(crc32(c, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return c;
}
}  // namespace

void write_checkpoint_file(const std::string& path, const CheckpointFile& f) {
  const std::string header = f.header.dump();
  const uint64_t header_len = header.size(), payload_len = f.payload.size();
  uint32_t c = crc(0, kMagic, 8);
  c = crc(c, &header_len, 8);
  c = crc(c, header.data(), header.size());
  c = crc(c, &payload_len, 8);
  c = crc(c, f.payload.data(), f.payload.size());
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create '" + tmp + "': " + std::strerror(errno));
  try {
    write_all(fd, kMagic, 8, tmp);
    write_all(fd, &header_len, 8, tmp);
    write_all(fd, header.data(), header.size(), tmp);
    write_all(fd, &payload_len, 8, tmp);
    write_all(fd, f.payload.data(), f.payload.size(), tmp);
    write_all(fd, &c, 4, tmp);
    if (::fsync(fd) != 0) throw std::runtime_error("cannot fsync '" + tmp + "': " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + err);
  }
  fsync_dir(fs::path(path).parent_path());
}

CheckpointFile read_checkpoint_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read checkpoint file '" + path + "'");
  std::vector<char> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Every damage reads the same way, naming the file; the detail says which part gave it away.
  auto corrupt = [&](const std::string& why) {
    return CorruptCheckpoint("checkpoint file '" + path + "' is corrupt (" + why + ")",
                             "restore another checkpoint (--restore-file) or start afresh");
  };
  if (all.size() < 8 + 8 + 8 + 4) throw corrupt("truncated: " + std::to_string(all.size()) + " bytes");
  if (std::memcmp(all.data(), kMagic, 8) != 0)
    throw corrupt("no pntrain checkpoint magic: another file, or damaged");
  uint64_t header_len = 0, payload_len = 0;
  std::memcpy(&header_len, all.data() + 8, 8);
  if (header_len > all.size() - 28) throw corrupt("truncated or a damaged header length");
  std::memcpy(&payload_len, all.data() + 16 + header_len, 8);
  if (24 + header_len + payload_len + 4 != all.size())
    throw corrupt("truncated or padded: the lengths in it do not add up to its size");
  // The CRC32 covers magic, lengths, the JSON header and the payload: it is checked before the
  // header is parsed, so that damage inside the header is reported as damage.
  uint32_t stored = 0;
  std::memcpy(&stored, all.data() + all.size() - 4, 4);
  if (crc(0, all.data(), all.size() - 4) != stored) throw corrupt("CRC32 mismatch");
  CheckpointFile f;
  f.header = nlohmann::json::parse(all.begin() + 16, all.begin() + 16 + header_len, nullptr,
                                   /*allow_exceptions=*/false);
  if (!f.header.is_object()) throw corrupt("its header is not a JSON object");
  f.payload.assign(all.begin() + 24 + header_len, all.end() - 4);
  return f;
}

nlohmann::json read_checkpoint_header(const std::string& path) {
  // The whole file is read: its CRC32 is the only guard of the header's bytes.
  return read_checkpoint_file(path).header;
}

void write_done_marker(const std::string& dir) {
  const std::string path = (fs::path(dir) / "DONE").string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create '" + path + "': " + std::strerror(errno));
  try {
    write_all(fd, "complete\n", 9, path);
    if (::fsync(fd) != 0)
      throw std::runtime_error("cannot fsync '" + path + "': " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  fsync_dir(dir);
}

void check_writable_dir(const std::string& dir, int rank) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("--save-dir '" + dir + "' cannot hold checkpoints" +
                                (rank > 0 ? " on rank " + std::to_string(rank) : "") + ": " +
                                why + "; give a writable directory");
  };
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create it (" + ec.message() + ")");
  if (!fs::is_directory(dir)) fail("it is not a directory");
  const std::string probe = (fs::path(dir) / (".pntrain_probe." + std::to_string(rank) + "." +
                                               std::to_string(::getpid())))
                                .string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail(std::string("cannot create a file in it (") + std::strerror(errno) + ")");
  const bool ok = ::write(fd, "probe\n", 6) == 6 && ::fsync(fd) == 0;
  const std::string why = std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  if (!ok) fail("cannot write a file in it (" + why + ")");
}

namespace {
// The complete checkpoint_<update> directories under save_dir, oldest first.
std::vector<std::pair<long, fs::path>> numbered_checkpoints(const std::string& save_dir) {
  std::vector<std::pair<long, fs::path>> dirs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(save_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("checkpoint_", 0) == 0 && name.size() > 11 &&
        name.find_first_not_of("0123456789", 11) == std::string::npos &&
        fs::exists(e.path() / "DONE"))
      dirs.emplace_back(std::stol(name.substr(11)), e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// "checkpoint_2, checkpoint_4 and checkpoint_best": the complete checkpoints in folder.
std::string checkpoints_in(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& [update, dir] : numbered_checkpoints(folder.string()))
    names.push_back(dir.filename().string());
  std::vector<std::string> named;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec))
    if (e.is_directory() && fs::exists(e.path() / "DONE") &&
        std::find(names.begin(), names.end(), e.path().filename().string()) == names.end())
      named.push_back(e.path().filename().string());
  std::sort(named.begin(), named.end());
  names.insert(names.end(), named.begin(), named.end());
  std::string list;
  for (size_t i = 0; i < names.size(); ++i)
    list += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return list;
}
}  // namespace

std::string last_checkpoint(const std::string& save_dir) {
  std::ifstream in(fs::path(save_dir) / "last");
  std::string name;
  if (!(in >> name)) return "";
  const fs::path dir = fs::path(save_dir) / name;
  return fs::exists(dir / "DONE") ? dir.string() : "";
}

void check_checkpoint_dir(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "DONE")) return;
  if (fs::exists(dir))
    throw std::invalid_argument("'" + dir + "' is not a complete checkpoint (no DONE marker): " +
                                "pass another --restore-file");
  const fs::path parent = fs::path(dir).lexically_normal().parent_path();
  const fs::path folder = parent.empty() ? fs::path(".") : parent;
  std::string where;
  if (!fs::is_directory(folder)) {
    where = "its folder '" + folder.string() + "' does not exist either";
  } else {
    const std::string held = checkpoints_in(folder);
    where = held.empty() ? "'" + folder.string() + "' holds no checkpoint"
                         : "'" + folder.string() + "' holds " + held;
  }
  throw std::invalid_argument("--restore-file '" + dir + "': there is no checkpoint there (no " +
                              "such file or directory); " + where);
}

std::string checkpoint_problem(const std::string& dir) {
  if (!fs::exists(fs::path(dir) / "DONE"))
    return "'" + dir + "' is not a complete checkpoint (no DONE marker)";
  try {
    const CheckpointFile model = read_checkpoint_file(dir + "/model.bin");
    const int world = model.header.at("world_size").get<int>();
    for (int r = 0; r < world; ++r) read_checkpoint_file(dir + "/rank" + std::to_string(r) + ".bin");
  } catch (const CorruptCheckpoint& e) {
    return e.damage;
  } catch (const std::exception& e) {
    return "checkpoint '" + dir + "' cannot be read (" + e.what() + ")";
  }
  return "";
}

ResumePoint checkpoint_to_resume(const std::string& save_dir) {
  const std::string newest = last_checkpoint(save_dir);
  if (newest.empty()) return {};
  const std::string problem = checkpoint_problem(newest);
  if (problem.empty()) return {newest, ""};
  // `last` names a checkpoint_<update>; only older ones stand in for it.
  const std::string name = fs::path(newest).filename().string();
  const long newest_update = std::stol("0" + name.substr(std::min<size_t>(11, name.size())));
  const auto dirs = numbered_checkpoints(save_dir);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    if (it->first >= newest_update) continue;
    if (checkpoint_problem(it->second.string()).empty())
      return {it->second.string(), "the newest checkpoint " + newest + " fails verification: " +
                                       problem + "; resuming from " + it->second.string() +
                                       ", the newest one of --save-dir that verifies"};
  }
  throw std::runtime_error(problem + ", and --save-dir '" + save_dir + "' holds no older " +
                           "checkpoint that verifies: restore one with --restore-file, or " +
                           "move '" + newest + "' away to start afresh");
}

void commit_checkpoint(const std::string& save_dir, const std::string& dir) {
  write_done_marker(dir);
  const fs::path last = fs::path(save_dir) / "last", tmp = fs::path(save_dir) / "last.tmp";
  {
    std::ofstream out(tmp);
    out << fs::path(dir).filename().string() << "\n";
    out.flush();
    if (!out) throw std::runtime_error("cannot write '" + tmp.string() + "'");
  }
  fs::rename(tmp, last);
  fsync_dir(save_dir);
}

void prune_checkpoints(const std::string& save_dir, int keep, const std::string& protect) {
  if (keep <= 0) return;
  auto dirs = numbered_checkpoints(save_dir);
  std::reverse(dirs.begin(), dirs.end());
  for (size_t i = size_t(keep); i < dirs.size(); ++i)
    if (fs::path(protect).filename() != dirs[i].second.filename()) fs::remove_all(dirs[i].second);
}

}  // namespace pn
