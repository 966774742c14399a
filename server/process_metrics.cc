#include "server/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "prometheus/client_metric.h"
#include "prometheus/metric_type.h"

namespace manyshot::server {
namespace {

prometheus::MetricFamily Family(const std::string& name, const std::string& help,
                                prometheus::MetricType type, double value) {
  prometheus::MetricFamily family{name, help, type, {}};
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(metric);
  return family;
}

int CountOpenFds() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ++count;
    }
    closedir(dir);
    --count;  // the descriptor opendir itself holds
  }
  return count;
}

}  // namespace

ProcessMetrics::ProcessMetrics() {
  // Field 22 of /proc/self/stat is the start time in clock ticks since boot.
  std::ifstream stat("/proc/self/stat");
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::istringstream fields(content.substr(content.rfind(')') + 2));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && (fields >> field); ++i) {
    if (i == 22) start_ticks = std::stoull(field);
  }
  double boot_time = 0;
  std::ifstream proc_stat("/proc/stat");
  for (std::string line; std::getline(proc_stat, line);) {
    if (line.rfind("btime ", 0) == 0) boot_time = std::stod(line.substr(6));
  }
  start_time_seconds_ = boot_time + static_cast<double>(start_ticks) / sysconf(_SC_CLK_TCK);
}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  using prometheus::MetricType;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  double cpu = usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 + usage.ru_stime.tv_sec +
               usage.ru_stime.tv_usec * 1e-6;
  long page = sysconf(_SC_PAGESIZE);
  unsigned long long vm_pages = 0, rss_pages = 0;
  std::ifstream statm("/proc/self/statm");
  statm >> vm_pages >> rss_pages;
  rlimit fd_limit{};
  getrlimit(RLIMIT_NOFILE, &fd_limit);
  return {
      Family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
             MetricType::Counter, cpu),
      Family("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge,
             static_cast<double>(rss_pages * page)),
      Family("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge,
             static_cast<double>(vm_pages * page)),
      Family("process_open_fds", "Number of open file descriptors.", MetricType::Gauge,
             CountOpenFds()),
      Family("process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge,
             static_cast<double>(fd_limit.rlim_cur)),
      Family("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
             MetricType::Gauge, start_time_seconds_),
  };
}

}  // namespace manyshot::server
