// Shared pieces of manyshot-bench: timing, the same-run sgemm peak, figure reporting in text or
// one JSON object.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "nlohmann/json.hpp"

namespace manyshot::bench {

// The backend a subcommand runs on: `name` ("cpu" or "cuda") when given, else CUDA when a GPU can
// be used, else the CPU. `why` says which and why.
absl::StatusOr<std::unique_ptr<Backend>> OpenBenchBackend(const std::string& name, int threads,
                                                          std::string* why);

// Collects named figures; prints "name: value unit" lines, or one JSON object with --json.
class Report {
 public:
  // Starts with the subcommand and the CPU kernels' instruction set (cpu_target).
  Report(std::string subcommand, bool json);
  void Add(const std::string& name, double value, const std::string& unit = "");
  void AddText(const std::string& name, const std::string& value);
  // A structured figure (e.g. a time series) for --json only; the text output prints its own.
  void AddJson(const std::string& name, nlohmann::ordered_json value);
  void Print() const;
  // Also writes each figure to stderr as it is added, so a run stopped before Print() (a time
  // limit on a GPU machine) still leaves the figures it reached.
  void EchoToStderr() { echo_ = true; }

 private:
  bool json_;
  bool echo_ = false;
  nlohmann::ordered_json figures_;
  std::vector<std::string> lines_;
};

inline double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Median wall time of fn over `repeats` runs after one warm-up run (Percentile(times, 0.5): the
// mean of the two middle runs when `repeats` is even).
double MedianSeconds(const std::function<void()>& fn, int repeats);

// OpenBLAS sgemm GFLOP/s for an m x n x k product using OpenBLAS's own threads (`threads`), the
// best this machine's BLAS does; the same-run reference for every efficiency figure.
double SgemmGflops(int m, int n, int k, int threads, int repeats);

// The kernel set OpenBLAS picked and whether OPENBLAS_CORETYPE forced it.
std::string BlasKernelDescription();

}  // namespace manyshot::bench
