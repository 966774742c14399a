#include "client/connection.h"

#include <arpa/inet.h>

#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/base/internal/sysinfo.h"  // NumCPUs: the gRPC errno workaround in Connect
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/flags.h"
#include "grpcpp/create_channel.h"

namespace manyshot::client {
namespace {

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view Strip(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  return text;
}

// The contents of the file named by --`flag`; an error naming the flag when it cannot be read.
absl::StatusOr<std::string> ReadFlagFile(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  if (in) contents << in.rdbuf();
  if (!in || in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": cannot read the file (missing or unreadable)"));
  }
  return contents.str();
}

absl::StatusOr<std::string> ReadPemFlagFile(const char* flag, const std::string& path) {
  auto pem = ReadFlagFile(flag, path);
  if (pem.ok() && pem->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": not a PEM file (no '-----BEGIN' line)"));
  }
  return pem;
}

// One host (no port) of a target: a loopback IPv4/IPv6 literal or "localhost".
bool IsLoopbackHost(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::string name(host);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name == "localhost" || name == "localhost.") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;  // 127.0.0.0/8
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, name.c_str(), &v6) == 1) {
    static const unsigned char kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static const unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(v6.s6_addr, kLoopback, 16) == 0) return true;
    return std::memcmp(v6.s6_addr, kMapped, 12) == 0 && v6.s6_addr[12] == 127;  // ::ffff:127.x
  }
  return false;
}

// "host:port", "[v6]:port", "v6" (no port) -> the host part.
std::string_view HostOf(std::string_view address) {
  if (!address.empty() && address.front() == '[') {
    size_t close = address.find(']');
    return close == std::string_view::npos ? address : address.substr(0, close + 1);
  }
  size_t first = address.find(':');
  if (first == std::string_view::npos) return address;
  if (address.find(':', first + 1) != std::string_view::npos) return address;  // bare IPv6
  return address.substr(0, first);
}

}  // namespace

bool IsLoopbackServer(std::string_view server) {
  if (StartsWith(server, "unix:") || StartsWith(server, "unix-abstract:")) return true;
  if (StartsWith(server, "ipv4:") || StartsWith(server, "ipv6:")) {
    // A comma-separated list of addresses: every one must be loopback.
    server.remove_prefix(5);
    if (server.empty()) return false;
    while (true) {
      size_t comma = server.find(',');
      if (!IsLoopbackHost(HostOf(server.substr(0, comma)))) return false;
      if (comma == std::string_view::npos) return true;
      server.remove_prefix(comma + 1);
    }
  }
  if (StartsWith(server, "dns:")) {
    server.remove_prefix(4);
    if (StartsWith(server, "//")) {  // dns://AUTHORITY/host:port
      size_t slash = server.find('/', 2);
      if (slash == std::string_view::npos) return false;
      server.remove_prefix(slash + 1);
    }
  }
  return IsLoopbackHost(HostOf(server));
}

ConnectionOptions ConnectionOptionsFromFlags(const std::string& server) {
  ConnectionOptions options;
  options.server = server;
  options.tls_ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.token = absl::GetFlag(FLAGS_token);
  options.token_file = absl::GetFlag(FLAGS_token_file);
  return options;
}

absl::StatusOr<Connection> ResolveConnection(const ConnectionOptions& options) {
  Connection connection;
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file must be given together");
  }
  if (!options.tls_cert_file.empty() && options.tls_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file needs --tls_ca_file (the CA that signed the server's certificate)");
  }
  if (!options.tls_server_name.empty() && options.tls_ca_file.empty()) {
    return absl::InvalidArgumentError("--tls_server_name needs --tls_ca_file");
  }
  if (!options.token.empty() && !options.token_file.empty()) {
    return absl::InvalidArgumentError("give --token or --token_file, not both");
  }

  if (!options.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    auto roots = ReadPemFlagFile("tls_ca_file", options.tls_ca_file);
    if (!roots.ok()) return roots.status();
    ssl.pem_root_certs = *roots;
    if (!options.tls_cert_file.empty()) {
      auto cert = ReadPemFlagFile("tls_cert_file", options.tls_cert_file);
      if (!cert.ok()) return cert.status();
      auto key = ReadPemFlagFile("tls_key_file", options.tls_key_file);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    connection.credentials = grpc::SslCredentials(ssl);
    connection.tls = true;
    if (!options.tls_server_name.empty()) {
      connection.arguments.SetSslTargetNameOverride(options.tls_server_name);
    }
  } else {
    connection.credentials = grpc::InsecureChannelCredentials();
  }

  const char* token_flag = "token";
  std::string token = options.token;
  if (!options.token_file.empty()) {
    token_flag = "token_file";
    auto contents = ReadFlagFile("token_file", options.token_file);
    if (!contents.ok()) return contents.status();
    token = std::string(Strip(*contents));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token_file=", options.token_file, ": the file holds no token"));
    }
  }
  for (char c : token) {
    if (c <= 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", token_flag, ": a token is printable ASCII without spaces"));
    }
  }
  if (!token.empty() && !connection.tls && !IsLoopbackServer(options.server)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", token_flag,
                     " without TLS is only sent to loopback addresses (it would cross the "
                     "network in cleartext to ",
                     options.server, "): give --tls_ca_file"));
  }
  connection.token = std::move(token);
  return connection;
}

absl::Status Connect(const ConnectionOptions& options, CliContext* cli) {
  auto connection = ResolveConnection(options);
  if (!connection.ok()) return connection.status();
  // Works around a gRPC 1.51 bug (tcp_client_posix.cc reads errno after other calls that follow a
  // non-blocking connect()). absl counts the CPUs once, at the first lock that has to wait; where
  // /sys is hidden (some sandboxes), glibc's count leaves errno at ENOENT, and when that first
  // wait fell inside gRPC's connect a connection failed as "No such file or directory" (19 of
  // 6000 CLI runs). Counting them here, before any connection, closes that window: 0 of 6000.
  (void)absl::base_internal::NumCPUs();
  cli->server = options.server;
  cli->channel =
      grpc::CreateCustomChannel(options.server, connection->credentials, connection->arguments);
  cli->token = connection->token;
  return absl::OkStatus();
}

}  // namespace manyshot::client
