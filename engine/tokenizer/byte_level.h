// GPT-2's reversible byte <-> printable-character mapping (bytes_to_unicode in openai/gpt-2).
//
// Byte-level BPE vocabularies store tokens as strings of these characters, so that every byte,
// including control bytes and spaces, has a visible one-character form ("Ġ" is the space byte).
#ifndef MANYSHOT_ENGINE_TOKENIZER_BYTE_LEVEL_H_
#define MANYSHOT_ENGINE_TOKENIZER_BYTE_LEVEL_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace manyshot {

// The code point that stands for byte b.
uint32_t ByteToCodePoint(uint8_t b);
// UTF-8 of ByteToCodePoint(b), for building vocabulary keys.
const std::string& ByteToUtf8(uint8_t b);
// The byte that code point cp stands for, or nullopt if cp is not one of the 256 mapped ones.
std::optional<uint8_t> CodePointToByte(uint32_t cp);
// Maps every byte of raw to its character (the form the vocabulary uses).
std::string BytesToByteLevel(std::string_view raw);
// The inverse, for a token string from the vocabulary: nullopt if some character is unmapped.
std::optional<std::string> ByteLevelToBytes(std::string_view token);

// "<0xNN>" (a byte-fallback token) -> the byte NN; nullopt for any other token.
std::optional<uint8_t> ParseByteToken(std::string_view token);

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_BYTE_LEVEL_H_
