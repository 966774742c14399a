#include "server/request_parser.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/grpc_status.h"
#include "server/utf8_field_finder.h"

namespace manyshot::server {

absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message& message,
                          int top_level_index_offset, absl::string_view where) {
  message.Clear();
  {
    // ProtoBufferReader needs a mutable buffer; a copy of a ByteBuffer shares its slices.
    grpc::ByteBuffer shared(buffer);
    grpc::ProtoBufferReader reader(&shared);
    if (reader.status().ok() && message.ParseFromZeroCopyStream(&reader)) {
      return absl::OkStatus();
    }
  }
  // The slow path, only for bad messages: the bytes in one piece for the diagnosis.
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer.Dump(&slices).ok()) {
    for (const auto& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  message.Clear();
  const auto& type = *message.GetDescriptor();
  if (auto bad = FindInvalidUtf8Field(type, bytes, top_level_index_offset)) {
    return WithReason(
        InvalidFieldError(bad->path,
                          absl::StrCat(where, bad->path, " is not valid UTF-8 (", bad->why, ")")),
        reason::kInvalidUtf8);
  }
  return WithReason(absl::InvalidArgumentError(
                        absl::StrCat(where, "the message is not a valid ", type.full_name(),
                                     " (protobuf decoding failed: truncated or wrong wire types)")),
                    reason::kMalformedMessage);
}

}  // namespace manyshot::server
