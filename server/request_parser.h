// Request and response messages (de)serialized by the service itself: its methods are registered
// as raw callback methods over grpc::ByteBuffer, so a message gRPC could not decode becomes
// INVALID_ARGUMENT naming what was wrong (a field that is not valid UTF-8, or a malformed message)
// instead of INTERNAL with an empty message, and a bad message inside a client stream fails the
// call instead of ending it as if the client had half-closed.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/byte_buffer.h"

namespace manyshot::server {

// Parses `buffer` into `message` (cleared first). Errors: INVALID_ARGUMENT with reason
// INVALID_UTF8 and the field ("demonstrations[3].text is not valid UTF-8 (...)"), or reason
// MALFORMED_MESSAGE. `top_level_index_offset` as in FindInvalidUtf8Field; `where` prefixes the
// message ("CreateTask message 2: ").
absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message& message,
                          int top_level_index_offset = 0, absl::string_view where = "");

// `message` serialized into a ByteBuffer to send.
template <typename Message>
grpc::ByteBuffer SerializeResponse(const Message& message) {
  grpc::ByteBuffer buffer;
  bool own = false;
  // Serialization of an in-memory message only fails beyond 2 GiB, which the size limits exclude.
  (void)grpc::SerializationTraits<Message>::Serialize(message, &buffer, &own);
  return buffer;
}

}  // namespace manyshot::server
