#include "server/request_context.h"

#include <atomic>
#include <chrono>
#include <cstdio>

namespace manyshot::server {

std::string TenantOf(const TenantDirectory& tenants, const grpc::ServerContextBase* context) {
  if (!tenants.enabled()) return "default";
  // Always from this call's own (already validated) token: properties that the auth processor adds
  // land on the connection's auth context, which calls of different tenants can share.
  if (context != nullptr) {
    const auto& metadata = context->client_metadata();
    auto it = metadata.find("authorization");
    if (it != metadata.end()) {
      auto tenant =
          tenants.TenantForAuthorization(std::string_view(it->second.data(), it->second.size()));
      if (tenant) return *tenant;
    }
  }
  return "";  // matches no tenant's tasks
}

std::string RequestId(const grpc::ServerContextBase* context) {
  if (context != nullptr) {
    const auto& metadata = context->client_metadata();
    auto it = metadata.find("x-request-id");
    if (it != metadata.end()) return std::string(it->second.data(), it->second.size());
  }
  static std::atomic<uint64_t> counter{0};
  static const uint64_t boot =
      static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  char id[40];
  std::snprintf(id, sizeof(id), "%08llx-%llu", static_cast<unsigned long long>(boot & 0xffffffff),
                static_cast<unsigned long long>(++counter));
  return id;
}

}  // namespace manyshot::server
