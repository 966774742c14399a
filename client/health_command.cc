#include <cstdio>

#include "client/commands.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace manyshot::client {

int RunHealth(const CliContext& cli) {
  auto stub = grpc::health::v1::Health::NewStub(cli.channel);
  grpc::health::v1::HealthCheckRequest request;
  if (!cli.args.empty()) request.set_service(cli.args.front());
  grpc::health::v1::HealthCheckResponse response;
  auto call = cli.NewCall();
  grpc::Status status = stub->Check(call.get(), request, &response);
  if (!status.ok()) return ReportRpcError("health", status);
  std::string name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  if (cli.json) {
    std::printf("{\"server\":\"%s\",\"service\":\"%s\",\"status\":\"%s\"}\n", cli.server.c_str(),
                request.service().c_str(), name.c_str());
  } else {
    std::printf("%s %s\n", cli.server.c_str(), name.c_str());
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace manyshot::client
