// The manyshot.v1.ManyShot gRPC service on gRPC's callback (reactor) API. Every method is
// registered raw (grpc::ByteBuffer in and out) so the service parses requests itself and can
// answer an undecodable message with INVALID_ARGUMENT naming the field (server/request_parser.h).
// No handler blocks a thread on the engine: requests are handed to the scheduler, whose worker
// completes the call; task encoding runs on job threads (server/job_threads.h). Unary methods are
// here; the streaming ones have a reactor each (create_task_reactor, stream_classify_reactor,
// generate_reactor).
#pragma once

#include <memory>

#include "grpcpp/support/byte_buffer.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "server/job_threads.h"
#include "server/service_parts.h"

namespace manyshot::server {

using ManyShotRawCallbackService = v1::ManyShot::WithRawCallbackMethod_CreateTask<
    v1::ManyShot::WithRawCallbackMethod_GetTask<v1::ManyShot::WithRawCallbackMethod_ListTasks<
        v1::ManyShot::WithRawCallbackMethod_DeleteTask<v1::ManyShot::WithRawCallbackMethod_Classify<
            v1::ManyShot::WithRawCallbackMethod_StreamClassify<
                v1::ManyShot::WithRawCallbackMethod_Score<
                    v1::ManyShot::WithRawCallbackMethod_Generate<
                        v1::ManyShot::WithRawCallbackMethod_GetServerInfo<
                            v1::ManyShot::Service>>>>>>>>>;

class ManyShotService final : public ManyShotRawCallbackService {
 public:
  // Everything passed in outlives the service.
  ManyShotService(const ServerConfig& config, const TenantDirectory& tenants,
                  std::shared_ptr<const LoadedModel> model, TaskRegistry& registry,
                  PreparationPool& preparation, Scheduler& scheduler, ContextCache& cache,
                  ServiceMetrics& metrics);

  using Bidi = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;
  using Unary = grpc::ServerUnaryReactor;
  using Context = grpc::CallbackServerContext;
  using Bytes = grpc::ByteBuffer;

  Bidi* CreateTask(Context* context) override;
  Unary* GetTask(Context* context, const Bytes* request, Bytes* response) override;
  Unary* ListTasks(Context* context, const Bytes* request, Bytes* response) override;
  Unary* DeleteTask(Context* context, const Bytes* request, Bytes* response) override;
  Unary* Classify(Context* context, const Bytes* request, Bytes* response) override;
  Bidi* StreamClassify(Context* context) override;
  Unary* Score(Context* context, const Bytes* request, Bytes* response) override;
  grpc::ServerWriteReactor<Bytes>* Generate(Context* context, const Bytes* request) override;
  Unary* GetServerInfo(Context* context, const Bytes* request, Bytes* response) override;

 private:
  ServiceParts parts_;
  JobThreads jobs_;  // declared last: destroyed (waiting for running encodes) first
};

}  // namespace manyshot::server
