// The manyshot.v1.ManyShot gRPC service: validates requests, turns them into engine calls through
// the task registry (tasks, cache) and the scheduler (batching), and maps results back.
#pragma once

#include <chrono>
#include <memory>

#include "manyshot/v1/manyshot.grpc.pb.h"
#include "server/model_loader.h"
#include "server/scheduler.h"
#include "server/server_config.h"
#include "server/service_metrics.h"
#include "server/task_registry.h"

namespace manyshot::server {

class ManyShotService final : public manyshot::v1::ManyShot::Service {
 public:
  // Everything passed in outlives the service.
  ManyShotService(const ServerConfig& config, std::shared_ptr<const LoadedModel> model,
                  TaskRegistry& registry, Scheduler& scheduler, ContextCache& cache,
                  ServiceMetrics& metrics);

  grpc::Status CreateTask(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CreateTaskResponse, v1::CreateTaskRequest>* stream) override;
  grpc::Status GetTask(grpc::ServerContext* context, const v1::GetTaskRequest* request,
                       v1::Task* response) override;
  grpc::Status ListTasks(grpc::ServerContext* context, const v1::ListTasksRequest* request,
                         v1::ListTasksResponse* response) override;
  grpc::Status DeleteTask(grpc::ServerContext* context, const v1::DeleteTaskRequest* request,
                          v1::DeleteTaskResponse* response) override;
  grpc::Status Classify(grpc::ServerContext* context, const v1::ClassifyRequest* request,
                        v1::ClassifyResponse* response) override;
  grpc::Status StreamClassify(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::ClassifyResponse, v1::ClassifyRequest>* stream) override;
  grpc::Status Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                     v1::ScoreResponse* response) override;
  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context, const v1::GetServerInfoRequest* request,
                             v1::ServerInfo* response) override;

 private:
  // Classification shared by Classify and StreamClassify.
  grpc::Status DoClassify(grpc::ServerContext* context, const v1::ClassifyRequest& request,
                          v1::ClassifyResponse* response);
  // Counts, times and logs one finished call.
  grpc::Status Finish(const char* method, grpc::ServerContext* context,
                      std::chrono::steady_clock::time_point start, const std::string& task_id,
                      grpc::Status status);

  ServerConfig config_;
  std::shared_ptr<const LoadedModel> model_;
  TaskRegistry& registry_;
  Scheduler& scheduler_;
  ContextCache& cache_;
  ServiceMetrics& metrics_;
  std::chrono::system_clock::time_point start_time_;
};

}  // namespace manyshot::server
