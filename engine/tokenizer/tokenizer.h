// Tokenizers of Hugging Face model directories: tokenizer.json (byte-level BPE as in GPT-2,
// Llama-3, Qwen2; SentencePiece-style BPE as in Llama-2, Mistral; Unigram as in T5), GPT-2's
// vocab.json + merges.txt, and SentencePiece's tokenizer.model / spiece.model.
//
// Thread safety: every method is const and safe to call from many threads at once.
#ifndef MANYSHOT_ENGINE_TOKENIZER_TOKENIZER_H_
#define MANYSHOT_ENGINE_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace manyshot {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes text with NO special tokens added (no bos/eos). Added and special tokens that appear
  // literally in the text are matched the way Hugging Face does it (leftmost-longest, before
  // normalization). Invalid UTF-8 input is rejected, not repaired: InvalidArgument naming the
  // byte offset of the first bad byte, so callers never get ids for text the model never saw.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const = 0;

  // Decodes ids to text: special tokens included verbatim, byte-fallback bytes reassembled.
  // Byte sequences that are not valid UTF-8 (a prefix of a multi-byte character, say) become
  // U+FFFD, as in Hugging Face, so the result is always valid UTF-8. An id out of range ->
  // InvalidArgument; an id in range that names no token (the files' ids may leave gaps) decodes
  // to nothing, as Hugging Face's decode skips it.
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const = 0;

  // One past the largest id (vocabulary plus added tokens), like len(hf_tokenizer).
  virtual int64_t vocab_size() const = 0;
  // The token's id: the vocabulary form ("Ġthe", "▁the") or an added token's content.
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  // The vocabulary form of id; "" when out of range.
  virtual std::string IdToToken(int32_t id) const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;  // GPT-2: <|endoftext|> 50256; Llama: <s> 1
  virtual std::optional<int32_t> eos_id() const = 0;  // GPT-2: 50256; Llama: </s> 2
  // The id of a single space as a token (GPT-2: "Ġ" 220; Llama: "▁" 29871), to pad groups.
  virtual std::optional<int32_t> space_id() const = 0;
  // XXH3-64 (StableHash) over the defining files (name, size, bytes, in a fixed order), 16 hex
  // digits.
  // Stable across runs, machines and builds: it is part of KV cache keys.
  virtual std::string fingerprint() const = 0;
  // "bpe-bytelevel", "bpe-sentencepiece", "sentencepiece-model" (BPE tokenizer.model),
  // "sentencepiece-unigram" (Unigram tokenizer.model / spiece.model) or "unigram" (Unigram
  // tokenizer.json).
  virtual std::string kind() const = 0;
};

// Loads from a Hugging Face model directory, in this order of preference: tokenizer.json;
// vocab.json + merges.txt (GPT-2 style byte-level BPE); tokenizer.model, then spiece.model
// (SentencePiece BPE as Llama-2 and Mistral ship it, or Unigram as T5 does; read without
// libsentencepiece; WORD and CHAR models are Unimplemented).
// Special tokens come from tokenizer_config.json / special_tokens_map.json when present.
// Errors name the file and what is wrong.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::filesystem::path& model_dir);

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_TOKENIZER_H_
