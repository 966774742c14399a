#include "server/manyshot_service.h"

#include <fstream>
#include <string>

#include "engine/core/dtype.h"
#include "server/build_info.h"

namespace manyshot::server {
namespace {

grpc::Status NotYet(const char* method) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      std::string("manyshot.v1.ManyShot/") + method +
                          " is not available in this build yet: the engine is not wired to the "
                          "service. GetServerInfo works.");
}

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

}  // namespace

ManyShotService::ManyShotService(const ServerConfig& config,
                                 std::shared_ptr<const LoadedModel> model)
    : config_(config), model_(std::move(model)), start_time_(std::chrono::system_clock::now()) {}

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
  const ModelConfig& c = model_->transformer->config();
  auto* model = response->mutable_model();
  model->set_path(model_->path.string());
  model->set_model_type(c.model_type);
  model->set_layers(static_cast<uint32_t>(c.num_layers));
  model->set_hidden_size(static_cast<uint32_t>(c.hidden_size));
  model->set_heads(static_cast<uint32_t>(c.num_heads));
  model->set_kv_heads(static_cast<uint32_t>(c.num_kv_heads));
  model->set_head_dim(static_cast<uint32_t>(c.head_dim));
  model->set_vocab_size(static_cast<uint32_t>(c.vocab_size));
  model->set_context_length(static_cast<uint32_t>(c.max_position_embeddings));
  model->set_fingerprint(model_->transformer->fingerprint());
  model->set_random_weights(model_->random_weights);
  model->set_tokenizer_kind(model_->tokenizer->kind());
  model->set_tokenizer_fingerprint(model_->tokenizer->fingerprint());
  model->set_weight_dtype(std::string(DTypeName(model_->transformer->stored_dtype())));

  auto* backend = response->mutable_backend();
  backend->set_name(model_->backend->name());
  static const std::string device = CpuModelName();
  backend->set_device(device);
  backend->set_threads(static_cast<uint32_t>(model_->backend->threads()));
  backend->set_blas_kernel(BlasKernelName());
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
