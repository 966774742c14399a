#include "server/request_context.h"

#include <atomic>
#include <chrono>
#include <cstdio>

namespace manyshot::server {

std::string TenantOf(const grpc::ServerContext* context) {
  if (context != nullptr) {
    auto auth = context->auth_context();
    if (auth) {
      auto values = auth->FindPropertyValues(kTenantProperty);
      if (!values.empty()) return std::string(values.front().data(), values.front().size());
    }
  }
  return "default";
}

std::string RequestId(grpc::ServerContext* context) {
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
