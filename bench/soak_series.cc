#include "bench/soak_series.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

namespace manyshot::bench {

void ReadProcStatus(pid_t pid, double* rss_mib, int* threads) {
  *rss_mib = -1;
  *threads = -1;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) *rss_mib = std::stod(line.substr(6)) / 1024.0;  // kB
    if (line.rfind("Threads:", 0) == 0) *threads = std::stoi(line.substr(8));
  }
}

const char* SoakVerdict::Criterion() {
  return "load cut into thirds by time; RSS levels off when mean(last third) - mean(middle "
         "third) <= max(8 MiB, 2% of the middle); threads when max(last third) <= max(middle "
         "third); at the end of the idle phase neither above its maximum under load or while the "
         "streams closed (RSS + 8 MiB)";
}

SoakVerdict JudgeSoak(const std::vector<SoakSample>& samples, double duration_seconds) {
  SoakVerdict v;
  std::vector<const SoakSample*> middle, last;
  for (const SoakSample& s : samples) {
    if (s.phase == SoakSample::Phase::kDrain) {
      v.threads_drain = s.threads;
      v.rss_drain_mib = s.rss_mib;
    }
    if (s.phase != SoakSample::Phase::kLoad || s.rss_mib < 0) continue;
    v.rss_load_max_mib = std::max(v.rss_load_max_mib, s.rss_mib);
    v.threads_load_max = std::max(v.threads_load_max, s.threads);
    if (s.t_seconds >= 2 * duration_seconds / 3) {
      last.push_back(&s);
    } else if (s.t_seconds >= duration_seconds / 3) {
      middle.push_back(&s);
    }
  }
  v.enough_samples = middle.size() >= 2 && last.size() >= 2;
  if (!v.enough_samples) return v;
  auto mean_rss = [](const std::vector<const SoakSample*>& part) {
    double sum = 0;
    for (const SoakSample* s : part) sum += s->rss_mib;
    return sum / static_cast<double>(part.size());
  };
  auto max_threads = [](const std::vector<const SoakSample*>& part) {
    int m = 0;
    for (const SoakSample* s : part) m = std::max(m, s->threads);
    return m;
  };
  v.rss_middle_mib = mean_rss(middle);
  v.rss_last_mib = mean_rss(last);
  v.rss_growth_mib = v.rss_last_mib - v.rss_middle_mib;
  v.rss_allowed_growth_mib = std::max(8.0, 0.02 * v.rss_middle_mib);
  v.rss_levels_off = v.rss_growth_mib <= v.rss_allowed_growth_mib;
  v.threads_middle_max = max_threads(middle);
  v.threads_last_max = max_threads(last);
  v.threads_level_off = v.threads_last_max <= v.threads_middle_max;

  // Least-squares slope of RSS over the middle and last thirds, per minute.
  std::vector<const SoakSample*> both = middle;
  both.insert(both.end(), last.begin(), last.end());
  double mt = 0, mr = 0;
  for (const SoakSample* s : both) {
    mt += s->t_seconds;
    mr += s->rss_mib;
  }
  mt /= static_cast<double>(both.size());
  mr /= static_cast<double>(both.size());
  double num = 0, den = 0;
  for (const SoakSample* s : both) {
    num += (s->t_seconds - mt) * (s->rss_mib - mr);
    den += (s->t_seconds - mt) * (s->t_seconds - mt);
  }
  v.rss_slope_mib_per_min = den > 0 ? 60.0 * num / den : 0;

  // The last idle sample (or the last sample when there was no idle phase).
  const SoakSample& end = samples.back();
  v.rss_idle_end_mib = end.rss_mib;
  v.threads_idle_end = end.threads;
  v.idle_ok = end.rss_mib <= std::max(v.rss_load_max_mib, v.rss_drain_mib) + 8.0 &&
              end.threads <= std::max(v.threads_load_max, v.threads_drain);
  return v;
}

const char* PhaseName(SoakSample::Phase phase) {
  switch (phase) {
    case SoakSample::Phase::kLoad:
      return "load";
    case SoakSample::Phase::kDrain:
      return "drain";
    case SoakSample::Phase::kIdle:
      return "idle";
  }
  return "?";
}

nlohmann::ordered_json SamplesJson(const std::vector<SoakSample>& samples) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const SoakSample& s : samples) {
    nlohmann::ordered_json j;
    j["t_s"] = s.t_seconds;
    j["phase"] = PhaseName(s.phase);
    j["requests"] = s.requests;
    j["errors"] = s.errors;
    j["p50_ms"] = s.p50_ms;
    j["p99_ms"] = s.p99_ms;
    j["rss_mib"] = s.rss_mib;
    j["threads"] = s.threads;
    j["queue_inputs"] = s.queue_inputs;
    out.push_back(j);
  }
  return out;
}

}  // namespace manyshot::bench
