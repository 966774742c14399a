#include "server/server_info.h"

#include <chrono>
#include <fstream>

#include "engine/backends/backend_factory.h"
#include "engine/core/dtype.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_target.h"
#include "server/build_info.h"
#include "server/classify_call.h"

namespace manyshot::server {
namespace {

// The CPU's model name from /proc/cpuinfo, else "host CPU".
std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
  }
  return "host CPU";
}

void SetTimestamp(std::chrono::system_clock::time_point t, google::protobuf::Timestamp& out) {
  const auto since_epoch = t.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  out.set_seconds(seconds.count());
  out.set_nanos(static_cast<int32_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - seconds).count()));
}

}  // namespace

void DescribeModel(const LoadedModel& model, v1::ModelInfo& out) {
  const ModelDescription& d = model.description();
  out.set_path(d.path.string());
  out.set_model_type(d.model_type);
  out.set_encoder_decoder(d.encoder_decoder);
  out.set_layers(d.layers);
  out.set_hidden_size(d.hidden_size);
  out.set_heads(d.heads);
  out.set_kv_heads(d.kv_heads);
  out.set_head_dim(d.head_dim);
  out.set_vocab_size(d.vocab_size);
  out.set_context_length(d.context_length);
  out.set_weight_dtype(d.weight_dtype);
  out.set_held_weight_dtype(d.held_weight_dtype);
  out.set_fingerprint(d.fingerprint);
  out.set_random_weights(d.marker.random_weights);
  out.set_weights_note(d.marker.note);
  out.set_tokenizer_kind(model.tokenizer().kind());
  out.set_tokenizer_fingerprint(model.tokenizer().fingerprint());
}

void DescribeBackend(const LoadedModel& model, v1::BackendInfo& out) {
  const Backend& backend = *model.backend;
  const ModelDescription& d = model.description();
  static const std::string cpu_name = CpuModelName();
  const bool on_gpu = backend.device() == Device::kCUDA;
  out.set_name(backend.name());
  out.set_device(on_gpu ? backend.description() : cpu_name);
  out.set_threads(static_cast<uint32_t>(backend.threads()));
  if (!on_gpu) {
    out.set_blas_kernel(BlasKernelName());
    out.set_cpu_target(CpuTargetName());
  }
  out.set_description(backend.description());
  out.set_selection(model.backend_selection);
  out.set_compute_dtype(std::string(DTypeName(d.compute_dtype)));
  out.set_kv_dtype(std::string(DTypeName(d.kv_dtype)));
  out.set_cuda_built(CudaBuilt());
  out.set_device_index(static_cast<uint32_t>(backend.device_index()));
}

void DescribeLimits(const ServerConfig& config, v1::Limits& out) {
  out.set_max_message_bytes(config.max_message_bytes);
  out.set_max_demonstrations(config.max_demonstrations);
  out.set_max_input_bytes(config.max_input_bytes);
  out.set_max_batch_inputs(config.max_batch_inputs);
  out.set_max_candidates(config.max_candidates);
  out.set_max_new_tokens(config.max_new_tokens);
  out.set_max_beam_width(config.max_beam_width);
  out.set_max_tasks(config.max_tasks);
  out.set_max_stream_inflight(config.max_stream_inflight);
  out.set_max_server_inflight(config.max_server_inflight);
  out.set_max_upload_bytes(config.max_upload_bytes);
  out.set_max_query_context_tokens(config.max_query_context_tokens);
  out.set_max_streams_per_tenant(config.max_streams_per_tenant);
  out.set_max_streams_per_connection(config.max_streams_per_connection);
  out.set_stream_idle_timeout_seconds(static_cast<uint32_t>(config.stream_idle_timeout_seconds));
  out.set_max_total_upload_bytes(config.max_total_upload_bytes);
  out.set_max_request_id_bytes(static_cast<uint32_t>(kMaxRequestIdBytes));
}

void DescribeCache(const ContextCache& cache, v1::CacheInfo& out) {
  const CacheStats stats = cache.Stats();
  out.set_memory_bytes(stats.memory_bytes);
  out.set_memory_budget_bytes(stats.memory_budget_bytes);
  out.set_memory_entries(stats.memory_entries);
  out.set_disk_bytes(stats.disk_bytes);
  out.set_disk_budget_bytes(stats.disk_budget_bytes);
  out.set_disk_entries(stats.disk_entries);
  out.set_kv_dtype(std::string(DTypeName(cache.storage_dtype())));
}

v1::ServerInfo DescribeServer(const ServiceParts& parts, const std::string& tenant) {
  v1::ServerInfo info;
  info.set_version(kVersion);
  DescribeModel(*parts.model, *info.mutable_model());
  DescribeBackend(*parts.model, *info.mutable_backend());
  DescribeLimits(parts.config, *info.mutable_limits());
  DescribeCache(parts.cache, *info.mutable_cache());
  info.set_tasks(parts.registry.size());
  if (!parts.config.auth_tokens_file.empty()) {
    const TaskRegistry::TenantFigures own = parts.registry.FiguresOf(tenant);
    v1::CacheInfo& cache = *info.mutable_cache();
    info.set_tasks(own.tasks);
    cache.set_memory_bytes(own.memory_bytes);
    cache.set_memory_entries(own.memory_entries);
    cache.set_disk_bytes(own.disk_bytes);
    cache.set_disk_entries(own.disk_entries);
  }
  SetTimestamp(parts.start_time, *info.mutable_start_time());
  return info;
}

}  // namespace manyshot::server
