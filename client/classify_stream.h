// One StreamClassify call carrying many requests, with a bounded number unanswered: shared by
// `manyshot classify --stream` and `manyshot eval`.
#pragma once

#include <cstddef>
#include <functional>

#include "grpcpp/client_context.h"
#include "manyshot/v1/manyshot.grpc.pb.h"

namespace manyshot::client {

// At most this many requests of one stream are sent and unanswered: the server answers requests
// beyond its --max_stream_inflight (default 64) with RESOURCE_EXHAUSTED instead of queueing them.
inline constexpr size_t kStreamClassifyWindow = 32;

// Writes make_request(0) .. make_request(count - 1) on one StreamClassify call made with `call`,
// never more than kStreamClassifyWindow unanswered, and hands every response to `on_response` in
// arrival order (completion order, not request order) on the calling thread. Returns the call's
// final status; in-band errors are in the responses.
grpc::Status StreamClassifyRequests(v1::ManyShot::StubInterface& stub, grpc::ClientContext* call,
                                    size_t count,
                                    const std::function<v1::ClassifyRequest(size_t)>& make_request,
                                    const std::function<void(v1::ClassifyResponse&)>& on_response);

}  // namespace manyshot::client
