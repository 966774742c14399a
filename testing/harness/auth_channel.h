// A channel to a server with bearer-token auth: every call on it sends `authorization: VALUE`
// (e.g. "Bearer TOKEN"), also the calls of helpers that make their own contexts.
#pragma once

#include <memory>
#include <string>

#include "grpcpp/channel.h"

namespace manyshot::testing {

std::shared_ptr<grpc::Channel> ChannelWithAuth(const std::string& address,
                                               const std::string& authorization);

}  // namespace manyshot::testing
