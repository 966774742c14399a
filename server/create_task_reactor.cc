#include "server/create_task_reactor.h"

#include "absl/strings/str_cat.h"
#include "server/api_to_engine.h"
#include "server/grpc_status.h"
#include "server/request_context.h"
#include "server/request_parser.h"

namespace manyshot::server {

CreateTaskReactor::CreateTaskReactor(ServiceParts& parts, JobThreads& jobs,
                                     grpc::CallbackServerContext* context)
    : parts_(parts), jobs_(jobs), context_(context), tenant_(TenantOf(parts.tenants, context)) {
  if (absl::Status admitted = parts_.streams.Admit(tenant_, this); !admitted.ok()) {
    Fail(admitted);
    return;
  }
  admitted_ = true;
  StartRead(&read_buffer_);
}

bool CreateTaskReactor::TryRef() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (ended_ || refs_ == 0) return false;
  ++refs_;
  return true;
}

void CreateTaskReactor::Unref() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (--refs_ > 0) return;
  }
  if (admitted_) parts_.streams.Remove(tenant_, this);
  // What this call held, received or not yet stored.
  parts_.upload_bytes.fetch_sub(bytes_);
  parts_.metrics.UploadBytesReleased(bytes_);
  delete this;
}

void CreateTaskReactor::EndIfIdleSince(std::chrono::steady_clock::time_point since,
                                       std::chrono::seconds limit) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ended_ || !reading_ || last_activity_ > since) return;
    ended_ = true;
  }
  EndCall(parts_.Record("CreateTask", context_, start_, "", ToGrpc(StreamIdleError(limit))));
}

void CreateTaskReactor::Fail(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ended_ = true;
  }
  EndCall(parts_.Record("CreateTask", context_, start_, first_.task_id(), ToGrpc(status)));
}

void CreateTaskReactor::EndCall(grpc::Status status) {
  // The tenant's slot comes back before the client can see the end, so a client that opens its
  // next stream as soon as this one ends is not refused.
  if (admitted_) parts_.streams.Remove(tenant_, this);
  writes_.Finish(std::move(status));
}

void CreateTaskReactor::OnReadDone(bool ok) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ended_) return;  // ended meanwhile (idle): nothing more is read or encoded
    last_activity_ = std::chrono::steady_clock::now();
    if (!ok) reading_ = false;
  }
  if (!ok) {
    if (context_->IsCancelled()) return Fail(absl::CancelledError("cancelled during upload"));
    if (messages_ == 0) {
      return Fail(absl::InvalidArgumentError(
          "CreateTask needs at least one message with task_id and spec"));
    }
    jobs_.Start([this] { Encode(); });
    return;
  }
  if (auto s = Accept(); !s.ok()) return Fail(s);
  if (std::chrono::steady_clock::now() - last_progress_ > std::chrono::milliseconds(500)) {
    SendProgress(v1::CreateTaskProgress::PHASE_RECEIVING, 0, 0, 0);
    last_progress_ = std::chrono::steady_clock::now();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ended_) return;
    last_activity_ = std::chrono::steady_clock::now();
  }
  StartRead(&read_buffer_);
}

absl::Status CreateTaskReactor::Accept() {
  ++messages_;
  const uint64_t length = read_buffer_.Length();
  bytes_ += length;
  // Counted before the check, so that OnDone() gives back exactly what was added.
  const uint64_t held = parts_.upload_bytes.fetch_add(length) + length;
  parts_.metrics.UploadBytesHeld(length);
  if (held > parts_.config.max_total_upload_bytes) {
    return WithReason(
        absl::ResourceExhaustedError(
            absl::StrCat("CreateTask uploads on this server already hold --max_total_upload_bytes ",
                         parts_.config.max_total_upload_bytes, " bytes; retry with backoff")),
        reason::kUploadsInFlightLimit);
  }
  if (bytes_ > parts_.config.max_upload_bytes) {
    return WithReason(absl::ResourceExhaustedError(absl::StrCat(
                          "the CreateTask upload exceeds --max_upload_bytes ",
                          parts_.config.max_upload_bytes, " bytes (at message ", messages_, ")")),
                      reason::kUploadTooLarge);
  }
  const std::string where = absl::StrCat("CreateTask message ", messages_, ": ");
  if (messages_ == 1) {
    if (auto s = ParseRequest(read_buffer_, first_, 0, where); !s.ok()) return s;
    if (auto s = ValidateTaskId(first_.task_id()); !s.ok()) return s;
    if (!first_.has_spec()) {
      return InvalidFieldError("spec", "the first CreateTask message must carry spec");
    }
    demos_.Swap(first_.mutable_demonstrations());
  } else {
    v1::CreateTaskRequest more;
    if (auto s = ParseRequest(read_buffer_, more, demos_.size(), where); !s.ok()) return s;
    if (more.has_spec()) {
      return InvalidFieldError("spec", absl::StrCat("CreateTask message ", messages_,
                                                    " carries a second spec: only the first "
                                                    "message may (later ones add demonstrations)"));
    }
    if (!more.task_id().empty() && more.task_id() != first_.task_id()) {
      return InvalidFieldError("task_id",
                               "every CreateTask message must carry the same task_id (or none)");
    }
    if (static_cast<uint64_t>(demos_.size() + more.demonstrations_size()) >
        parts_.config.max_demonstrations) {
      return InvalidFieldError("demonstrations",
                               absl::StrCat("more than --max_demonstrations ",
                                            parts_.config.max_demonstrations, " demonstrations"));
    }
    for (auto& d : *more.mutable_demonstrations()) demos_.Add(std::move(d));
  }
  return absl::OkStatus();
}

void CreateTaskReactor::SendProgress(v1::CreateTaskProgress::Phase phase, int64_t done,
                                     int64_t total, int64_t tokens) {
  v1::CreateTaskResponse r;
  auto* p = r.mutable_progress();
  p->set_phase(phase);
  p->set_demonstrations_received(static_cast<uint64_t>(demos_.size()));
  p->set_groups_encoded(static_cast<uint64_t>(done));
  p->set_groups_total(static_cast<uint64_t>(total));
  p->set_tokens_encoded(static_cast<uint64_t>(tokens));
  p->set_elapsed_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  writes_.Write(SerializeResponse(r));
}

void CreateTaskReactor::Encode() {
  auto result = parts_.registry.Create(
      tenant_, first_.task_id(), first_.spec(), demos_, first_.replace(),
      [this](v1::CreateTaskProgress::Phase phase, int64_t done, int64_t total, int64_t tokens) {
        SendProgress(phase, done, total, tokens);
      });
  if (!result.ok()) return Fail(result.status());
  if (result->created) {
    parts_.metrics.TokensEncoded(result->task.stats().context_tokens());
    parts_.metrics.TaskEncoded(result->task.stats().encode_seconds());
  }
  v1::CreateTaskResponse done;
  *done.mutable_result()->mutable_task() = result->task;
  done.mutable_result()->set_created(result->created);
  done.mutable_result()->set_replaced(result->replaced);
  writes_.Write(SerializeResponse(done));
  EndCall(parts_.Record("CreateTask", context_, start_, first_.task_id(), grpc::Status::OK));
}

}  // namespace manyshot::server
