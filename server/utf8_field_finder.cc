#include "server/utf8_field_finder.h"

#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace manyshot::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

// Map keys are client input: echo at most this many bytes of one into a field path.
constexpr size_t kMaxEchoedKeyBytes = 40;

std::optional<InvalidUtf8Field> Bad(std::string path, const absl::Status& status) {
  return InvalidUtf8Field{std::move(path), std::string(status.message())};
}

// One map entry: the key (field 1) and value (field 2), as raw wire payloads.
struct MapEntry {
  std::string key, value;
  bool ok = false;
};

MapEntry ReadMapEntry(std::string_view bytes) {
  MapEntry entry;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  while (uint32_t tag = in.ReadTag()) {
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    if (WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
        (number == 1 || number == 2)) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length) ||
          !in.ReadString(number == 1 ? &entry.key : &entry.value, static_cast<int>(length))) {
        return entry;
      }
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return entry;
    }
  }
  entry.ok = in.ConsumedEntireMessage();
  return entry;
}

std::optional<InvalidUtf8Field> Walk(const Descriptor& type, std::string_view bytes,
                                     const std::string& prefix, int index_offset) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  std::map<int, int> seen;  // occurrences of each repeated field so far: its next index
  while (uint32_t tag = in.ReadTag()) {
    const FieldDescriptor* field = type.FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    if (field == nullptr ||
        WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) return std::nullopt;
      continue;
    }
    uint32_t length = 0;
    std::string payload;
    if (!in.ReadVarint32(&length) || !in.ReadString(&payload, static_cast<int>(length))) {
      return std::nullopt;
    }
    std::string path = prefix + field->name();
    if (field->is_map()) {
      MapEntry entry = ReadMapEntry(payload);
      if (!entry.ok) return std::nullopt;
      const FieldDescriptor* key = field->message_type()->map_key();
      const FieldDescriptor* value = field->message_type()->map_value();
      if (key->type() == FieldDescriptor::TYPE_STRING) {
        if (auto s = ValidateUtf8(entry.key); !s.ok()) return Bad(path + " (a key)", s);
      }
      std::string shown = entry.key;
      if (shown.size() > kMaxEchoedKeyBytes) {
        shown.resize(kMaxEchoedKeyBytes);
        // The key is valid UTF-8: only a character cut at the end can make the prefix invalid.
        while (!shown.empty() && !ValidateUtf8(shown).ok()) shown.pop_back();
        shown += "...";
      }
      // Control characters would forge log lines: escape them (UTF-8 stays readable).
      shown = absl::Utf8SafeCHexEscape(shown);
      path = absl::StrCat(path, "[", shown, "]");
      if (value->type() == FieldDescriptor::TYPE_STRING) {
        if (auto s = ValidateUtf8(entry.value); !s.ok()) return Bad(path, s);
      } else if (value->type() == FieldDescriptor::TYPE_MESSAGE) {
        if (auto found = Walk(*value->message_type(), entry.value, path + ".", 0)) return found;
      }
      continue;
    }
    if (field->is_repeated())
      path = absl::StrCat(path, "[", index_offset + seen[field->number()]++, "]");
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      if (auto s = ValidateUtf8(payload); !s.ok()) return Bad(path, s);
    } else if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (auto found = Walk(*field->message_type(), payload, path + ".", 0)) return found;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<InvalidUtf8Field> FindInvalidUtf8Field(const Descriptor& type, std::string_view bytes,
                                                     int top_level_index_offset) {
  return Walk(type, bytes, "", top_level_index_offset);
}

}  // namespace manyshot::server
