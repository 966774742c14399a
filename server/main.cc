// manyshot-server: the gRPC service for many-shot in-context learning.
#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/backends/backend_factory.h"
#include "server/build_info.h"
#include "server/config_check.h"
#include "server/device_watch.h"
#include "server/logging.h"
#include "server/server_app.h"
#include "server/shared_gc.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen_address, "127.0.0.1:50051",
          "gRPC listen address host:port; port 0 picks a free port (see --port_file)");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:9464",
          "Prometheus /metrics address host:port; port 0 picks a free port; empty disables");
ABSL_FLAG(std::string, data_dir, "manyshot-data",
          "Directory for the RocksDB store and the generated default model");
ABSL_FLAG(std::string, shared_dir, "",
          "Directory every replica of a cluster mounts (the shared cache tier); empty: none");
ABSL_FLAG(bool, gc, false,
          "Collect the garbage of --shared_dir (old manifest versions, unreferenced KV files) "
          "and exit");
ABSL_FLAG(int64_t, gc_grace_seconds, 1800,
          "--gc keeps what changed within this many seconds (replicas may still read it)");
ABSL_FLAG(bool, gc_dry_run, false, "--gc reports what it would remove and removes nothing");
ABSL_FLAG(std::string, model_dir, "",
          "Hugging Face model directory to serve; empty serves the generated tiny default model "
          "(random weights)");
ABSL_FLAG(std::string, default_tokenizer_dir, "/usr/local/share/manyshot/gpt2",
          "GPT-2 tokenizer files (vocab.json, merges.txt) used to generate the default model when "
          "--model_dir is empty; scripts/setup.sh installs them here");
ABSL_FLAG(int, threads, 0, "Compute threads for the model (CPU backend); 0 uses every core");
ABSL_FLAG(std::string, backend, "",
          "Compute backend: cpu or cuda; empty picks cuda when a GPU is usable, else cpu (the "
          "log says which and why)");
ABSL_FLAG(int, device, 0, "CUDA device index for --backend=cuda");
ABSL_FLAG(std::string, compute_dtype, "",
          "Weights and activations: f32, bf16 or f16; empty = the backend's default (cpu: f32, "
          "cuda: bf16 with f32 accumulation)");
ABSL_FLAG(
    std::string, weight_dtype, "",
    "Matrix weights held in memory: f32 or bf16 (cpu: bf16 weights widened in the kernels with "
    "f32 compute, half the bytes decode reads); empty = the compute dtype. Decoder-only "
    "models");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error, critical or off");
ABSL_FLAG(std::string, log_format, "text", "text or json (one JSON object per line)");
ABSL_FLAG(std::string, port_file, "",
          "When set, the bound ports are written to this file as 'grpc=N' and 'metrics=M' lines "
          "once the server is serving");
ABSL_FLAG(int, shutdown_grace_seconds, 10,
          "On SIGTERM/SIGINT, in-flight calls get this long to finish before being cancelled");
ABSL_FLAG(int, shutdown_notice_seconds, 0,
          "On SIGTERM/SIGINT, health turns NOT_SERVING at once but calls are still answered this "
          "long before the grace period starts, so load balancers stop routing here first; a "
          "second signal ends the notice early");
ABSL_FLAG(uint64_t, max_message_bytes, 64ull << 20,
          "Largest gRPC message accepted or sent, in bytes (big task uploads stream in chunks)");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM server certificate (chain); with --tls_key_file serves TLS instead of plaintext");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key for --tls_cert_file");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA bundle; when set (with TLS) clients must present a certificate signed by it "
          "(mutual TLS)");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "File of 'TOKEN TENANT' lines ('#' comments); when set every call except health needs "
          "'authorization: Bearer TOKEN' metadata and acts for TENANT");

ABSL_FLAG(uint64_t, memory_budget_bytes, 8ull << 30,
          "Byte budget of the KV cache's memory tier on the CPU backend (LRU eviction of unpinned "
          "entries)");
ABSL_FLAG(uint64_t, gpu_memory_budget_bytes, 8ull << 30,
          "Byte budget of the KV cache's memory tier in GPU memory on the CUDA backend (LRU "
          "eviction of unpinned entries)");
ABSL_FLAG(
    int64_t, gpu_pool_release_threshold_bytes, -1,
    "CUDA: freed device memory the allocator's pool keeps for reuse; above it memory goes back "
    "to the driver at each synchronization (for a GPU shared with other processes); -1 keeps "
    "it all");
ABSL_FLAG(bool, cuda_graphs, true,
          "CUDA: record each shape of batch-1 and small-batch query pass once as a CUDA graph and "
          "replay it (one launch instead of one per kernel; same results); false runs every "
          "pass kernel by kernel");
ABSL_FLAG(uint64_t, host_memory_budget_bytes, 16ull << 30,
          "On the CUDA backend: byte budget of page-locked host memory holding contexts evicted "
          "from GPU memory, before they fall back to RocksDB (0: none)");
ABSL_FLAG(uint64_t, disk_budget_bytes, 0,
          "Byte budget of the KV payload files (DATA_DIR/cache/kv_files); 0 = unlimited (least "
          "recently used are evicted; task specs stay and re-encode on use)");
ABSL_FLAG(uint64_t, min_free_disk_bytes, 64ull << 20,
          "Free space kept on the data directory's disk: creates that would leave less are "
          "refused with RESOURCE_EXHAUSTED, and the server does not start with less");
ABSL_FLAG(std::string, kv_dtype, "",
          "KV storage type in memory and on disk: f32, bf16, f16; unset: bf16 on CUDA (f16 with "
          "--compute_dtype=f16: tensor-core attention), f32 on the CPU");
ABSL_FLAG(bool, share_kv_across_tenants, false,
          "Let tenants' tasks with identical content share one KV entry (saves encodes and memory, "
          "but a tenant can then tell that another registered the same demonstrations)");
ABSL_FLAG(bool, eager_restore, false,
          "Load every task's KV from RocksDB at startup instead of on first use");
ABSL_FLAG(int, batch_window_ms, 2, "How long a batch waits for more requests of the same task");
ABSL_FLAG(int, max_batch_size, 32, "Most inputs per engine batch");
ABSL_FLAG(int, max_queue_inputs, 4096,
          "Most inputs waiting in the scheduler; beyond that calls get RESOURCE_EXHAUSTED");
ABSL_FLAG(int, preparation_threads, 0,
          "Threads that render and tokenize requests before they join the engine queue (0: one "
          "per core); the engine's worker then only computes");
ABSL_FLAG(int, max_concurrent_creates, 2,
          "CreateTask calls that encode at once; more wait their turn (creates of different tasks "
          "and tenants run side by side, two of one task one after the other)");
ABSL_FLAG(uint64_t, engine_turn_tokens, 65536,
          "Most context tokens the engine recomputes for one task (T5: demonstrations x inputs) "
          "before other waiting tasks get a turn; larger requests are answered over several "
          "turns, one input at least per turn");
ABSL_FLAG(uint64_t, max_demonstrations, 100000, "Most demonstrations per task");
ABSL_FLAG(uint64_t, max_query_context_tokens, 262144,
          "Most context tokens a T5 task may encode again for every input (its demonstrations' "
          "tokens after cutting to the segment length); a task above it is refused at creation");
ABSL_FLAG(uint64_t, max_input_bytes, 64 * 1024, "Most bytes per input text or field");
ABSL_FLAG(uint32_t, max_batch_inputs, 256, "Most inputs (or items) per Classify/Score request");
ABSL_FLAG(uint32_t, max_candidates, 64, "Most candidates per Score item");
ABSL_FLAG(uint32_t, max_labels, 1000, "Most labels per task");
ABSL_FLAG(uint32_t, max_new_tokens, 256, "Most tokens one Generate call may produce");
ABSL_FLAG(uint32_t, max_beam_width, 8, "Widest beam search allowed");
ABSL_FLAG(uint32_t, max_tasks, 10000, "Most tasks the server holds");
ABSL_FLAG(uint32_t, max_stream_inflight, 64,
          "Most StreamClassify requests of one stream being answered at once; beyond, a request "
          "is answered in-band with RESOURCE_EXHAUSTED");
ABSL_FLAG(uint32_t, max_server_inflight, 1024,
          "Most StreamClassify requests of all streams being answered at once; beyond, a request "
          "is answered in-band with RESOURCE_EXHAUSTED");
ABSL_FLAG(uint32_t, max_streams_per_tenant, 256,
          "Most StreamClassify and CreateTask streams one tenant may have open; the stream beyond "
          "is refused at once with RESOURCE_EXHAUSTED");
ABSL_FLAG(uint32_t, max_streams_per_connection, 100,
          "Most streams (calls) one client connection may have open at once (HTTP/2 "
          "SETTINGS_MAX_CONCURRENT_STREAMS); the client queues the rest");
ABSL_FLAG(int, stream_idle_timeout_seconds, 300,
          "A StreamClassify or CreateTask stream that reads no message and has nothing being "
          "answered for this long is closed with UNAVAILABLE");
ABSL_FLAG(uint64_t, max_upload_bytes, 1ull << 30,
          "Most bytes of request messages one CreateTask upload may send (RESOURCE_EXHAUSTED "
          "beyond)");
ABSL_FLAG(uint64_t, max_total_upload_bytes, 2ull << 30,
          "Most bytes of request messages all CreateTask calls together may hold until each call "
          "ends (RESOURCE_EXHAUSTED beyond; retry with backoff)");
ABSL_FLAG(uint32_t, default_max_query_tokens, 0,
          "Room for a query (tokens) when a task does not set max_query_tokens; 0: a quarter of "
          "the model's context length, 128 to 4096 (512 counts as the context of T5 models)");
ABSL_FLAG(uint32_t, default_max_answer_tokens, 0,
          "Room for an answer (tokens) when a task does not set max_answer_tokens; 0: a "
          "sixteenth of the model's context length, 32 to 256");

namespace {

manyshot::server::ServerConfig ConfigFromFlags() {
  manyshot::server::ServerConfig config;
  config.listen_address = absl::GetFlag(FLAGS_listen_address);
  config.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  config.shared_dir = absl::GetFlag(FLAGS_shared_dir);
  config.data_dir = absl::GetFlag(FLAGS_data_dir);
  config.model_dir = absl::GetFlag(FLAGS_model_dir);
  config.default_tokenizer_dir = absl::GetFlag(FLAGS_default_tokenizer_dir);
  config.threads = absl::GetFlag(FLAGS_threads);
  config.backend = absl::GetFlag(FLAGS_backend);
  config.device = absl::GetFlag(FLAGS_device);
  config.compute_dtype = absl::GetFlag(FLAGS_compute_dtype);
  config.weight_dtype = absl::GetFlag(FLAGS_weight_dtype);
  config.log_level = absl::GetFlag(FLAGS_log_level);
  config.log_format = absl::GetFlag(FLAGS_log_format);
  config.port_file = absl::GetFlag(FLAGS_port_file);
  config.shutdown_grace_seconds = absl::GetFlag(FLAGS_shutdown_grace_seconds);
  config.shutdown_notice_seconds = absl::GetFlag(FLAGS_shutdown_notice_seconds);
  config.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  config.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  config.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  config.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  config.auth_tokens_file = absl::GetFlag(FLAGS_auth_tokens_file);
  config.memory_budget_bytes = absl::GetFlag(FLAGS_memory_budget_bytes);
  config.gpu_memory_budget_bytes = absl::GetFlag(FLAGS_gpu_memory_budget_bytes);
  config.host_memory_budget_bytes = absl::GetFlag(FLAGS_host_memory_budget_bytes);
  config.gpu_pool_release_threshold_bytes = absl::GetFlag(FLAGS_gpu_pool_release_threshold_bytes);
  config.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  config.disk_budget_bytes = absl::GetFlag(FLAGS_disk_budget_bytes);
  config.min_free_disk_bytes = absl::GetFlag(FLAGS_min_free_disk_bytes);
  config.kv_dtype = absl::GetFlag(FLAGS_kv_dtype);
  config.share_kv_across_tenants = absl::GetFlag(FLAGS_share_kv_across_tenants);
  config.eager_restore = absl::GetFlag(FLAGS_eager_restore);
  config.batch_window_ms = absl::GetFlag(FLAGS_batch_window_ms);
  config.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  config.max_queue_inputs = absl::GetFlag(FLAGS_max_queue_inputs);
  config.preparation_threads = absl::GetFlag(FLAGS_preparation_threads);
  config.max_concurrent_creates = absl::GetFlag(FLAGS_max_concurrent_creates);
  config.max_demonstrations = absl::GetFlag(FLAGS_max_demonstrations);
  config.max_query_context_tokens = absl::GetFlag(FLAGS_max_query_context_tokens);
  config.engine_turn_tokens = absl::GetFlag(FLAGS_engine_turn_tokens);
  config.max_input_bytes = absl::GetFlag(FLAGS_max_input_bytes);
  config.max_batch_inputs = absl::GetFlag(FLAGS_max_batch_inputs);
  config.max_candidates = absl::GetFlag(FLAGS_max_candidates);
  config.max_labels = absl::GetFlag(FLAGS_max_labels);
  config.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  config.max_beam_width = absl::GetFlag(FLAGS_max_beam_width);
  config.max_tasks = absl::GetFlag(FLAGS_max_tasks);
  config.max_stream_inflight = absl::GetFlag(FLAGS_max_stream_inflight);
  config.max_server_inflight = absl::GetFlag(FLAGS_max_server_inflight);
  config.max_upload_bytes = absl::GetFlag(FLAGS_max_upload_bytes);
  config.max_streams_per_tenant = absl::GetFlag(FLAGS_max_streams_per_tenant);
  config.max_streams_per_connection = absl::GetFlag(FLAGS_max_streams_per_connection);
  config.stream_idle_timeout_seconds = absl::GetFlag(FLAGS_stream_idle_timeout_seconds);
  config.max_total_upload_bytes = absl::GetFlag(FLAGS_max_total_upload_bytes);
  config.default_max_query_tokens = absl::GetFlag(FLAGS_default_max_query_tokens);
  config.default_max_answer_tokens = absl::GetFlag(FLAGS_default_max_answer_tokens);
  return config;
}

bool WritePortFile(const std::string& path, int grpc_port, int metrics_port) {
  // Written to a temporary name and renamed, so a reader never sees a half-written file.
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "grpc=" << grpc_port << "\nmetrics=" << metrics_port << "\n";
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "manyshot-server: many-shot in-context learning over gRPC.\n"
      "  manyshot-server [--listen_address=127.0.0.1:50051] [--data_dir=manyshot-data] "
      "[--model_dir=DIR]");
  // --version: what was built (the container image's build checks it runs at all).
  absl::FlagsUsageConfig usage_config;
  usage_config.version_string = [] {
    return absl::StrCat("manyshot-server ", manyshot::server::kVersion, " (",
                        manyshot::server::kBuildType, ", ", manyshot::server::kCompiler,
                        ", CUDA backend built: ", manyshot::server::kCudaEnabled ? "yes" : "no",
                        ")\n");
  };
  // --help lists the flags of this file (absl matches files named after the binary by default,
  // which found none: "No flags matched."); --helpfull lists every library's too.
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::ParseCommandLine(argc, argv);
  // Everything the server creates (the data directory, RocksDB, the generated model, the port
  // file) holds tenants' data or secrets: private to the server's user (0700/0600).
  ::umask(077);
  if (absl::GetFlag(FLAGS_gc)) {
    return manyshot::server::RunSharedGc(
        {absl::GetFlag(FLAGS_shared_dir),
         std::chrono::seconds(absl::GetFlag(FLAGS_gc_grace_seconds)),
         absl::GetFlag(FLAGS_gc_dry_run)},
        std::cout, std::cerr);
  }
  manyshot::server::ServerConfig config = ConfigFromFlags();

  // Every flag is checked before any work (no data directory, model or port yet).
  if (auto status = manyshot::server::ValidateServerConfig(config); !status.ok()) {
    std::fprintf(stderr, "manyshot-server: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  if (auto status = manyshot::server::ConfigureLogging(config.log_level, config.log_format);
      !status.ok()) {
    std::fprintf(stderr, "manyshot-server: %s\n", std::string(status.message()).c_str());
    return 2;
  }

  // Block the shutdown signals in every thread (gRPC's threads inherit this mask) and take them
  // synchronously below, so shutdown runs on the main thread, never inside a signal handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto app = manyshot::server::ServerApp::Start(config);
  if (!app.ok()) {
    spdlog::critical("startup failed: {}", app.status().ToString());
    return 1;
  }
  if (!config.port_file.empty() &&
      !WritePortFile(config.port_file, (*app)->grpc_port(), (*app)->metrics_port())) {
    spdlog::critical("cannot write --port_file={}", config.port_file);
    return 1;
  }

  int received = 0;
  sigwait(&signals, &received);
  if (config.shutdown_notice_seconds > 0) {
    spdlog::info("received {}, NOT_SERVING for {} s before draining",
                 received == SIGTERM ? "SIGTERM" : "SIGINT", config.shutdown_notice_seconds);
    (*app)->StopServing();
    const timespec notice{config.shutdown_notice_seconds, 0};
    sigtimedwait(&signals, nullptr, &notice);  // a second signal ends the notice early
  }
  spdlog::info("received {}, draining for up to {} s", received == SIGTERM ? "SIGTERM" : "SIGINT",
               config.shutdown_grace_seconds);
  (*app)->Shutdown(std::chrono::seconds(config.shutdown_grace_seconds));
  app->reset();
  // A GPU fault (server/device_watch.h) raised the SIGTERM: non-zero, so the replica restarts.
  if (const absl::Status fault = manyshot::DeviceFault(); !fault.ok()) {
    spdlog::critical("manyshot-server stopped after a device fault: {}",
                     std::string(fault.message()));
    return manyshot::server::kDeviceFaultExitCode;
  }
  spdlog::info("manyshot-server stopped");
  return 0;
}
