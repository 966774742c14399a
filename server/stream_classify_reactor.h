// StreamClassify as a bidirectional callback reactor: each request message is parsed and handed to
// the scheduler as it arrives, and answered (in completion order) when the worker calls back; no
// thread waits for it. A request that fails alone is answered in-band with a google.rpc.Status; a
// message that cannot be decoded fails the whole call with INVALID_ARGUMENT.
//
// Bounds: at most --max_stream_inflight requests of one stream and --max_server_inflight of all
// streams are being answered at once; a request beyond either is answered in-band with
// RESOURCE_EXHAUSTED naming the limit. Reading pauses while that many answers wait for the client
// to read them, so a client that writes without reading is held back by flow control. A tenant
// has at most --max_streams_per_tenant streams open (the call beyond ends at once with
// RESOURCE_EXHAUSTED), and a stream idle for --stream_idle_timeout_seconds ends with UNAVAILABLE
// (server/stream_registry.h).
#pragma once

#include <chrono>
#include <mutex>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/scheduler.h"
#include "server/service_parts.h"
#include "server/stream_registry.h"
#include "server/write_queue.h"

namespace manyshot::server {

class StreamClassifyReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public StreamRegistry::Stream {
 public:
  // Starts reading; deletes itself when the call is done and no request is in flight.
  StreamClassifyReactor(ServiceParts& parts, grpc::CallbackServerContext* context);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // StreamRegistry::Stream.
  bool TryRef() override;
  void Unref() override;
  void EndIfIdleSince(std::chrono::steady_clock::time_point since,
                      std::chrono::seconds limit) override;

 private:
  // Queues one answer and records the request's metric.
  void Answer(v1::ClassifyResponse response, const absl::Status& status,
              std::chrono::steady_clock::time_point start);
  // Reads the next message unless the call failed or too many answers are unread.
  void ContinueReading();
  // Gives the stream's slot back and finishes the call once its answers are written.
  void EndCall(grpc::Status status);
  // A message that does not parse ends the whole call with `status`.
  void FailStream(const absl::Status& status);
  // One of this stream's and one of the server's in-flight slots (and a reference held until
  // the answer is written), or RESOURCE_EXHAUSTED naming the limit that refused it.
  absl::Status TakeInflightSlot();
  // Runs one admitted request; its completion answers it and returns the slots.
  void Classify(const v1::ClassifyRequest& request,
                std::chrono::steady_clock::time_point request_start);
  // Finishes with OK once the client half-closed and every request is answered.
  void FinishIfComplete();

  ServiceParts& parts_;
  grpc::CallbackServerContext* context_;
  const std::string tenant_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  // Shared by every request of the stream: set when the call is cancelled or has failed.
  const Scheduler::AbandonFlag abandoned_ = Scheduler::NewAbandonFlag();
  WriteQueue<StreamClassifyReactor> writes_{this};
  grpc::ByteBuffer read_buffer_;  // owned by gRPC between StartRead and OnReadDone

  std::mutex mutex_;
  int refs_ = 1;             // gRPC's reference until OnDone, plus one per in-flight request
  uint64_t inflight_ = 0;    // requests handed to the scheduler and not answered yet
  uint64_t messages_ = 0;    // request messages read
  bool reads_done_ = false;  // the client half-closed (or the stream broke)
  bool read_paused_ = false;
  bool finished_ = false;  // Finish was requested
  bool admitted_ = false;  // registered in parts_.streams (Remove()d before deletion)
  std::chrono::steady_clock::time_point last_activity_ = start_;  // a message read or answered
};

}  // namespace manyshot::server
