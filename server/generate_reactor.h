// Generate as a server-streaming callback reactor: the request is validated here and generation
// runs as a scheduler job; tokens produced on the worker are queued for writing as they come
// (server/write_queue.h), so the worker never waits for the client.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/scheduler.h"
#include "server/service_parts.h"
#include "server/write_queue.h"

namespace manyshot::server {

class GenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // Parses and starts the request; deletes itself when the call is done.
  GenerateReactor(ServiceParts& parts, grpc::CallbackServerContext* context,
                  const grpc::ByteBuffer& request);

  void OnWriteDone(bool ok) override { writes_.OnWriteDone(ok); }
  void OnCancel() override { abandoned_->store(true); }
  void OnDone() override { delete this; }

 private:
  void Start(const grpc::ByteBuffer& request);
  // Streams a token with the text it adds (empty while a multi-byte character is incomplete).
  void Emit(int32_t token, double logprob);
  void End(const absl::Status& status);
  // Writes the last response (a beam's tokens first, then the result) and ends the call.
  void WriteResult(const GenerationOutput& output, bool beam);

  ServiceParts& parts_;
  grpc::CallbackServerContext* context_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  const Scheduler::AbandonFlag abandoned_ = Scheduler::NewAbandonFlag();
  WriteQueue<GenerateReactor> writes_{this};
  std::string task_id_;
  // Touched only by the job on the worker, then by its completion.
  std::vector<int32_t> emitted_;
  std::string emitted_text_;
};

}  // namespace manyshot::server
