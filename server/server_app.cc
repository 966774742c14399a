#include "server/server_app.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "cache/disk_space.h"
#include "engine/backends/backend_factory.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/auth.h"
#include "server/config_check.h"
#include "server/dtype_flag.h"
#include "server/kv_dtype_default.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {
namespace {

absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  if (in) contents << in.rdbuf();
  if (!in || contents.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read --", flag, "=", path, " (missing, unreadable or empty)"));
  }
  return contents.str();
}

// Insecure or TLS (mTLS with a client CA) credentials, with the bearer-token processor when a
// tokens file is configured; `tenants` then holds the tokens the processor checks.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerConfig& config, TenantDirectory* tenants) {
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file must be given together");
  }
  if (!config.tls_cert_file.empty()) {
    auto cert = ReadPemFile("tls_cert_file", config.tls_cert_file);
    if (!cert.ok()) return cert.status();
    auto key = ReadPemFile("tls_key_file", config.tls_key_file);
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    if (!config.tls_client_ca_file.empty()) {
      auto ca = ReadPemFile("tls_client_ca_file", config.tls_client_ca_file);
      if (!ca.ok()) return ca.status();
      options.pem_root_certs = *ca;
      options.client_certificate_request =
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    options.pem_key_cert_pairs.push_back({*key, *cert});
    creds = grpc::SslServerCredentials(options);
  } else if (!config.tls_client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_client_ca_file needs --tls_cert_file and --tls_key_file");
  } else if (!config.auth_tokens_file.empty()) {
    // gRPC's insecure credentials cannot carry an AuthMetadataProcessor (it asserts); local
    // credentials are plaintext like them but can, and accept loopback peers only: bearer tokens
    // without TLS stay on this host.
    creds = grpc::experimental::LocalServerCredentials(LOCAL_TCP);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  if (creds == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create TLS credentials from --tls_cert_file=", config.tls_cert_file));
  }
  if (!config.auth_tokens_file.empty()) {
    auto tokens = LoadTokensFile(config.auth_tokens_file);
    if (!tokens.ok()) return tokens.status();
    spdlog::info("bearer-token auth on: {} token(s) from {}", tokens->size(),
                 config.auth_tokens_file);
    *tenants = TenantDirectory(*std::move(tokens));
    creds->SetAuthMetadataProcessor(std::make_shared<BearerTokenAuthProcessor>(tenants->tokens()));
  }
  return creds;
}

}  // namespace

namespace {

absl::Status CheckStartRoom(const std::filesystem::path& data_dir, uint64_t min_free) {
  auto free = FreeDiskBytes(data_dir);
  if (!free.ok()) return free.status();
  if (*free >= min_free) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the data directory ", data_dir.string(), " has ", *free,
      " bytes free on its disk, less than --min_free_disk_bytes=", min_free,
      ": free space or grow the volume (or lower --min_free_disk_bytes) and start again"));
}

// Protobuf logs why it rejected a message (e.g. invalid UTF-8 in a field) to stderr, bypassing
// the log format; the service reports each bad request itself, so these are debug lines.
void RouteProtobufLogs() {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel level, const char*, int, const std::string& message) {
        if (level == google::protobuf::LOGLEVEL_FATAL) {
          spdlog::error("protobuf: {}", message);
        } else {
          spdlog::debug("protobuf: {}", message);
        }
      });
}

void LogCacheMessage(LogLevel level, const std::string& message) {
  if (level == LogLevel::kError) {
    spdlog::error("cache: {}", message);
  } else if (level == LogLevel::kWarning) {
    spdlog::warn("cache: {}", message);
  } else {
    spdlog::info("cache: {}", message);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerApp>> ServerApp::Start(const ServerConfig& config) {
  std::unique_ptr<ServerApp> app(new ServerApp());
  app->config_ = config;
  if (auto status = ValidateServerConfig(config); !status.ok()) return status;
  RouteProtobufLogs();
  // Security configuration first: a bad certificate or tokens file fails before any slow work.
  auto creds = MakeServerCredentials(config, &app->tenants_);
  if (!creds.ok()) return creds.status();
  if (auto status = app->OpenDataDir(); !status.ok()) return status;
  auto metrics = Metrics::Start(config.metrics_address);
  if (!metrics.ok()) return metrics.status();
  app->metrics_ = *std::move(metrics);
  if (auto status = app->LoadModel(); !status.ok()) return status;
  if (auto status = app->OpenCache(); !status.ok()) return status;
  if (auto status = app->OpenTasks(); !status.ok()) return status;
  app->CreateService();
  if (auto status = app->Listen(*creds); !status.ok()) return status;
  spdlog::info(
      "manyshot-server listening grpc={} port={} metrics_port={} data_dir={} tls={} mtls={} "
      "auth={}",
      config.listen_address, app->grpc_port_, app->metrics_port(), app->data_dir_->path().string(),
      !config.tls_cert_file.empty(), !config.tls_client_ca_file.empty(),
      !config.auth_tokens_file.empty());
  return app;
}

absl::Status ServerApp::OpenDataDir() {
  auto data_dir = DataDir::Open(config_.data_dir);
  if (!data_dir.ok()) return data_dir.status();
  data_dir_ = *std::move(data_dir);
  // RocksDB aborts (an assertion in Debian's build) when it opens on a full disk: refuse first.
  return CheckStartRoom(data_dir_->path(), config_.min_free_disk_bytes);
}

// The model loads before the gRPC server exists, so health (and every RPC) is answered only once
// it is ready; a model that fails to load stops the start with the error.
absl::Status ServerApp::LoadModel() {
  auto model = LoadServedModel(config_, data_dir_->path());
  if (!model.ok()) return model.status();
  model_ = std::make_shared<const LoadedModel>(*std::move(model));
  metrics_->SetBackend(model_->backend->name(), model_->backend->description(),
                       std::string(DTypeName(model_->description().compute_dtype)),
                       std::string(DTypeName(model_->description().kv_dtype)));
  metrics_->SetModel(model_->description().model_type, model_->description().architecture());
  return absl::OkStatus();
}

absl::StatusOr<ContextCacheOptions> ServerApp::CacheOptions() {
  const bool on_gpu = model_->backend->device() == Device::kCUDA;
  ContextCacheOptions options;
  // The memory tier lives where the backend's tensors do: GPU memory on the CUDA backend.
  options.memory_budget_bytes =
      on_gpu ? config_.gpu_memory_budget_bytes : config_.memory_budget_bytes;
  options.disk_budget_bytes = config_.disk_budget_bytes;
  options.disk_reserve_bytes = config_.min_free_disk_bytes;
  // Contexts evicted from GPU memory wait in pinned host memory before falling back to RocksDB.
  if (on_gpu) options.host_budget_bytes = config_.host_memory_budget_bytes;
  options.eager_restore = config_.eager_restore;
  if (on_gpu && config_.gpu_pool_release_threshold_bytes >= 0) {
    const auto bytes = static_cast<uint64_t>(config_.gpu_pool_release_threshold_bytes);
    if (auto s = SetGpuPoolReleaseThreshold(config_.device, bytes); !s.ok()) return s;
    spdlog::info("cuda: the memory pool keeps at most {} freed bytes", bytes);
  }
  // Unset: the backend's default (server/kv_dtype_default.h); what the service checks specs
  // against and GetServerInfo reports from here on.
  if (config_.kv_dtype.empty()) {
    config_.kv_dtype =
        DefaultKvDtype(model_->backend->device(), model_->description().compute_dtype);
  }
  auto kv_dtype = ParseDTypeFlag("kv_dtype", config_.kv_dtype);
  if (!kv_dtype.ok()) return kv_dtype.status();
  options.kv_dtype = kv_dtype->value_or(DType::kF32);
  if (const int64_t head_dim = model_->description().context_head_dim; head_dim != 0) {
    spdlog::info("attention: {}",
                 AttentionKernelDescription(model_->backend->device(), options.kv_dtype, head_dim));
  }
  // Both backends' attention reads 16-bit context K/V directly: keep memory in the storage dtype.
  options.memory_holds_storage_dtype = true;
  options.log = &LogCacheMessage;
  return options;
}

// The KV cache (RocksDB under the data directory).
absl::Status ServerApp::OpenCache() {
  auto options = CacheOptions();
  if (!options.ok()) return options.status();
  auto cache = ContextCache::Open(data_dir_->path() / "cache", *options, *model_->backend);
  if (!cache.ok()) return cache.status();
  cache_ = *std::move(cache);
  return absl::OkStatus();
}

// The tasks the cache holds, and the shared tier they may come from (--shared_dir).
absl::Status ServerApp::OpenTasks() {
  registry_ = std::make_unique<TaskRegistry>(*model_, *cache_, config_);
  if (auto s = registry_->Restore(); !s.ok()) return s;
  shared_metrics_ = std::make_unique<SharedMetrics>(metrics_->registry());
  if (!config_.shared_dir.empty()) {
    auto shared = SharedTier::Open(config_.shared_dir, *model_->backend, cache_->storage_dtype(),
                                   *shared_metrics_);
    if (!shared.ok()) return shared.status();
    shared_ = *std::move(shared);
    registry_->AttachShared(shared_.get());
  }
  return absl::OkStatus();
}

// The service and what it runs on: its metrics, the scheduler and the preparation threads.
void ServerApp::CreateService() {
  service_metrics_ = std::make_unique<ServiceMetrics>(
      metrics_->registry(), *cache_, model_->backend->device() == Device::kCUDA ? "gpu" : "host");
  metrics_->Register(service_metrics_->cache_collector());
  task_collector_ = MakeTaskStateCollector(*registry_);
  metrics_->Register(task_collector_);  // the exposer keeps only a weak pointer
  ServiceMetrics* sm = service_metrics_.get();
  SchedulerHooks hooks;
  hooks.on_batch = [sm](size_t n) { sm->Batch(n); };
  hooks.on_wait = [sm](double s) { sm->QueueWait(s); };
  hooks.on_depth = [sm](size_t d) { sm->QueueDepth(d); };
  scheduler_ = std::make_unique<Scheduler>(*registry_, config_, hooks);
  const int preparation_threads =
      config_.preparation_threads > 0
          ? config_.preparation_threads
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  preparation_ = std::make_unique<PreparationPool>(
      preparation_threads, static_cast<size_t>(std::max(1, config_.max_queue_inputs)));
  service_ = std::make_unique<ManyShotService>(config_, tenants_, model_, *registry_, *preparation_,
                                               *scheduler_, *cache_, *sm);
}

// The gRPC server with the service, health and reflection, and the watches that turn health
// NOT_SERVING.
absl::Status ServerApp::Listen(const std::shared_ptr<grpc::ServerCredentials>& creds) {
  // Both must happen before the builder is created: the health service is created by the
  // builder, and the reflection plugin is only linked in when this function is called.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // gRPC's built-in health service is not backed by a generated descriptor, so reflection lists
  // grpc.health.v1.Health but cannot describe it (grpcurl then fails on Health/Check). Linking
  // the generated health.proto registers its descriptor in the pool reflection reads.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::ServerBuilder builder;
  // gRPC enables SO_REUSEPORT by default, which would let a second server silently share the port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Streams one connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: the
  // client queues the rest), and keepalive pings that find peers which vanished without closing,
  // whose streams then end instead of holding their slots.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(config_.max_streams_per_connection));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config_.max_message_bytes));
  builder.AddListeningPort(config_.listen_address, creds, &grpc_port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on --listen_address=", config_.listen_address,
                     " (address in use or not local?)"));
  }
  auto* health = server_->GetHealthCheckService();
  health->SetServingStatus("", true);
  health->SetServingStatus("manyshot.v1.ManyShot", true);
  store_watch_ = std::make_unique<StoreWatch>(*cache_, *health);
  // A device fault takes the process's own shutdown path: main drains and exits non-zero.
  device_watch_ = std::make_unique<DeviceWatch>(*health, &manyshot::DeviceFault,
                                                [] { ::kill(::getpid(), SIGTERM); });
  return absl::OkStatus();
}

void ServerApp::StopServing() {
  if (shut_down_ || server_ == nullptr) return;
  auto* health = server_->GetHealthCheckService();
  health->SetServingStatus("", false);
  health->SetServingStatus("manyshot.v1.ManyShot", false);
}

void ServerApp::Shutdown(std::chrono::milliseconds grace) {
  if (shut_down_ || server_ == nullptr) return;  // never started, or already stopped
  shut_down_ = true;
  store_watch_.reset();
  device_watch_.reset();
  server_->GetHealthCheckService()->Shutdown();
  // New work is refused; queued work still runs within the grace period: what is being prepared
  // joins the engine queue first, then the engine queue stops taking work.
  const auto deadline = std::chrono::steady_clock::now() + grace;
  preparation_->Drain();
  preparation_->WaitIdle(deadline);
  scheduler_->Drain();
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(
                        std::max(deadline - std::chrono::steady_clock::now(),
                                 std::chrono::steady_clock::duration::zero())));
  server_->Wait();
}

ServerApp::~ServerApp() { Shutdown(std::chrono::milliseconds(0)); }

}  // namespace manyshot::server
