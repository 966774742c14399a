// Everything the server is configured with, as plain values. main.cc fills it from flags, tests can
// build one directly. Limits live here so one struct documents them all.
#pragma once

#include <cstdint>
#include <string>

namespace manyshot::server {

struct ServerConfig {
  std::string listen_address = "127.0.0.1:50051";  // host:port; port 0 picks a free one
  std::string metrics_address = "127.0.0.1:9464";  // host:port for Prometheus /metrics; "" = off
  std::string shared_dir;  // the directory the replicas of a cluster share; empty: none
  std::string data_dir = "manyshot-data";  // RocksDB and the generated default model
  std::string model_dir;                   // HF model directory; "" = generated default
  // GPT-2 vocab.json + merges.txt for generating the default model (installed by setup.sh).
  std::string default_tokenizer_dir = "/usr/local/share/manyshot/gpt2";
  std::string port_file;      // when set, the bound ports are written here ("grpc=N\nmetrics=M\n")
  int threads = 0;            // compute threads (CPU backend); 0 = hardware concurrency
  std::string backend;        // "cpu" or "cuda"; "" = cuda when a GPU is usable, else cpu
  int device = 0;             // the CUDA device index
  std::string compute_dtype;  // f32, bf16 or f16; "" = the backend's default (cpu f32, cuda bf16)
  // Matrix weights held in memory: f32, bf16 or f16 where the backend widens them in its kernels
  // (cpu: bf16 with f32 compute); "" = the compute dtype. Decoder-only models.
  std::string weight_dtype;
  std::string log_level = "info";
  std::string log_format = "text";  // "text" or "json"
  int shutdown_grace_seconds = 10;  // in-flight calls get this long after SIGTERM
  // After SIGTERM, health is NOT_SERVING but calls are still answered this long (before the
  // grace), so that load balancers stop routing to the replica before it stops accepting.
  int shutdown_notice_seconds = 0;
  uint64_t max_message_bytes = 64ull << 20;

  // Security (README "Security"); all off by default (plaintext, no auth, for loopback use).
  std::string tls_cert_file;       // PEM server certificate chain; with tls_key_file enables TLS
  std::string tls_key_file;        // PEM private key of tls_cert_file
  std::string tls_client_ca_file;  // PEM CA bundle; when set clients must present a cert it signed
  std::string auth_tokens_file;    // "TOKEN TENANT" lines; when set every call needs a bearer token

  // The KV cache (cache/README.md).
  uint64_t memory_budget_bytes = 8ull << 30;        // the memory tier on the CPU backend (host RAM)
  uint64_t gpu_memory_budget_bytes = 8ull << 30;    // the memory tier on the CUDA backend (GPU)
  uint64_t host_memory_budget_bytes = 16ull << 30;  // pinned host tier below it (CUDA only)
  // CUDA: freed memory the device's pool keeps for reuse; -1 = all (engine/cuda/memory_pool.h).
  int64_t gpu_pool_release_threshold_bytes = -1;
  // CUDA: replay recorded query passes (engine/transformer/forward_graphs.h) instead of launching
  // every kernel of each one.
  bool cuda_graphs = true;
  uint64_t disk_budget_bytes = 0;  // 0 = unlimited
  // Free space kept on the data directory's disk: creates that would leave less are refused
  // (RESOURCE_EXHAUSTED) and the server does not start with less, so RocksDB always has room.
  uint64_t min_free_disk_bytes = 64ull << 20;
  // Tasks of different tenants with identical content share one KV entry (off: per tenant).
  bool share_kv_across_tenants = false;
  // f32, bf16 or f16 (storage on disk and in memory); "" = the backend's default (cuda: 16-bit,
  // read by the tensor-core attention kernel; cpu: f32), server/kv_dtype_default.h.
  std::string kv_dtype;
  bool eager_restore = false;  // load every task's KV at startup instead of on first use

  // Scheduling: requests for one task are batched for up to batch_window_ms or max_batch_size
  // inputs; at most max_queue_inputs inputs wait (RESOURCE_EXHAUSTED beyond).
  int batch_window_ms = 2;
  int max_batch_size = 32;
  int max_queue_inputs = 4096;
  // Threads that render and tokenize requests before they are queued (0: one per core).
  int preparation_threads = 0;
  // CreateTask calls that tokenize, encode and store at once (others wait their turn); each
  // running one holds its task's demonstrations and KV in memory while it encodes.
  int max_concurrent_creates = 2;
  // Time-slicing of the engine: a turn of one task runs at most this many recomputed context
  // tokens (T5: every demonstration is encoded again for each input) before the other tasks
  // waiting get theirs; a request above it is answered over several turns (at least one input
  // per turn). Tasks whose context is cached (decoder-only) batch up to max_batch_size.
  uint64_t engine_turn_tokens = 65536;

  // Limits (reported by GetServerInfo).
  uint64_t max_demonstrations = 100000;
  uint64_t max_input_bytes = 64 * 1024;
  uint32_t max_batch_inputs = 256;
  uint32_t max_candidates = 64;
  uint32_t max_labels = 1000;
  uint32_t max_new_tokens = 256;
  uint32_t max_beam_width = 8;
  uint32_t max_tasks = 10000;
  // Bounds on what clients can make the server hold (README "Limits"): StreamClassify requests
  // being answered per stream and over all streams, and the bytes one CreateTask upload buffers.
  uint32_t max_stream_inflight = 64;
  // Open StreamClassify and CreateTask streams per tenant, HTTP/2 streams per connection, and how
  // long a stream may do nothing before it is closed.
  uint32_t max_streams_per_tenant = 256;
  uint32_t max_streams_per_connection = 100;
  int stream_idle_timeout_seconds = 300;
  uint32_t max_server_inflight = 1024;
  uint64_t max_upload_bytes = 1ull << 30;
  uint64_t max_total_upload_bytes = 2ull << 30;  // of all CreateTask calls until each ends
  // Context tokens a T5 task encodes again for every input (its demonstrations' segment tokens,
  // k x S at most): one input's compute and memory grow with it, so a task above it is refused.
  uint64_t max_query_context_tokens = 262144;
  // 0: derived from the model's context length (engine/task/query_room.h).
  uint32_t default_max_query_tokens = 0;
  uint32_t default_max_answer_tokens = 0;
};

}  // namespace manyshot::server
