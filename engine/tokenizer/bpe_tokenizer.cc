#include "engine/tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/nfc.h"
#include "engine/tokenizer/text_util.h"
#include "engine/tokenizer/utf8.h"

namespace manyshot {

BpeTokenizer::BpeTokenizer(BpeTokenizerSpec spec)
    : spec_(std::move(spec)), added_(spec_.added_tokens) {
  vocab_size_ = static_cast<int64_t>(spec_.model->id_to_token().size());
  for (const auto& t : spec_.added_tokens) vocab_size_ = std::max<int64_t>(vocab_size_, t.id + 1);
  added_by_id_.assign(static_cast<size_t>(vocab_size_), nullptr);
  for (const auto& t : added_.tokens()) added_by_id_[static_cast<size_t>(t.id)] = &t.content;
  const bool byte_level = spec_.model->options().byte_level;
  space_id_ = TokenToId(byte_level ? ByteToUtf8(' ') : spec_.pipeline.metaspace);
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text) const {
  if (absl::Status s = ValidateUtf8(text); !s.ok()) return s;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  thread_local std::vector<Segment> segments;
  added_.Split(text, segments);
  bool first = true;
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else {
      EncodeSegment(text.substr(seg.begin, seg.end - seg.begin), first, ids);
    }
    first = false;
  }
  return ids;
}

void BpeTokenizer::EncodeSegment(std::string_view text, bool first_segment,
                                 std::vector<int32_t>& out) const {
  const BpePipeline& p = spec_.pipeline;
  std::string normalized;
  std::string_view view = text;
  if (p.nfc || !p.prepend.empty() || !p.replacements.empty()) {
    normalized = p.nfc ? NormalizeNfc(text) : std::string(text);
    if (!p.prepend.empty() && !normalized.empty()) normalized.insert(0, p.prepend);
    for (const auto& [from, to] : p.replacements) {
      normalized = ReplaceAll(normalized, from, to);
    }
    view = normalized;
  }
  switch (p.pre_tokenizer) {
    case BpePipeline::PreTokenizer::kNone:
      spec_.model->EncodeWord(view, out);
      return;
    case BpePipeline::PreTokenizer::kByteLevel: {
      std::string prefixed;
      if (p.byte_level_add_prefix_space && !view.empty() && view[0] != ' ') {
        // reserve + append, not " " + std::string(view): GCC 12 at -O3 (Release) reports a false
        // -Wrestrict overlap inside the operator+ it inlines.
        prefixed.reserve(view.size() + 1);
        prefixed.push_back(' ');
        prefixed.append(view);
        view = prefixed;
      }
      thread_local std::vector<Piece> pieces;
      SplitText(p.split, view, pieces);
      for (const auto& [b, e] : pieces) spec_.model->EncodeWord(view.substr(b, e - b), out);
      return;
    }
    case BpePipeline::PreTokenizer::kMetaspace: {
      std::string replaced = ReplaceAll(view, " ", p.metaspace);
      const bool prepend =
          p.metaspace_prepend == BpePipeline::PrependScheme::kAlways ||
          (p.metaspace_prepend == BpePipeline::PrependScheme::kFirst && first_segment);
      if (prepend && !replaced.empty() && !replaced.starts_with(p.metaspace)) {
        replaced.insert(0, p.metaspace);
      }
      std::string_view rest = replaced;
      if (!p.metaspace_split) {
        spec_.model->EncodeWord(rest, out);
        return;
      }
      // Split before every metaspace, which stays attached to the word that follows it.
      while (!rest.empty()) {
        size_t next = rest.find(p.metaspace, 1);
        if (next == std::string_view::npos) next = rest.size();
        spec_.model->EncodeWord(rest.substr(0, next), out);
        rest.remove_prefix(next);
      }
      return;
    }
  }
}

const std::string* BpeTokenizer::TokenString(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return nullptr;
  if (const std::string* added = added_by_id_[static_cast<size_t>(id)]) return added;
  const auto& tokens = spec_.model->id_to_token();
  if (static_cast<size_t>(id) >= tokens.size()) return nullptr;
  return &tokens[static_cast<size_t>(id)];
}

absl::StatusOr<std::string> BpeTokenizer::Decode(absl::Span<const int32_t> ids) const {
  const BpePipeline& p = spec_.pipeline;
  std::string bytes;
  std::string pending;  // byte-fallback bytes not yet flushed
  size_t pending_tokens = 0;
  const auto flush = [&] {
    if (pending_tokens == 0) return;
    if (ValidateUtf8(pending).ok()) {
      bytes += pending;
    } else {
      // Hugging Face's ByteFallback decoder: one U+FFFD per byte token of an invalid run.
      for (size_t i = 0; i < pending_tokens; ++i) bytes += "\xEF\xBF\xBD";
    }
    pending.clear();
    pending_tokens = 0;
  };
  for (int32_t id : ids) {
    const std::string* token = TokenString(id);
    if (token == nullptr) {
      if (id >= 0 && id < vocab_size_) continue;  // a gap in the file's ids: no text, as in HF
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is out of range [0, ", vocab_size_, ")"));
    }
    switch (p.decoder) {
      case BpePipeline::Decoder::kNone:
        bytes += *token;
        break;
      case BpePipeline::Decoder::kByteLevel:
        if (auto raw = ByteLevelToBytes(*token)) {
          bytes += *raw;
        } else {
          bytes += *token;  // e.g. an added token with characters outside the byte map
        }
        break;
      case BpePipeline::Decoder::kMetaspace:
        if (p.decode_byte_fallback) {
          if (auto b = ParseByteToken(*token)) {
            pending.push_back(static_cast<char>(*b));
            ++pending_tokens;
            break;
          }
        }
        flush();
        bytes += ReplaceAll(*token, p.metaspace, " ");
        break;
    }
  }
  flush();
  size_t strip = 0;
  while (strip < bytes.size() && static_cast<int>(strip) < p.strip_leading_spaces &&
         bytes[strip] == ' ') {
    ++strip;
  }
  return Utf8Lossy(std::string_view(bytes).substr(strip));
}

std::optional<int32_t> BpeTokenizer::TokenToId(std::string_view token) const {
  for (const auto& t : added_.tokens()) {
    if (t.content == token) return t.id;
  }
  const auto& vocab = spec_.model->vocab();
  const auto it = vocab.find(token);
  if (it == vocab.end()) return std::nullopt;
  return it->second;
}

std::string BpeTokenizer::IdToToken(int32_t id) const {
  const std::string* token = TokenString(id);
  return token == nullptr ? "" : *token;
}

}  // namespace manyshot
