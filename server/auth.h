// Bearer-token authentication: a tokens file maps tokens to tenants, and an AuthMetadataProcessor
// (set on the server credentials, insecure or TLS) checks every call's `authorization` metadata and
// lets through only calls with a known token; the service maps the call's own token to its tenant
// through the same table (TenantDirectory, passed to it explicitly; server/request_context.h).
#pragma once

#include <memory>
#include <optional>
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

// The tenants of a server: off (every call is tenant "default") or a tokens file's table, shared
// with the BearerTokenAuthProcessor that checks the same tokens.
class TenantDirectory {
 public:
  TenantDirectory() = default;  // auth off
  explicit TenantDirectory(TokenTable tokens)
      : tokens_(std::make_shared<const TokenTable>(std::move(tokens))) {}

  bool enabled() const { return tokens_ != nullptr; }
  const std::shared_ptr<const TokenTable>& tokens() const { return tokens_; }

  // The tenant of an `authorization: Bearer TOKEN` value, or nullopt (and always nullopt when
  // auth is off). Handlers resolve the tenant from the call's own token: gRPC 1.51 does not carry
  // processor-added auth-context properties to every credentials type, and they would land on the
  // connection, which calls of different tenants can share.
  std::optional<std::string> TenantForAuthorization(std::string_view authorization) const;

 private:
  std::shared_ptr<const TokenTable> tokens_;
};

class BearerTokenAuthProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit BearerTokenAuthProcessor(std::shared_ptr<const TokenTable> tokens)
      : tokens_(std::move(tokens)) {}

  // Cheap and non-blocking: one SHA-256 and a constant-time scan; runs on gRPC's thread.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const std::shared_ptr<const TokenTable> tokens_;
};

}  // namespace manyshot::server
