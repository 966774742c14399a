// The BPE model: vocabulary, merges by rank, and the merge loop, as in Hugging Face tokenizers.
//
// Two alphabets: byte-level (GPT-2 family: a word's initial symbols are its bytes, each a
// printable stand-in character) and characters (SentencePiece-style BPE: initial symbols are the
// word's UTF-8 characters, with <0xNN> byte tokens for characters not in the vocabulary).
#ifndef MANYSHOT_ENGINE_TOKENIZER_BPE_MODEL_H_
#define MANYSHOT_ENGINE_TOKENIZER_BPE_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/string_hash.h"

namespace manyshot {

struct BpeOptions {
  bool byte_level = false;     // initial symbols are bytes (true) or UTF-8 characters (false)
  bool byte_fallback = false;  // unknown characters become <0xNN> tokens
  bool fuse_unk = false;       // consecutive unknown symbols become one unk token
  bool ignore_merges = false;  // a word that is itself in the vocabulary is emitted whole
  std::optional<std::string> unk_token;
};

class BpeModel {
 public:
  // vocab: token -> id. merges: pairs of tokens, in rank order (first = applied first). A merge
  // whose parts or result are not in the vocabulary is an error, as in Hugging Face.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(
      StringMap<int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      BpeOptions options);

  // Appends the ids of one pre-tokenized word (raw bytes for byte-level, else normalized text).
  void EncodeWord(std::string_view word, std::vector<int32_t>& out) const;

  const StringMap<int32_t>& vocab() const { return vocab_; }
  // Tokens by id; "" for ids that no vocabulary entry has (holes).
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }
  const BpeOptions& options() const { return options_; }

 private:
  BpeModel() = default;
  void EncodeUncached(std::string_view word, std::vector<int32_t>& out) const;
  // Initial symbols (ids, -1 = unknown) of a word, with their lengths for fuse_unk.
  void InitialSymbols(std::string_view word, std::vector<int32_t>& ids) const;

  StringMap<int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  // (left id, right id) -> (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::array<int32_t, 256> byte_ids_{};      // byte-level: id of each byte's character
  std::array<int32_t, 256> fallback_ids_{};  // <0xNN> tokens, -1 when absent
  bool has_all_fallback_ = false;
  std::unordered_map<uint32_t, int32_t> char_ids_;  // single-character tokens
  int32_t unk_id_ = -1;
  BpeOptions options_;

  // Word -> ids. Bounded: cleared when full, so memory stays flat under adversarial input.
  mutable std::shared_mutex cache_mu_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_BPE_MODEL_H_
