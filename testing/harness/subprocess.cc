#include "testing/harness/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"

namespace manyshot::testing {
namespace {

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// In a forked child: stdin from /dev/null, stdout and stderr to the files (opened with
// `open_flags`), a clean signal mask (the test runner may block signals), then argv.
[[noreturn]] void ExecWithFiles(char* const* args, const char* stdout_path, const char* stderr_path,
                                int open_flags) {
  int out = ::open(stdout_path, open_flags, 0644);
  int err = ::open(stderr_path, open_flags, 0644);
  int in = ::open("/dev/null", O_RDONLY);
  dup2(out, 1);
  dup2(err, 2);
  dup2(in, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execv(args[0], args);
  _exit(127);
}

std::vector<char*> ArgvOf(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  return args;
}

}  // namespace

Subprocess::Subprocess(const std::vector<std::string>& argv,
                       const std::filesystem::path& stdout_path,
                       const std::filesystem::path& stderr_path) {
  const std::vector<char*> args = ArgvOf(argv);
  // A child dies with the test process (a crashed or killed test must not leave servers running).
  // The signal follows the forking thread, so only children of the main thread get it: one forked
  // by a short-lived helper thread would otherwise die with that thread.
  const pid_t parent = getpid();
  const bool from_main_thread = parent == gettid();
  pid_ = fork();
  if (pid_ == 0) {
    if (from_main_thread) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the test died before the line above
    }
    ExecWithFiles(args.data(), stdout_path.c_str(), stderr_path.c_str(),
                  O_WRONLY | O_CREAT | O_TRUNC);
  }
}

pid_t StartDaemon(const std::vector<std::string>& argv, const std::filesystem::path& stdout_path,
                  const std::filesystem::path& stderr_path) {
  const std::vector<char*> args = ArgvOf(argv);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // the master goes with the test process
    ExecWithFiles(args.data(), stdout_path.c_str(), stderr_path.c_str(),
                  O_WRONLY | O_CREAT | O_APPEND);
  }
  if (pid > 0) setpgid(pid, pid);  // also here: no race with a kill(-pid) right after
  return pid;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !exit_status_) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

bool Subprocess::Signal(int signal) const { return pid_ > 0 && kill(pid_, signal) == 0; }

std::optional<int> Subprocess::Wait(std::chrono::milliseconds timeout) {
  if (exit_status_) return exit_status_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      exit_status_ = DecodeStatus(status);
      return exit_status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::filesystem::path& work_dir, std::chrono::milliseconds timeout) {
  static int counter = 0;
  std::string stem = "cmd" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  auto out_path = work_dir / (stem + ".out");
  auto err_path = work_dir / (stem + ".err");
  CommandResult result;
  {
    Subprocess process(argv, out_path, err_path);
    auto status = process.Wait(timeout);
    result.exit_status = status.value_or(-1);
  }
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/manyshot-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  path_ = mkdtemp(buf.data());
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old;
  if (value != nullptr && setenv(name, value, 1) != 0) {
    ADD_FAILURE() << "setenv " << name << ": " << std::strerror(errno);
  }
}

ScopedEnv::~ScopedEnv() {
  if (old_) {
    setenv(name_.c_str(), old_->c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

}  // namespace manyshot::testing
