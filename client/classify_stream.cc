#include "client/classify_stream.h"

#include <condition_variable>
#include <mutex>
#include <thread>

namespace manyshot::client {

grpc::Status StreamClassifyRequests(v1::ManyShot::StubInterface& stub, grpc::ClientContext* call,
                                    size_t count,
                                    const std::function<v1::ClassifyRequest(size_t)>& make_request,
                                    const std::function<void(v1::ClassifyResponse&)>& on_response) {
  std::mutex mutex;
  std::condition_variable window_open;
  size_t answered = 0;
  bool reading_done = false;
  auto stream = stub.StreamClassify(call);
  // Writes on their own thread, so that answers are read while requests are still going out.
  std::thread writer([&] {
    for (size_t i = 0; i < count; ++i) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        window_open.wait(lock,
                         [&] { return reading_done || i < answered + kStreamClassifyWindow; });
        if (reading_done) return;
      }
      if (!stream->Write(make_request(i))) return;  // the call ended; Finish() says why
    }
    stream->WritesDone();
  });
  v1::ClassifyResponse response;
  while (stream->Read(&response)) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++answered;
    }
    window_open.notify_all();
    on_response(response);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    reading_done = true;
  }
  window_open.notify_all();
  writer.join();
  return stream->Finish();
}

}  // namespace manyshot::client
