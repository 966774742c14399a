#include "server/server_app.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {

absl::StatusOr<std::unique_ptr<ServerApp>> ServerApp::Start(const ServerConfig& config) {
  std::unique_ptr<ServerApp> app(new ServerApp());
  app->config_ = config;
  auto data_dir = DataDir::Open(config.data_dir);
  if (!data_dir.ok()) return data_dir.status();
  app->data_dir_ = *std::move(data_dir);

  auto metrics = Metrics::Start(config.metrics_address);
  if (!metrics.ok()) return metrics.status();
  app->metrics_ = *std::move(metrics);

  // The model loads before the gRPC server exists, so health (and every RPC) is answered only
  // once it is ready; a model that fails to load stops the start with the error.
  auto model = LoadServedModel(config, app->data_dir_->path());
  if (!model.ok()) return model.status();
  app->model_ = std::make_shared<const LoadedModel>(*std::move(model));

  app->service_ = std::make_unique<ManyShotService>(config, app->model_);

  // Both must happen before the builder is created: the health service is created by the
  // builder, and the reflection plugin is only linked in when this function is called.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // gRPC enables SO_REUSEPORT by default, which would let a second server silently share the port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  builder.AddListeningPort(config.listen_address, grpc::InsecureServerCredentials(),
                           &app->grpc_port_);
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
  spdlog::info("manyshot-server listening grpc={} port={} metrics_port={} data_dir={}",
               config.listen_address, app->grpc_port_, app->metrics_port(),
               app->data_dir_->path().string());
  return app;
}

void ServerApp::Shutdown(std::chrono::milliseconds grace) {
  if (shut_down_ || server_ == nullptr) return;  // never started, or already stopped
  shut_down_ = true;
  server_->GetHealthCheckService()->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
}

ServerApp::~ServerApp() { Shutdown(std::chrono::milliseconds(0)); }

}  // namespace manyshot::server
