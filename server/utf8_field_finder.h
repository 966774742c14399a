// Finds the string field whose payload is not valid UTF-8 in the wire bytes of a message that
// protobuf refused to parse. Protobuf's parser reports only "failed"; this walk reads the same
// bytes with the message's Descriptor (io::CodedInputStream does not validate UTF-8) so the error
// can name the field, e.g. "demonstrations[3].text" or "inputs[0].fields[premise]".
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "google/protobuf/descriptor.h"

namespace manyshot::server {

struct InvalidUtf8Field {
  std::string path;  // "demonstrations[3].text"
  std::string why;   // ValidateUtf8's message: what is wrong and at which byte offset
};

// The first (in wire order) string field of `bytes`, read as `type`, that is not valid UTF-8;
// nullopt when there is none or the bytes are malformed before one is reached. Indexes of the
// top-level repeated fields start at `top_level_index_offset` (a CreateTask stream numbers
// demonstrations across its messages).
std::optional<InvalidUtf8Field> FindInvalidUtf8Field(const google::protobuf::Descriptor& type,
                                                     std::string_view bytes,
                                                     int top_level_index_offset = 0);

}  // namespace manyshot::server
