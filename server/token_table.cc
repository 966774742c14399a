#include "server/token_table.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace manyshot::server {

TokenTable::Digest TokenTable::DigestOf(std::string_view token) {
  Digest digest;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest.data());
  return digest;
}

bool TokenTable::Add(std::string_view token, std::string tenant) {
  Digest digest = DigestOf(token);
  // Loading the file is not exposed to callers: an ordinary comparison is fine here.
  for (const Entry& entry : entries_) {
    if (entry.digest == digest) return false;
  }
  entries_.push_back({digest, std::move(tenant)});
  return true;
}

std::optional<std::string> TokenTable::Find(std::string_view token) const {
  Digest digest = DigestOf(token);
  const Entry* found = nullptr;
  for (const Entry& entry : entries_) {
    // No branch on the comparison's outcome beyond recording it: every entry is compared.
    bool equal = CRYPTO_memcmp(entry.digest.data(), digest.data(), digest.size()) == 0;
    found = equal ? &entry : found;
  }
  if (found == nullptr) return std::nullopt;
  return found->tenant;
}

}  // namespace manyshot::server
