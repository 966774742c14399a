// A Tokenizer over a SentencePiece Unigram model (T5's spiece.model, or a tokenizer.json with a
// Unigram model): added and special tokens are split out first, as Hugging Face does; each
// stretch of text between them is normalized as SentencePiece does (sentencepiece_normalizer.h)
// and segmented by UnigramModel. Built by the tokenizer.model and tokenizer.json loaders.
#ifndef MANYSHOT_ENGINE_TOKENIZER_UNIGRAM_TOKENIZER_H_
#define MANYSHOT_ENGINE_TOKENIZER_UNIGRAM_TOKENIZER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/sentencepiece_model_reader.h"
#include "engine/tokenizer/sentencepiece_normalizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unigram_model.h"

namespace manyshot {

struct UnigramTokenizerSpec {
  std::unique_ptr<UnigramModel> model;
  SentencePieceNormalizerSpec normalizer;
  std::vector<AddedToken> added_tokens;  // ids within the model's pieces
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  std::string fingerprint;
  std::string kind;
};

class UnigramTokenizer final : public Tokenizer {
 public:
  explicit UnigramTokenizer(UnigramTokenizerSpec spec);
  UnigramTokenizer(const UnigramTokenizer&) = delete;
  UnigramTokenizer& operator=(const UnigramTokenizer&) = delete;

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  // As libsentencepiece decodes, except that control and unknown pieces come out verbatim
  // ("</s>", "<unk>"), as the Tokenizer contract and Hugging Face have it, where
  // libsentencepiece drops control pieces and writes " ⁇ " for <unk>. The "▁" that starts the
  // text is dropped when the model adds a dummy prefix or removes extra whitespace; byte pieces
  // are reassembled, each byte that is not part of valid UTF-8 becoming U+FFFD.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(spec_.model->pieces().size()); }
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  std::string IdToToken(int32_t id) const override;
  std::optional<int32_t> bos_id() const override { return spec_.bos_id; }
  std::optional<int32_t> eos_id() const override { return spec_.eos_id; }
  std::optional<int32_t> space_id() const override { return space_id_; }
  std::string fingerprint() const override { return spec_.fingerprint; }
  std::string kind() const override { return spec_.kind; }

 private:
  UnigramTokenizerSpec spec_;
  SentencePieceNormalizer normalizer_;
  AddedTokenMatcher added_;
  std::vector<bool> is_added_;  // by id: decoded verbatim
  std::optional<int32_t> space_id_;
};

struct UnigramBuildOptions {
  SpecialTokenNames names;  // bos/eos as the configs name them
  std::string fingerprint;
  std::string source;                        // the file, to start every error ("tokenizer.model")
  std::string kind;                          // Tokenizer::kind()
  bool unicode_whitespace_is_space = false;  // SentencePieceNormalizerSpec's
  bool dummy_prefix_at_start_only = false;   // SentencePieceNormalizerSpec's
};

// A Unigram SentencePiece model as a Tokenizer (BPE models go through sentencepiece_tokenizer.cc).
// Control and unknown pieces are the special tokens; bos/eos come from options.names when the
// configs name them, else they are trainer_spec's bos/eos pieces when those are control pieces,
// as libsentencepiece answers. Settings it cannot honour are Unimplemented, never approximated.
absl::StatusOr<std::unique_ptr<Tokenizer>> BuildUnigramTokenizer(SentencePieceModelProto proto,
                                                                 UnigramBuildOptions options);

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_UNIGRAM_TOKENIZER_H_
