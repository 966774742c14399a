#include "server/stream_classify_reactor.h"

#include "absl/strings/str_cat.h"
#include "server/classify_call.h"
#include "server/grpc_status.h"
#include "server/request_context.h"
#include "server/request_parser.h"

namespace manyshot::server {

StreamClassifyReactor::StreamClassifyReactor(ServiceParts& parts,
                                             grpc::CallbackServerContext* context)
    : parts_(parts), context_(context), tenant_(TenantOf(parts.tenants, context)) {
  if (absl::Status admitted = parts_.streams.Admit(tenant_, this); !admitted.ok()) {
    finished_ = true;
    writes_.Finish(parts_.Record("StreamClassify", context_, start_, "", ToGrpc(admitted)));
    return;
  }
  admitted_ = true;
  StartRead(&read_buffer_);
}

bool StreamClassifyReactor::TryRef() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_ || refs_ == 0) return false;
  ++refs_;
  return true;
}

void StreamClassifyReactor::EndIfIdleSince(std::chrono::steady_clock::time_point since,
                                           std::chrono::seconds limit) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_ || inflight_ > 0 || last_activity_ > since) return;
    finished_ = true;
  }
  abandoned_->store(true);
  EndCall(parts_.Record("StreamClassify", context_, start_, "", ToGrpc(StreamIdleError(limit))));
}

void StreamClassifyReactor::OnReadDone(bool ok) {
  if (!ok) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      reads_done_ = true;
    }
    FinishIfComplete();
    return;
  }
  v1::ClassifyRequest request;
  uint64_t message = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_) return;  // ended meanwhile (idle): no more reads
    message = ++messages_;
    last_activity_ = std::chrono::steady_clock::now();
  }
  if (auto parsed = ParseRequest(read_buffer_, request, 0,
                                 absl::StrCat("StreamClassify message ", message, ": "));
      !parsed.ok()) {
    return FailStream(parsed);
  }
  const auto request_start = std::chrono::steady_clock::now();
  absl::Status refused = CheckRequestId(request.request_id());
  if (!refused.ok()) {
    request.clear_request_id();  // never echoed back, never held
  } else {
    refused = TakeInflightSlot();
  }
  if (!refused.ok()) {
    v1::ClassifyResponse response;
    response.set_request_id(request.request_id());
    Answer(std::move(response), refused, request_start);
  } else {
    Classify(request, request_start);
  }
  ContinueReading();
}

void StreamClassifyReactor::FailStream(const absl::Status& status) {
  // The rest of the stream cannot be trusted to line up with what the client meant: fail the
  // call rather than skip the message (answers already sent stay valid).
  abandoned_->store(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
  }
  EndCall(parts_.Record("StreamClassify", context_, start_, "", ToGrpc(status)));
}

absl::Status StreamClassifyReactor::TakeInflightSlot() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (inflight_ >= parts_.config.max_stream_inflight) {
    return WithReason(
        absl::ResourceExhaustedError(
            absl::StrCat("this stream already has ", inflight_,
                         " requests being answered (--max_stream_inflight ",
                         parts_.config.max_stream_inflight, "); read answers before sending more")),
        reason::kStreamInflightLimit);
  }
  if (parts_.stream_inflight.fetch_add(1) >= parts_.config.max_server_inflight) {
    parts_.stream_inflight.fetch_sub(1);
    return WithReason(
        absl::ResourceExhaustedError(absl::StrCat(
            "the server already has --max_server_inflight ", parts_.config.max_server_inflight,
            " StreamClassify requests being answered; retry with backoff")),
        reason::kServerInflightLimit);
  }
  ++inflight_;
  ++refs_;
  return absl::OkStatus();
}

void StreamClassifyReactor::Classify(const v1::ClassifyRequest& request,
                                     std::chrono::steady_clock::time_point request_start) {
  StartClassify(parts_, tenant_, request, abandoned_,
                [this, request_start,
                 request_id = request.request_id()](absl::StatusOr<v1::ClassifyResponse> response) {
                  parts_.stream_inflight.fetch_sub(1);
                  v1::ClassifyResponse out;
                  if (response.ok()) {
                    out = *std::move(response);
                  } else {
                    out.set_request_id(request_id);
                  }
                  Answer(std::move(out), response.status(), request_start);
                  {
                    std::lock_guard<std::mutex> lock(mutex_);
                    --inflight_;
                  }
                  FinishIfComplete();
                  Unref();
                });
}

void StreamClassifyReactor::Answer(v1::ClassifyResponse response, const absl::Status& status,
                                   std::chrono::steady_clock::time_point start) {
  parts_.metrics.StreamMessage(
      "StreamClassify", absl::StatusCodeToString(status.code()),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!status.ok()) *response.mutable_error() = ToRpcStatus(status);
  writes_.Write(SerializeResponse(response));
}

void StreamClassifyReactor::ContinueReading() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_ || reads_done_) return;
    if (writes_.backlog() >= parts_.config.max_stream_inflight) {
      read_paused_ = true;  // OnWriteDone resumes
      return;
    }
  }
  StartRead(&read_buffer_);
}

void StreamClassifyReactor::OnWriteDone(bool ok) {
  writes_.OnWriteDone(ok);
  bool resume = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last_activity_ = std::chrono::steady_clock::now();
    if (read_paused_ && writes_.backlog() < parts_.config.max_stream_inflight) {
      read_paused_ = false;
      resume = !finished_;
    }
  }
  if (resume) StartRead(&read_buffer_);
}

void StreamClassifyReactor::FinishIfComplete() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_ || !reads_done_ || inflight_ > 0) return;
    finished_ = true;
  }
  grpc::Status status = grpc::Status::OK;
  if (context_->IsCancelled()) status = GrpcError(grpc::StatusCode::CANCELLED, "cancelled");
  EndCall(parts_.Record("StreamClassify", context_, start_, "", status));
}

void StreamClassifyReactor::EndCall(grpc::Status status) {
  // The tenant's slot comes back before the client can see the end, so a client that opens its
  // next stream as soon as this one ends is not refused.
  if (admitted_) parts_.streams.Remove(tenant_, this);
  writes_.Finish(std::move(status));
}

void StreamClassifyReactor::OnCancel() {
  // Queued requests of a cancelled stream cost no compute; reads fail and end the stream.
  abandoned_->store(true);
}

void StreamClassifyReactor::OnDone() { Unref(); }

void StreamClassifyReactor::Unref() {
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last = --refs_ == 0;
  }
  if (!last) return;
  if (admitted_) parts_.streams.Remove(tenant_, this);
  delete this;
}

}  // namespace manyshot::server
