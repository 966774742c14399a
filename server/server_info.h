// What GetServerInfo reports: the model, the backend that runs it, the server's limits and the
// cache's figures, each filled from the parts the service shares.
#pragma once

#include <string>

#include "manyshot/v1/manyshot.pb.h"
#include "server/service_parts.h"

namespace manyshot::server {

// The whole ServerInfo as `tenant` sees it: under bearer tokens a tenant sees its own tasks and
// bytes, not other tenants' (budgets and the dtype are the server's).
v1::ServerInfo DescribeServer(const ServiceParts& parts, const std::string& tenant);

void DescribeModel(const LoadedModel& model, v1::ModelInfo& out);
void DescribeBackend(const LoadedModel& model, v1::BackendInfo& out);
void DescribeLimits(const ServerConfig& config, v1::Limits& out);
void DescribeCache(const ContextCache& cache, v1::CacheInfo& out);

}  // namespace manyshot::server
