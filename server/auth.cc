#include "server/auth.h"

#include <sys/stat.h>

#include <fstream>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {
namespace {

// (absl::string_view is not std::string_view in this abseil build: plain std helpers.)
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view Strip(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  return text;
}

std::vector<std::string_view> Fields(std::string_view text) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && IsSpace(text[i])) ++i;
    size_t start = i;
    while (i < text.size() && !IsSpace(text[i])) ++i;
    if (i > start) fields.push_back(text.substr(start, i - start));
  }
  return fields;
}

}  // namespace

absl::StatusOr<TokenTable> LoadTokensFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read --auth_tokens_file=", path, " (missing or unreadable)"));
  }
  TokenTable tokens;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::string_view text = Strip(line);
    if (text.empty() || text.front() == '#') continue;
    std::vector<std::string_view> fields = Fields(text);
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("--auth_tokens_file=", path, " line ", number,
                                                     ": expected 'TOKEN TENANT', got ",
                                                     fields.size(), " field(s)"));
    }
    if (!tokens.Add(fields[0], std::string(fields[1]))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_tokens_file=", path, " line ", number, ": duplicate token"));
    }
  }
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read --auth_tokens_file=", path));
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth_tokens_file=", path, " holds no 'TOKEN TENANT' lines"));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    spdlog::warn(
        "--auth_tokens_file={} is accessible to other users (mode {:o}); its tokens are "
        "secrets: chmod 600 it",
        path, st.st_mode & 07777);
  }
  return tokens;
}

bool IsUnauthenticatedMethod(std::string_view path) {
  constexpr std::string_view kHealth = "/grpc.health.v1.Health/";
  return path.substr(0, kHealth.size()) == kHealth;
}

grpc::Status BearerTokenAuthProcessor::Process(const InputMetadata& auth_metadata,
                                               grpc::AuthContext* context,
                                               OutputMetadata* consumed_auth_metadata,
                                               OutputMetadata* /*response_metadata*/) {
  auto path_it = auth_metadata.find(":path");
  std::string_view path;
  if (path_it != auth_metadata.end()) path = {path_it->second.data(), path_it->second.size()};
  if (IsUnauthenticatedMethod(path)) return grpc::Status::OK;

  auto it = auth_metadata.find("authorization");
  if (it == auth_metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing 'authorization: Bearer TOKEN' metadata");
  }
  std::string_view value(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  if (value.size() <= kBearer.size() || value.substr(0, kBearer.size()) != kBearer) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the authorization metadata must be 'Bearer TOKEN'");
  }
  if (!tokens_->Find(Strip(value.substr(kBearer.size())))) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "unknown bearer token");
  }
  // Not marked consumed, and no auth-context property: properties land on the connection's auth
  // context, which calls of different tenants can share, so handlers resolve the tenant from the
  // call's own token (TenantDirectory::TenantForAuthorization).
  (void)context;
  (void)consumed_auth_metadata;
  return grpc::Status::OK;
}

std::optional<std::string> TenantDirectory::TenantForAuthorization(
    std::string_view authorization) const {
  constexpr std::string_view kBearer = "Bearer ";
  if (!tokens_ || authorization.size() <= kBearer.size() ||
      authorization.substr(0, kBearer.size()) != kBearer) {
    return std::nullopt;
  }
  return tokens_->Find(Strip(authorization.substr(kBearer.size())));
}

}  // namespace manyshot::server
