#include "engine/task/cache_key.h"

#include <xxhash.h>

#include <cstring>

#include "absl/strings/str_format.h"

namespace manyshot {
namespace {

// Canonical bytes: fixed-width little-endian integers, and every variable-length field prefixed
// by its length, so no two different input sets serialize to the same bytes ("ab"+"c" vs
// "a"+"bc").
class Canonical {
 public:
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void Str(const std::string& s) {
    U64(s.size());
    out_ += s;
  }
  void Tag(const char* name) { Str(name); }  // names each field: reordering fields changes keys
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

}  // namespace

std::string ComputeCacheKey(const CacheKeyInputs& in) {
  Canonical c;
  c.Str("manyshot.kv");
  c.Tag("format_version");
  c.U64(in.format_version);
  c.Tag("model");
  c.Str(in.model_fingerprint);
  c.Tag("tokenizer");
  c.Str(in.tokenizer_fingerprint);
  c.Tag("demonstrations");
  c.U64(in.demonstrations.size());
  for (const auto& d : in.demonstrations) {
    c.U64(d.size());
    for (int32_t t : d) c.U64(static_cast<uint32_t>(t));
  }
  c.Tag("input_template");
  c.Str(in.input_template);
  c.Tag("answer_template");
  c.Str(in.answer_template);
  c.Tag("separator");
  c.Str(in.separator);
  c.Tag("group_length");
  c.U64(static_cast<uint64_t>(in.group_length));
  c.Tag("alignment");
  c.U64(static_cast<uint64_t>(in.alignment));
  c.Tag("long_demonstrations");
  c.U64(static_cast<uint64_t>(in.long_demonstrations));
  c.Tag("kv_dtype");
  c.U64(static_cast<uint64_t>(in.kv_dtype));
  c.Tag("sharing_scope");
  c.Str(in.sharing_scope);
  const XXH128_hash_t h = XXH3_128bits(c.bytes().data(), c.bytes().size());
  return absl::StrFormat("%016x%016x", h.high64, h.low64);
}

}  // namespace manyshot
