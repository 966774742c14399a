// manyshot-bench soak's time series: one sample every few seconds (requests and errors of the
// window, its latency percentiles, the server's RSS, threads and queue depth), and the verdict on
// whether RSS and threads level off.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace manyshot::bench {

struct SoakSample {
  double t_seconds = 0;  // since the load started
  // load: the streams run; drain: the window in which they were stopped and closed; idle: after.
  enum class Phase { kLoad, kDrain, kIdle } phase = Phase::kLoad;
  long requests = 0;  // answered in this window
  long errors = 0;    // failed in this window
  double p50_ms = 0;  // latency percentiles of this window's requests (0: none)
  double p99_ms = 0;
  double rss_mib = -1;       // server VmRSS (-1: unknown)
  int threads = -1;          // server threads (-1: unknown)
  double queue_inputs = -1;  // manyshot_queue_inputs from /metrics (-1: unknown)
};

// VmRSS (MiB) and Threads from /proc/PID/status; -1 where unreadable.
void ReadProcStatus(pid_t pid, double* rss_mib, int* threads);

// Whether RSS and threads level off under load: the load phase is cut into thirds by time and the
// last third is compared with the middle one (the first third holds the warm-up: allocator pools,
// gRPC threads and caches growing to their working size).
//   RSS levels off   when mean(last third) - mean(middle third) <= max(8 MiB, 2% of the middle);
//   threads level off when max(last third) <= max(middle third);
// and at the end of the idle phase neither is above its maximum under load or in the drain sample
// (RSS allowing 8 MiB). The drain is allowed its own peak: closing all streams at once makes
// gRPC's callback thread pool grow once (21 -> 24 threads), and it stays that size, without
// growing again, over repeated rounds of load against the same server.
struct SoakVerdict {
  bool enough_samples = false;  // at least two samples in each third
  double rss_middle_mib = 0, rss_last_mib = 0, rss_growth_mib = 0, rss_allowed_growth_mib = 0;
  double rss_slope_mib_per_min = 0;  // least squares over the last two thirds
  int threads_middle_max = 0, threads_last_max = 0, threads_load_max = 0, threads_idle_end = 0;
  int threads_drain = 0;
  double rss_load_max_mib = 0, rss_idle_end_mib = 0, rss_drain_mib = 0;
  bool rss_levels_off = false, threads_level_off = false, idle_ok = false;
  bool levels_off() const {
    return enough_samples && rss_levels_off && threads_level_off && idle_ok;
  }
  static const char* Criterion();
};

SoakVerdict JudgeSoak(const std::vector<SoakSample>& samples, double duration_seconds);

const char* PhaseName(SoakSample::Phase phase);

nlohmann::ordered_json SamplesJson(const std::vector<SoakSample>& samples);

}  // namespace manyshot::bench
