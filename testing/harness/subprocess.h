// Starting and stopping real binaries (the server, the CLI) from tests.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace manyshot::testing {

// A child process with stdout and stderr sent to files. The destructor kills it if still running.
class Subprocess {
 public:
  Subprocess(const std::vector<std::string>& argv, const std::filesystem::path& stdout_path,
             const std::filesystem::path& stderr_path);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  bool Signal(int signal) const;
  // The exit status (0-255, or 128+signal when killed) or nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

// Starts a daemon (a proxy's master process) in a process group of its own, so that kill(-pid)
// reaches its workers too: stdout and stderr appended to the files, a clean signal mask, killed
// with the test process. Its pid, or -1. The caller waits for it.
pid_t StartDaemon(const std::vector<std::string>& argv, const std::filesystem::path& stdout_path,
                  const std::filesystem::path& stderr_path);

// Runs a command to completion; returns its exit status and stdout.
struct CommandResult {
  int exit_status = -1;
  std::string out;
  std::string err;
};
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::filesystem::path& work_dir,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60));

std::string ReadFile(const std::filesystem::path& path);

// A fresh empty directory under the test temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Sets an environment variable (or leaves it as it is, for a null value), which the processes
// started meanwhile inherit, and restores it when the scope ends, however it ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// The emulated CUDA plugin (testing/simt) for the servers started in this scope, with deferred
// streams (SIMT_DEFERRED_STREAMS: a stream's work runs when the server waits for it).
struct ScopedEmulatedCudaPlugin {
  explicit ScopedEmulatedCudaPlugin(const char* plugin_path)
      : plugin("MANYSHOT_CUDA_PLUGIN", plugin_path), deferred("SIMT_DEFERRED_STREAMS", "1") {}
  ScopedEnv plugin;
  ScopedEnv deferred;
};

}  // namespace manyshot::testing
