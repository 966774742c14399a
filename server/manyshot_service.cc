#include "server/manyshot_service.h"

#include <thread>

#include "server/build_info.h"

namespace manyshot::server {
namespace {

grpc::Status NotYet(const char* method) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      std::string("manyshot.v1.ManyShot/") + method +
                          " is not available in this build yet: the engine is not wired to the "
                          "service. GetServerInfo works.");
}

}  // namespace

ManyShotService::ManyShotService(const ServerConfig& config)
    : config_(config), start_time_(std::chrono::system_clock::now()) {}

grpc::Status ManyShotService::CreateTask(
    grpc::ServerContext*,
    grpc::ServerReaderWriter<v1::CreateTaskResponse, v1::CreateTaskRequest>*) {
  return NotYet("CreateTask");
}

grpc::Status ManyShotService::GetTask(grpc::ServerContext*, const v1::GetTaskRequest*, v1::Task*) {
  return NotYet("GetTask");
}

grpc::Status ManyShotService::ListTasks(grpc::ServerContext*, const v1::ListTasksRequest*,
                                        v1::ListTasksResponse*) {
  return NotYet("ListTasks");
}

grpc::Status ManyShotService::DeleteTask(grpc::ServerContext*, const v1::DeleteTaskRequest*,
                                         v1::DeleteTaskResponse*) {
  return NotYet("DeleteTask");
}

grpc::Status ManyShotService::Classify(grpc::ServerContext*, const v1::ClassifyRequest*,
                                       v1::ClassifyResponse*) {
  return NotYet("Classify");
}

grpc::Status ManyShotService::StreamClassify(
    grpc::ServerContext*, grpc::ServerReaderWriter<v1::ClassifyResponse, v1::ClassifyRequest>*) {
  return NotYet("StreamClassify");
}

grpc::Status ManyShotService::Score(grpc::ServerContext*, const v1::ScoreRequest*,
                                    v1::ScoreResponse*) {
  return NotYet("Score");
}

grpc::Status ManyShotService::Generate(grpc::ServerContext*, const v1::GenerateRequest*,
                                       grpc::ServerWriter<v1::GenerateResponse>*) {
  return NotYet("Generate");
}

grpc::Status ManyShotService::GetServerInfo(grpc::ServerContext*, const v1::GetServerInfoRequest*,
                                            v1::ServerInfo* response) {
  response->set_version(kVersion);
  auto* backend = response->mutable_backend();
  backend->set_name("cpu");
  unsigned threads = config_.threads > 0 ? static_cast<unsigned>(config_.threads)
                                         : std::max(1u, std::thread::hardware_concurrency());
  backend->set_threads(threads);
  backend->set_device("host CPU");
  auto* limits = response->mutable_limits();
  limits->set_max_message_bytes(config_.max_message_bytes);
  auto since_epoch = start_time_.time_since_epoch();
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  response->mutable_start_time()->set_seconds(seconds.count());
  response->mutable_start_time()->set_nanos(static_cast<int32_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - seconds).count()));
  return grpc::Status::OK;
}

}  // namespace manyshot::server
