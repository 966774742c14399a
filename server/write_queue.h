// Ordered writes for a streaming reactor (ServerBidiReactor, ServerWriteReactor). gRPC allows one
// write in flight per call; responses produced meanwhile (by the scheduler's worker, an encoding
// progress callback, another request of the same stream) wait here in order, and the call's
// Finish waits for them. Thread-safe; gRPC is never called with the lock held, because it may run
// a reaction (OnWriteDone) on the calling thread.
#pragma once

#include <deque>
#include <mutex>
#include <optional>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"

namespace manyshot::server {

template <typename Reactor>
class WriteQueue {
 public:
  explicit WriteQueue(Reactor* reactor) : reactor_(reactor) {}

  // Queues `message`; dropped after Finish() or once a write failed (the client is gone).
  void Write(grpc::ByteBuffer message) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (finish_ || broken_) return;
      queue_.push_back(std::move(message));
      if (writing_) return;
      writing_ = true;
      current_ = std::move(queue_.front());
      queue_.pop_front();
    }
    reactor_->StartWrite(&current_);
  }

  // Finishes the call with `status` once every queued write is done. Only the first call counts.
  void Finish(grpc::Status status) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (finish_) return;
      finish_ = std::move(status);
      if (writing_) return;
    }
    reactor_->Finish(*finish_);
  }

  // The reactor's OnWriteDone(ok) calls this.
  void OnWriteDone(bool ok) {
    enum { kWrite, kFinish, kNothing } next = kNothing;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!ok) {
        broken_ = true;
        queue_.clear();
      }
      if (!queue_.empty()) {
        current_ = std::move(queue_.front());
        queue_.pop_front();
        next = kWrite;
      } else {
        writing_ = false;
        if (finish_) next = kFinish;
      }
    }
    if (next == kWrite) reactor_->StartWrite(&current_);
    if (next == kFinish) reactor_->Finish(*finish_);
  }

  // Messages written or waiting to be: the stream's unread backlog, for backpressure.
  size_t backlog() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.size() + (writing_ ? 1 : 0);
  }

 private:
  Reactor* reactor_;
  mutable std::mutex mutex_;
  std::deque<grpc::ByteBuffer> queue_;
  grpc::ByteBuffer current_;  // the write in flight; gRPC reads it until OnWriteDone
  bool writing_ = false;
  bool broken_ = false;
  std::optional<grpc::Status> finish_;
};

}  // namespace manyshot::server
