// Bearer-token authentication: a tokens file maps tokens to tenants, and an AuthMetadataProcessor
// (set on the server credentials, insecure or TLS) checks every call's `authorization` metadata and
// records the caller's tenant as the kTenantProperty auth-context property (TenantOf reads it).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/auth_metadata_processor.h"

namespace manyshot::server {

// token -> tenant.
using TokenTable = std::map<std::string, std::string, std::less<>>;

// Reads a tokens file: one `TOKEN TENANT` per line (separated by spaces or tabs); blank lines and
// lines starting with '#' are skipped. An unreadable file, a malformed line (naming its number) or
// a duplicate token is an error; so is a file with no tokens.
absl::StatusOr<TokenTable> LoadTokensFile(const std::string& path);

// Methods reachable without a token: the gRPC health service, so load balancers and Kubernetes
// probes need no secret. Everything else (ManyShot and reflection) requires a token.
bool IsUnauthenticatedMethod(std::string_view path);

class BearerTokenAuthProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit BearerTokenAuthProcessor(TokenTable tokens) : tokens_(std::move(tokens)) {}

  // Cheap and non-blocking: a map lookup; runs on gRPC's thread.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const TokenTable tokens_;
};

}  // namespace manyshot::server
