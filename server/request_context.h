// Per-call facts derived from the gRPC context: the tenant a call acts for and its request id.
#pragma once

#include <string>

#include "grpcpp/server_context.h"
#include "server/auth.h"

namespace manyshot::server {

// The tenant of the call's bearer token under `tenants` when auth is on (server/auth.h), or
// "default" when the server runs without auth.
std::string TenantOf(const TenantDirectory& tenants, const grpc::ServerContextBase* context);

// The caller's x-request-id metadata when present, else a fresh id; stable for the call.
std::string RequestId(const grpc::ServerContextBase* context);

}  // namespace manyshot::server
