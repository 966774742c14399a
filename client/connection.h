// How the CLI reaches a server: plaintext or TLS (with a client certificate for mutual TLS), and
// an optional bearer token sent as `authorization: Bearer TOKEN` on every call. Mirrors the
// server (server/auth.cc, README "Security"): a token travels in cleartext without TLS, so it is
// only sent in plaintext to loopback addresses.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "client/cli_context.h"
#include "grpcpp/security/credentials.h"

namespace manyshot::client {

// The connection flags as given (empty: not given).
struct ConnectionOptions {
  std::string server;           // --server: host:port or a gRPC target (dns:///, ipv4:, unix:)
  std::string tls_ca_file;      // --tls_ca_file: PEM roots; enables TLS
  std::string tls_cert_file;    // --tls_cert_file: client certificate chain (mutual TLS)
  std::string tls_key_file;     // --tls_key_file: its private key
  std::string tls_server_name;  // --tls_server_name: name checked against the server certificate
  std::string token;            // --token
  std::string token_file;       // --token_file: a file holding the token
};

// The connection flags of flags.cc (--tls_*, --token, --token_file) with `server`.
ConnectionOptions ConnectionOptionsFromFlags(const std::string& server);

struct Connection {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  grpc::ChannelArguments arguments;  // the TLS server name override, when given
  bool tls = false;
  std::string token;  // empty: no authorization metadata
};

// Checks the options and reads the files. Errors (InvalidArgument) name the flag: a cert without
// its key or without --tls_ca_file, an unreadable or empty file, both --token and --token_file, a
// token that is not printable ASCII, a token without TLS to a non-loopback server.
absl::StatusOr<Connection> ResolveConnection(const ConnectionOptions& options);

// Fills cli->channel and cli->token from ResolveConnection.
absl::Status Connect(const ConnectionOptions& options, CliContext* cli);

// True when `server` names this host only: 127.0.0.0/8, ::1, localhost, or a unix socket.
bool IsLoopbackServer(std::string_view server);

}  // namespace manyshot::client
