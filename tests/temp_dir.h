// A fresh directory under the system's temporary directory for one test, removed with it. The
// process id in its name keeps tests that ctest runs in parallel apart.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace pn::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace pn::test
