// Per-call facts derived from the gRPC context: the tenant a call acts for and its request id.
#pragma once

#include <string>

#include "grpcpp/server_context.h"

namespace manyshot::server {

// The tenant set by authentication (an auth-context property), or "default" when the server runs
// without auth.
std::string TenantOf(const grpc::ServerContext* context);

// The caller's x-request-id metadata when present, else a fresh id; stable for the call.
std::string RequestId(grpc::ServerContext* context);

inline constexpr char kTenantProperty[] = "manyshot-tenant";

}  // namespace manyshot::server
