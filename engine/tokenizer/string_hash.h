// Transparent string hashing, so that unordered_map<std::string, T>::find accepts a string_view
// without allocating a std::string per lookup (the BPE hot loop looks up every word).
#ifndef MANYSHOT_ENGINE_TOKENIZER_STRING_HASH_H_
#define MANYSHOT_ENGINE_TOKENIZER_STRING_HASH_H_

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace manyshot {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_STRING_HASH_H_
