// Hand-written protobuf wire format for SentencePiece model tests: small models built field by
// field (sentencepiece_model.proto's numbers), malformed ones included.
#ifndef MANYSHOT_TESTS_ENGINE_TOKENIZER_SENTENCEPIECE_PROTO_BUILDER_H_
#define MANYSHOT_TESTS_ENGINE_TOKENIZER_SENTENCEPIECE_PROTO_BUILDER_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace manyshot::tokenizer_test {

inline std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>(0x80 | (v & 0x7F)));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
inline std::string Tag(int field, int wire) {
  return Varint(static_cast<uint64_t>(field) << 3 | wire);
}
inline std::string VarintField(int field, int64_t v) {
  return Tag(field, 0) + Varint(static_cast<uint64_t>(v));
}
inline std::string LenField(int field, std::string_view body) {
  return Tag(field, 2) + Varint(body.size()) + std::string(body);
}
inline std::string FloatField(int field, float f) {
  char b[4];
  std::memcpy(b, &f, 4);  // little-endian host
  return Tag(field, 5) + std::string(b, 4);
}
inline std::string PieceMsg(std::string_view piece, float score, int type) {
  return LenField(1, LenField(1, piece) + FloatField(2, score) + VarintField(3, type));
}

}  // namespace manyshot::tokenizer_test

#endif  // MANYSHOT_TESTS_ENGINE_TOKENIZER_SENTENCEPIECE_PROTO_BUILDER_H_
