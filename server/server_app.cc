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

}  // namespace

absl::StatusOr<std::unique_ptr<ServerApp>> ServerApp::Start(const ServerConfig& config) {
  std::unique_ptr<ServerApp> app(new ServerApp());
  app->config_ = config;
  if (auto status = ValidateServerConfig(config); !status.ok()) return status;
  // Protobuf logs why it rejected a message (e.g. invalid UTF-8 in a field) to stderr, bypassing
  // the log format; the service reports each bad request itself, so these are debug lines.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel level, const char*, int, const std::string& message) {
        if (level == google::protobuf::LOGLEVEL_FATAL) {
          spdlog::error("protobuf: {}", message);
        } else {
          spdlog::debug("protobuf: {}", message);
        }
      });
  // Security configuration first: a bad certificate or tokens file fails before any slow work.
  auto creds = MakeServerCredentials(config, &app->tenants_);
  if (!creds.ok()) return creds.status();
  auto data_dir = DataDir::Open(config.data_dir);
  if (!data_dir.ok()) return data_dir.status();
  app->data_dir_ = *std::move(data_dir);
  // RocksDB aborts (an assertion in Debian's build) when it opens on a full disk: refuse first.
  if (auto room = CheckStartRoom(app->data_dir_->path(), config.min_free_disk_bytes); !room.ok()) {
    return room;
  }

  auto metrics = Metrics::Start(config.metrics_address);
  if (!metrics.ok()) return metrics.status();
  app->metrics_ = *std::move(metrics);

  // The model loads before the gRPC server exists, so health (and every RPC) is answered only
  // once it is ready; a model that fails to load stops the start with the error.
  auto model = LoadServedModel(config, app->data_dir_->path());
  if (!model.ok()) return model.status();
  app->model_ = std::make_shared<const LoadedModel>(*std::move(model));
  app->metrics_->SetBackend(app->model_->backend->name(), app->model_->backend->description(),
                            std::string(DTypeName(app->model_->description().compute_dtype)),
                            std::string(DTypeName(app->model_->description().kv_dtype)));
  app->metrics_->SetModel(app->model_->description().model_type,
                          app->model_->description().architecture());

  // The KV cache (RocksDB under the data directory) and the tasks it holds.
  ContextCacheOptions cache_options;
  // The memory tier lives where the backend's tensors do: GPU memory on the CUDA backend.
  cache_options.memory_budget_bytes = app->model_->backend->device() == Device::kCUDA
                                          ? config.gpu_memory_budget_bytes
                                          : config.memory_budget_bytes;
  cache_options.disk_budget_bytes = config.disk_budget_bytes;
  cache_options.disk_reserve_bytes = config.min_free_disk_bytes;
  // Contexts evicted from GPU memory wait in pinned host memory before falling back to RocksDB.
  if (app->model_->backend->device() == Device::kCUDA) {
    cache_options.host_budget_bytes = config.host_memory_budget_bytes;
  }
  cache_options.eager_restore = config.eager_restore;
  if (app->model_->backend->device() == Device::kCUDA &&
      config.gpu_pool_release_threshold_bytes >= 0) {
    const auto bytes = static_cast<uint64_t>(config.gpu_pool_release_threshold_bytes);
    if (auto s = SetGpuPoolReleaseThreshold(config.device, bytes); !s.ok()) return s;
    spdlog::info("cuda: the memory pool keeps at most {} freed bytes", bytes);
  }
  // Unset: the backend's default (server/kv_dtype_default.h); what the service checks specs
  // against and GetServerInfo reports from here on.
  if (app->config_.kv_dtype.empty()) {
    app->config_.kv_dtype =
        DefaultKvDtype(app->model_->backend->device(), app->model_->description().compute_dtype);
  }
  auto kv_dtype = ParseDTypeFlag("kv_dtype", app->config_.kv_dtype);
  if (!kv_dtype.ok()) return kv_dtype.status();
  cache_options.kv_dtype = kv_dtype->value_or(DType::kF32);
  if (const int64_t head_dim = app->model_->description().context_head_dim; head_dim != 0) {
    spdlog::info("attention: {}", AttentionKernelDescription(app->model_->backend->device(),
                                                             cache_options.kv_dtype, head_dim));
  }
  // Both backends' attention reads 16-bit context K/V directly: keep memory in the storage dtype.
  cache_options.memory_holds_storage_dtype = true;
  cache_options.log = [](LogLevel level, const std::string& message) {
    if (level == LogLevel::kError) {
      spdlog::error("cache: {}", message);
    } else if (level == LogLevel::kWarning) {
      spdlog::warn("cache: {}", message);
    } else {
      spdlog::info("cache: {}", message);
    }
  };
  auto cache =
      ContextCache::Open(app->data_dir_->path() / "cache", cache_options, *app->model_->backend);
  if (!cache.ok()) return cache.status();
  app->cache_ = *std::move(cache);
  app->registry_ = std::make_unique<TaskRegistry>(*app->model_, *app->cache_, app->config_);
  if (auto s = app->registry_->Restore(); !s.ok()) return s;
  app->shared_metrics_ = std::make_unique<SharedMetrics>(app->metrics_->registry());
  if (!config.shared_dir.empty()) {
    auto shared = SharedTier::Open(config.shared_dir, *app->model_->backend,
                                   app->cache_->storage_dtype(), *app->shared_metrics_);
    if (!shared.ok()) return shared.status();
    app->shared_ = *std::move(shared);
    app->registry_->AttachShared(app->shared_.get());
  }
  app->service_metrics_ = std::make_unique<ServiceMetrics>(
      app->metrics_->registry(), *app->cache_,
      app->model_->backend->device() == Device::kCUDA ? "gpu" : "host");
  app->metrics_->Register(app->service_metrics_->cache_collector());
  app->task_collector_ = MakeTaskStateCollector(*app->registry_);
  app->metrics_->Register(app->task_collector_);  // the exposer keeps only a weak pointer
  ServiceMetrics* sm = app->service_metrics_.get();
  SchedulerHooks hooks;
  hooks.on_batch = [sm](size_t n) { sm->Batch(n); };
  hooks.on_wait = [sm](double s) { sm->QueueWait(s); };
  hooks.on_depth = [sm](size_t d) { sm->QueueDepth(d); };
  app->scheduler_ = std::make_unique<Scheduler>(*app->registry_, app->config_, hooks);
  const int preparation_threads =
      config.preparation_threads > 0
          ? config.preparation_threads
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app->preparation_ = std::make_unique<PreparationPool>(
      preparation_threads, static_cast<size_t>(std::max(1, config.max_queue_inputs)));
  app->service_ =
      std::make_unique<ManyShotService>(app->config_, app->tenants_, app->model_, *app->registry_,
                                        *app->preparation_, *app->scheduler_, *app->cache_, *sm);

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
                             static_cast<int>(config.max_streams_per_connection));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  builder.AddListeningPort(config.listen_address, *creds, &app->grpc_port_);
  builder.RegisterService(app->service_.get());
  app->server_ = builder.BuildAndStart();
  if (app->server_ == nullptr || app->grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on --listen_address=", config.listen_address,
                     " (address in use or not local?)"));
  }
  auto* health = app->server_->GetHealthCheckService();
  health->SetServingStatus("", true);
  health->SetServingStatus("manyshot.v1.ManyShot", true);
  app->store_watch_ = std::make_unique<StoreWatch>(*app->cache_, *health);
  // A device fault takes the process's own shutdown path: main drains and exits non-zero.
  app->device_watch_ = std::make_unique<DeviceWatch>(*health, &manyshot::DeviceFault,
                                                     [] { ::kill(::getpid(), SIGTERM); });
  spdlog::info(
      "manyshot-server listening grpc={} port={} metrics_port={} data_dir={} tls={} mtls={} "
      "auth={}",
      config.listen_address, app->grpc_port_, app->metrics_port(), app->data_dir_->path().string(),
      !config.tls_cert_file.empty(), !config.tls_client_ca_file.empty(),
      !config.auth_tokens_file.empty());
  return app;
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
