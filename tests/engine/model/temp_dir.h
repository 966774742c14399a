// Scratch directories for tests: TempDir for one test, ProcessScratchDir() for a whole test
// process. Both are removed when their owner ends, so that a test run leaves nothing in /tmp
// (ctest runs every test in its own process: a directory left per process filled CI's disk).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace manyshot::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "manyshot_model_") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror(("mkdtemp " + tmpl).c_str());
      std::abort();
    }
    path_ = tmpl;
  }
  // Only the process that made the directory removes it: a forked child that exits (a death
  // test, a helper before its exec) leaves its parent's directory alone.
  ~TempDir() {
    if (::getpid() != owner_) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  pid_t owner_ = ::getpid();
  std::filesystem::path path_;
};

namespace internal {

inline constexpr const char kProcessScratchPrefix[] = "manyshot-test-process-";

// Removes the process scratch directories of test processes that died without removing their
// own (a crash, a SIGKILL): the pid in the name no longer runs, and the directory is an hour
// old (so that a live process of another pid namespace sharing /tmp is left alone).
inline void SweepDeadProcessScratchDirs() {
  const std::string prefix = kProcessScratchPrefix;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code age_ec;
    const auto written = std::filesystem::last_write_time(entry.path(), age_ec);
    if (age_ec || std::filesystem::file_time_type::clock::now() - written < std::chrono::hours(1)) {
      continue;
    }
    std::filesystem::remove_all(entry.path(), age_ec);
  }
}

}  // namespace internal

// One scratch directory for the whole test process (models written once and shared by its
// tests), removed at exit; named by pid so that a later process can sweep it after a crash.
inline const std::filesystem::path& ProcessScratchDir() {
  static const TempDir dir([] {
    internal::SweepDeadProcessScratchDirs();
    return std::string(internal::kProcessScratchPrefix) + std::to_string(::getpid()) + "-";
  }());
  return dir.path();
}

inline void WriteFile(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

inline std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace manyshot::testing
