// A Tokenizer over a BpeModel plus the Hugging Face pipeline around it: added-token split,
// normalizer, pre-tokenizer, decoder. Built by the tokenizer.json and vocab.json+merges.txt
// loaders; only the pipeline pieces that real BPE tokenizers use are modelled.
#ifndef MANYSHOT_ENGINE_TOKENIZER_BPE_TOKENIZER_H_
#define MANYSHOT_ENGINE_TOKENIZER_BPE_TOKENIZER_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace manyshot {

struct BpePipeline {
  // Normalizer: optional Unicode NFC, then Prepend(prepend) when the text is non-empty, then
  // each Replace(from, to) in order.
  bool nfc = false;
  std::string prepend;
  std::vector<std::pair<std::string, std::string>> replacements;

  // Pre-tokenizer.
  enum class PreTokenizer {
    kNone,       // the whole normalized text is one word
    kByteLevel,  // split with `split` (GPT-2 regex unless a Split step gave another)
    kMetaspace,  // replace " " by metaspace, maybe prepend it, maybe split before each one
  };
  PreTokenizer pre_tokenizer = PreTokenizer::kNone;
  SplitPattern split = SplitPattern::kGpt2;
  bool byte_level_add_prefix_space = false;
  std::string metaspace = "\xE2\x96\x81";  // "▁"
  enum class PrependScheme { kAlways, kFirst, kNever };
  PrependScheme metaspace_prepend = PrependScheme::kAlways;
  bool metaspace_split = true;

  // Decoder.
  enum class Decoder {
    kNone,       // concatenate tokens
    kByteLevel,  // map stand-in characters back to bytes
    kMetaspace,  // "▁" -> " ", <0xNN> -> bytes, strip `strip_leading_spaces` leading spaces
  };
  Decoder decoder = Decoder::kNone;
  bool decode_byte_fallback = false;
  int strip_leading_spaces = 0;
};

struct BpeTokenizerSpec {
  std::unique_ptr<BpeModel> model;
  BpePipeline pipeline;
  std::vector<AddedToken> added_tokens;
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  std::string fingerprint;
  std::string kind;
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeTokenizerSpec spec);
  // Not movable: added_by_id_ points into added_.
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  std::string IdToToken(int32_t id) const override;
  std::optional<int32_t> bos_id() const override { return spec_.bos_id; }
  std::optional<int32_t> eos_id() const override { return spec_.eos_id; }
  std::optional<int32_t> space_id() const override { return space_id_; }
  std::string fingerprint() const override { return spec_.fingerprint; }
  std::string kind() const override { return spec_.kind; }

 private:
  // Normalizes, pre-tokenizes and BPE-encodes one plain-text segment.
  void EncodeSegment(std::string_view text, bool first_segment, std::vector<int32_t>& out) const;
  // The token string for id (added tokens first), or nullptr when the id has none.
  const std::string* TokenString(int32_t id) const;

  BpeTokenizerSpec spec_;
  AddedTokenMatcher added_;
  std::vector<const std::string*> added_by_id_;  // indexed by id; nullptr when not added
  int64_t vocab_size_ = 0;
  std::optional<int32_t> space_id_;
};

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_BPE_TOKENIZER_H_
