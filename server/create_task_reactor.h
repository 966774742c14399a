// CreateTask as a bidirectional callback reactor: request messages are parsed as they arrive and
// their demonstrations collected (RECEIVING progress every 500 ms); at half-close the task is
// encoded on a job thread (server/job_threads.h) that streams progress and the result.
//
// A message that cannot be decoded, or one over the limits, fails the call before anything is
// stored: the registry sees the task only once the whole upload was read and validated. One upload
// may buffer at most --max_upload_bytes of request messages, and all uploads together at most
// --max_total_upload_bytes until their calls end (RESOURCE_EXHAUSTED beyond).
#pragma once

#include <chrono>

#include "google/protobuf/repeated_ptr_field.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "manyshot/v1/manyshot.pb.h"
#include "server/job_threads.h"
#include "server/service_parts.h"
#include "server/write_queue.h"

namespace manyshot::server {

class CreateTaskReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Starts reading; deletes itself when the call is done.
  CreateTaskReactor(ServiceParts& parts, JobThreads& jobs, grpc::CallbackServerContext* context);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override { writes_.OnWriteDone(ok); }
  void OnDone() override;

 private:
  // Takes one request message; an error fails the call.
  absl::Status Accept();
  // After half-close: encodes and stores the task (on a job thread).
  void Encode();
  void SendProgress(v1::CreateTaskProgress::Phase phase, int64_t done, int64_t total,
                    int64_t tokens);
  void Fail(const absl::Status& status);

  ServiceParts& parts_;
  JobThreads& jobs_;
  grpc::CallbackServerContext* context_;
  const std::string tenant_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  WriteQueue<CreateTaskReactor> writes_{this};
  grpc::ByteBuffer read_buffer_;
  // Only the reading thread touches these until Encode() takes them.
  uint64_t messages_ = 0;
  uint64_t bytes_ = 0;
  v1::CreateTaskRequest first_;
  google::protobuf::RepeatedPtrField<v1::Demonstration> demos_;
  std::chrono::steady_clock::time_point last_progress_ = start_;
};

}  // namespace manyshot::server
