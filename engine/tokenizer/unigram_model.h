// SentencePiece's Unigram segmentation (unigram_model.cc, Model::EncodeOptimized): the best
// path (highest sum of piece scores) through the lattice of every vocabulary piece that matches
// at every character, found by Viterbi over a prefix trie of the pieces. A character no piece
// covers becomes the unknown piece, scored min_score - 10 as sentencepiece does; runs of unknown
// characters become one unknown id, or with byte fallback, one <0xNN> piece per UTF-8 byte
// (sentencepiece_processor.cc, PopulateSentencePieceText). User-defined pieces score
// length * max_score - 0.1, which makes them win wherever they match.
//
// Scores are added in the precisions sentencepiece uses (float sums, compared against a double
// for piece candidates), so that exact ties break the same way.
#ifndef MANYSHOT_ENGINE_TOKENIZER_UNIGRAM_MODEL_H_
#define MANYSHOT_ENGINE_TOKENIZER_UNIGRAM_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/sentencepiece_model_reader.h"
#include "engine/tokenizer/string_hash.h"

namespace manyshot {

class UnigramModel {
 public:
  using PieceType = SentencePieceModelProto::PieceType;
  using Piece = SentencePieceModelProto::Piece;

  // Checks the pieces as libsentencepiece does when it loads a model (non-empty, UTF-8, unique,
  // exactly one unknown piece, byte pieces <0xNN> only with byte_fallback and then all 256).
  // Errors are InvalidArgument messages without a file name; the caller adds it.
  static absl::StatusOr<std::unique_ptr<UnigramModel>> Create(std::vector<Piece> pieces,
                                                              bool byte_fallback);

  // Appends the ids of the best segmentation of normalized text.
  void Encode(std::string_view normalized, std::vector<int32_t>& out) const;

  const std::vector<Piece>& pieces() const { return pieces_; }
  int32_t unk_id() const { return unk_id_; }
  // Every piece by its text, whatever its type.
  const StringMap<int32_t>& vocab() const { return vocab_; }

 private:
  UnigramModel() = default;

  // A byte trie over the pieces that take part in segmentation (normal, user-defined and unused
  // ones, as sentencepiece builds it); children by (node, byte) in one hash map.
  struct TrieNode {
    int32_t piece = -1;
  };
  int32_t Child(int32_t node, unsigned char byte) const;

  std::vector<Piece> pieces_;
  StringMap<int32_t> vocab_;
  std::vector<TrieNode> nodes_;
  std::unordered_map<uint64_t, int32_t> children_;
  int32_t unk_id_ = 0;
  bool byte_fallback_ = false;
  std::array<int32_t, 256> byte_ids_{};
  float min_score_ = 0;
  float max_score_ = 0;
};

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_UNIGRAM_MODEL_H_
