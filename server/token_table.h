// Bearer tokens and the tenants they belong to (the --auth_tokens_file), looked up in constant
// time.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace manyshot::server {

class TokenTable {
 public:
  // Adds `token` for `tenant`; false when the token is already present.
  bool Add(std::string_view token, std::string tenant);

  // The tenant of `token`, or nullopt. The table keeps SHA-256 digests, not tokens; the presented
  // token's digest is compared with every entry by CRYPTO_memcmp and without an early exit, so the
  // time taken says nothing about how much of a token matched, or which entry did.
  std::optional<std::string> Find(std::string_view token) const;

  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }

 private:
  using Digest = std::array<unsigned char, 32>;
  static Digest DigestOf(std::string_view token);

  struct Entry {
    Digest digest;
    std::string tenant;
  };
  std::vector<Entry> entries_;
};

}  // namespace manyshot::server
