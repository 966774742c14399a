// Bearer-token authentication: a tokens file maps tokens to tenants, and an AuthMetadataProcessor
// (set on the server credentials, insecure or TLS) checks every call's `authorization` metadata and
// lets through only calls with a known token; TenantOf maps the call's own token to its tenant.
#pragma once

#include <optional>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "server/token_table.h"

namespace manyshot::server {

// Reads a tokens file: one `TOKEN TENANT` per line (separated by spaces or tabs); blank lines and
// lines starting with '#' are skipped. An unreadable file, a malformed line (naming its number) or
// a duplicate token is an error; so is a file with no tokens. A file that other users may read is
// logged as a warning (its tokens are secrets: chmod 600).
absl::StatusOr<TokenTable> LoadTokensFile(const std::string& path);

// Methods reachable without a token: the gRPC health service, so load balancers and Kubernetes
// probes need no secret. Everything else (ManyShot and reflection) requires a token.
bool IsUnauthenticatedMethod(std::string_view path);

// The tenant of an `authorization: Bearer TOKEN` value under the active tokens table (set when a
// BearerTokenAuthProcessor is created), or nullopt. Handlers use it when the auth-context property
// is not visible on the call (gRPC 1.51 does not carry processor-added properties to every
// credentials type); the processor has already rejected calls without a valid token.
std::optional<std::string> TenantForAuthorization(std::string_view authorization);
bool AuthEnabled();

class BearerTokenAuthProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit BearerTokenAuthProcessor(TokenTable tokens);

  // Cheap and non-blocking: one SHA-256 and a constant-time scan; runs on gRPC's thread.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const TokenTable tokens_;
};

}  // namespace manyshot::server
