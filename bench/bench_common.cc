#include "bench/bench_common.h"

#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "bench/percentile.h"
#include "engine/backends/backend_factory.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_target.h"

namespace manyshot::bench {

absl::StatusOr<std::unique_ptr<Backend>> OpenBenchBackend(const std::string& name, int threads,
                                                          std::string* why) {
  if (!name.empty()) {
    auto kind = ParseBackendKind(name);
    if (!kind.ok()) return kind.status();
    *why = "--backend=" + name;
    return CreateBackend(*kind, 0, threads);
  }
  const BackendKind kind = DefaultBackendKind(why);
  auto created = CreateBackend(kind, 0, threads);
  if (!created.ok() && kind == BackendKind::kCuda) {
    *why = std::string(created.status().message());
    return CreateBackend(BackendKind::kCpu, 0, threads);
  }
  return created;
}

Report::Report(std::string subcommand, bool json) : json_(json) {
  figures_["subcommand"] = std::move(subcommand);
  AddText("cpu_target", CpuTargetName());
}

void Report::Add(const std::string& name, double value, const std::string& unit) {
  figures_[name] = value;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%-44s %14.4f %s", name.c_str(), value, unit.c_str());
  lines_.push_back(buf);
  if (echo_) std::fprintf(stderr, "%s\n", buf);
}

void Report::AddText(const std::string& name, const std::string& value) {
  figures_[name] = value;
  lines_.push_back(name + std::string(name.size() < 44 ? 45 - name.size() : 1, ' ') + value);
  if (echo_) std::fprintf(stderr, "%s\n", lines_.back().c_str());
}

void Report::AddJson(const std::string& name, nlohmann::ordered_json value) {
  figures_[name] = std::move(value);
}

void Report::Print() const {
  if (json_) {
    std::printf("%s\n", figures_.dump().c_str());
    return;
  }
  for (const auto& line : lines_) std::printf("%s\n", line.c_str());
}

double MedianSeconds(const std::function<void()>& fn, int repeats) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(Seconds(std::chrono::steady_clock::now() - start));
  }
  return Percentile(std::move(times), 0.5);
}

double SgemmGflops(int m, int n, int k, int threads, int repeats) {
  std::vector<float> a(static_cast<size_t>(m) * k, 0.5f), b(static_cast<size_t>(k) * n, 0.25f),
      c(static_cast<size_t>(m) * n);
  openblas_set_num_threads(threads);
  double seconds = MedianSeconds(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(),
                    n, 0.0f, c.data(), n);
      },
      repeats);
  openblas_set_num_threads(1);  // the CPU backend runs OpenBLAS single-threaded in its own pool
  return 2.0 * m * n * k / seconds / 1e9;
}

std::string BlasKernelDescription() {
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  std::string s = BlasKernelName();
  if (forced != nullptr) s += std::string(" (forced by OPENBLAS_CORETYPE=") + forced + ")";
  return s;
}

}  // namespace manyshot::bench
