// A minimal reader of SentencePiece's tokenizer.model (a serialized sentencepiece.ModelProto),
// written against the protobuf wire format directly so that manyshot needs neither
// libsentencepiece nor libprotobuf to read one (Debian's libsentencepiece bundles a protobuf that
// clashes with gRPC's in one process).
//
// Only the fields a tokenizer needs are read (sentencepiece_model.proto, field numbers):
//   ModelProto      1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec,
//                   5 denormalizer_spec
//   SentencePiece   1 piece, 2 score (float), 3 type (enum, default NORMAL)
//   TrainerSpec     3 model_type, 24 treat_whitespace_as_suffix, 35 byte_fallback,
//                   40..43 unk/bos/eos/pad_id, 45..48 unk/bos/eos/pad_piece
//   NormalizerSpec  1 name, 2 precompiled_charsmap, 3 add_dummy_prefix,
//                   4 remove_extra_whitespaces, 5 escape_whitespaces
// Absent fields take the proto2 defaults of that file; every other field is skipped. Malformed
// input (truncated varints or lengths, lengths past the end, bad wire types, groups, enum values
// out of range) is an InvalidArgument error naming the source and the byte offset, never a crash.
#ifndef MANYSHOT_ENGINE_TOKENIZER_SENTENCEPIECE_MODEL_READER_H_
#define MANYSHOT_ENGINE_TOKENIZER_SENTENCEPIECE_MODEL_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace manyshot {

struct SentencePieceModelProto {
  enum class PieceType : int32_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
  };
  enum class ModelType : int32_t { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

  struct Piece {
    std::string piece;
    float score = 0;
    PieceType type = PieceType::kNormal;
  };

  struct Normalizer {
    std::string name;
    std::string precompiled_charsmap;  // the rules' bytes (precompiled_charsmap.h), may be empty
    bool add_dummy_prefix = true;
    bool remove_extra_whitespaces = true;
    bool escape_whitespaces = true;
  };

  std::vector<Piece> pieces;

  // trainer_spec
  ModelType model_type = ModelType::kUnigram;
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  int32_t unk_id = 0;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t pad_id = -1;
  std::string unk_piece = "<unk>";
  std::string bos_piece = "<s>";
  std::string eos_piece = "</s>";
  std::string pad_piece = "<pad>";

  Normalizer normalizer;
  bool has_denormalizer = false;
  Normalizer denormalizer;
};

// "UNIGRAM", "BPE", "WORD", "CHAR".
std::string_view ModelTypeName(SentencePieceModelProto::ModelType type);

// The id of the piece named `name` when it is a control piece, as libsentencepiece's bos_id() and
// eos_id() answer (nullopt where they answer -1).
std::optional<int32_t> ControlPieceId(const SentencePieceModelProto& proto, std::string_view name);

// Parses the bytes of a tokenizer.model; `source` (e.g. "tokenizer.model") starts every error.
absl::StatusOr<SentencePieceModelProto> ReadSentencePieceModel(std::string_view bytes,
                                                               std::string_view source);

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_SENTENCEPIECE_MODEL_READER_H_
