#include "server/config_check.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backends/backend_factory.h"
#include "server/dtype_flag.h"
#include "server/host_port.h"

namespace manyshot::server {

namespace {

// One numeric setting and the closed range it must lie in.
struct Range {
  const char* flag;
  int64_t value;
  int64_t min;
  int64_t max;
};

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

int64_t Clamped(uint64_t value) {
  return value > static_cast<uint64_t>(kUnbounded) ? kUnbounded : static_cast<int64_t>(value);
}

absl::Status CheckRange(const Range& r) {
  if (r.value >= r.min && r.value <= r.max) return absl::OkStatus();
  std::string allowed = r.max == kUnbounded ? absl::StrCat("at least ", r.min)
                                            : absl::StrCat("from ", r.min, " to ", r.max);
  return absl::InvalidArgumentError(
      absl::StrCat("--", r.flag, "=", r.value, ": must be ", allowed));
}

std::vector<Range> NumericRanges(const ServerConfig& c) {
  // gRPC takes message sizes as int.
  constexpr int64_t kMaxMessage = std::numeric_limits<int>::max();
  return {
      {"threads", c.threads, 0, 4096},
      {"device", c.device, 0, 1023},
      {"shutdown_grace_seconds", c.shutdown_grace_seconds, 0, 3600},
      {"shutdown_notice_seconds", c.shutdown_notice_seconds, 0, 3600},
      {"max_message_bytes", Clamped(c.max_message_bytes), 4096, kMaxMessage},
      {"batch_window_ms", c.batch_window_ms, 0, 3600000},
      {"max_batch_size", c.max_batch_size, 1, 65536},
      {"max_queue_inputs", c.max_queue_inputs, 1, kUnbounded},
      {"preparation_threads", c.preparation_threads, 0, 4096},
      {"max_concurrent_creates", c.max_concurrent_creates, 1, 64},
      {"max_demonstrations", Clamped(c.max_demonstrations), 1, kUnbounded},
      {"max_query_context_tokens", Clamped(c.max_query_context_tokens), 1, kUnbounded},
      {"engine_turn_tokens", Clamped(c.engine_turn_tokens), 1, kUnbounded},
      {"max_input_bytes", Clamped(c.max_input_bytes), 1, kUnbounded},
      {"max_batch_inputs", c.max_batch_inputs, 1, kUnbounded},
      {"max_candidates", c.max_candidates, 1, kUnbounded},
      {"max_labels", c.max_labels, 1, kUnbounded},
      {"max_new_tokens", c.max_new_tokens, 1, kUnbounded},
      {"max_beam_width", c.max_beam_width, 1, kUnbounded},
      {"max_tasks", c.max_tasks, 1, kUnbounded},
      {"max_stream_inflight", c.max_stream_inflight, 1, kUnbounded},
      {"max_server_inflight", c.max_server_inflight, 1, kUnbounded},
      {"max_upload_bytes", Clamped(c.max_upload_bytes), 1, kUnbounded},
      {"max_streams_per_tenant", c.max_streams_per_tenant, 1, kUnbounded},
      {"max_streams_per_connection", c.max_streams_per_connection, 1, kMaxMessage},
      {"stream_idle_timeout_seconds", c.stream_idle_timeout_seconds, 1, 86400},
      {"max_total_upload_bytes", Clamped(c.max_total_upload_bytes), 1, kUnbounded},
      {"default_max_query_tokens", c.default_max_query_tokens, 0, kUnbounded},
      {"default_max_answer_tokens", c.default_max_answer_tokens, 0, kUnbounded},
  };
}

absl::Status CheckNames(const ServerConfig& c) {
  // gRPC also listens on Unix domain sockets ("unix:PATH", "unix-abstract:NAME").
  const bool unix_socket =
      c.listen_address.rfind("unix:", 0) == 0 || c.listen_address.rfind("unix-abstract:", 0) == 0;
  if (!unix_socket) {
    if (auto hp = SplitHostPort("listen_address", c.listen_address); !hp.ok()) return hp.status();
  }
  if (!c.metrics_address.empty()) {
    if (auto hp = SplitHostPort("metrics_address", c.metrics_address); !hp.ok()) {
      return hp.status();
    }
  }
  if (!c.backend.empty()) {
    if (auto kind = ParseBackendKind(c.backend); !kind.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--backend=", c.backend,
                       ": must be cpu, cuda or empty (cuda when a GPU "
                       "is usable, else cpu)"));
    }
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string&>{"compute_dtype", c.compute_dtype},
        {"weight_dtype", c.weight_dtype},
        {"kv_dtype", c.kv_dtype}}) {
    if (auto dtype = ParseDTypeFlag(flag, value); !dtype.ok()) return dtype.status();
  }
  if (c.gpu_pool_release_threshold_bytes < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu_pool_release_threshold_bytes=", c.gpu_pool_release_threshold_bytes,
                     ": must be -1 (keep all freed memory) or a byte count >= 0"));
  }
  if (c.data_dir.empty()) {
    return absl::InvalidArgumentError("--data_dir is empty: name the directory to keep tasks in");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateServerConfig(const ServerConfig& config) {
  for (const Range& range : NumericRanges(config)) {
    if (auto status = CheckRange(range); !status.ok()) return status;
  }
  return CheckNames(config);
}

}  // namespace manyshot::server
