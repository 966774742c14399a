// CreateTask as a bidirectional callback reactor: request messages are parsed as they arrive and
// their demonstrations collected (RECEIVING progress every 500 ms); at half-close the task is
// encoded on a job thread (server/job_threads.h) that streams progress and the result.
//
// A message that cannot be decoded, or one over the limits, fails the call before anything is
// stored: the registry sees the task only once the whole upload was read and validated. One upload
// may buffer at most --max_upload_bytes of request messages, and all uploads together at most
// --max_total_upload_bytes until their calls end (RESOURCE_EXHAUSTED beyond). The stream counts
// against --max_streams_per_tenant, and an upload idle for --stream_idle_timeout_seconds ends
// with UNAVAILABLE (server/stream_registry.h).
#pragma once

#include <chrono>
#include <mutex>

#include "google/protobuf/repeated_ptr_field.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "manyshot/v1/manyshot.pb.h"
#include "server/job_threads.h"
#include "server/service_parts.h"
#include "server/stream_registry.h"
#include "server/write_queue.h"

namespace manyshot::server {

class CreateTaskReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                                public StreamRegistry::Stream {
 public:
  // Starts reading; deletes itself when the call is done.
  CreateTaskReactor(ServiceParts& parts, JobThreads& jobs, grpc::CallbackServerContext* context);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override { writes_.OnWriteDone(ok); }
  void OnDone() override { Unref(); }

  // StreamRegistry::Stream: an upload that sends nothing for the idle limit is ended (and what it
  // holds of --max_total_upload_bytes given back); encoding is never idle.
  bool TryRef() override;
  void Unref() override;
  void EndIfIdleSince(std::chrono::steady_clock::time_point since,
                      std::chrono::seconds limit) override;

 private:
  // Takes one request message; an error fails the call.
  absl::Status Accept();
  // After half-close: encodes and stores the task (on a job thread).
  void Encode();
  void SendProgress(v1::CreateTaskProgress::Phase phase, int64_t done, int64_t total,
                    int64_t tokens);
  void Fail(const absl::Status& status);
  // Gives the stream's slot back and finishes the call once its responses are written.
  void EndCall(grpc::Status status);

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
  // Shared with the idle watchdog.
  std::mutex mutex_;
  int refs_ = 1;           // gRPC's until OnDone, plus the watchdog's while it looks
  bool ended_ = false;     // Finish was requested by a failure or the idle watchdog
  bool reading_ = true;    // the upload phase (the only one that can be idle)
  bool admitted_ = false;  // registered in parts_.streams
  std::chrono::steady_clock::time_point last_activity_ = start_;
};

}  // namespace manyshot::server
