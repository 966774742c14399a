#include "engine/tokenizer/unigram_model.h"

#include <algorithm>
#include <cfloat>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/utf8.h"

namespace manyshot {
namespace {

// sentencepiece's kUnkPenalty: an unknown character scores this far below the worst piece.
constexpr float kUnkPenalty = 10.0f;

// sentencepiece's string_util::OneCharLen: the length a UTF-8 lead byte announces (1 for stray
// continuation bytes), whether or not the sequence is well formed.
size_t OneCharLen(unsigned char lead) {
  static constexpr unsigned char kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

bool InTrie(UnigramModel::PieceType type) {
  using T = UnigramModel::PieceType;
  return type == T::kNormal || type == T::kUserDefined || type == T::kUnused;
}

}  // namespace

int32_t UnigramModel::Child(int32_t node, unsigned char byte) const {
  const auto it = children_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == children_.end() ? -1 : it->second;
}

absl::StatusOr<std::unique_ptr<UnigramModel>> UnigramModel::Create(std::vector<Piece> pieces,
                                                                   bool byte_fallback) {
  const auto bad = [](std::string_view what) {
    return absl::InvalidArgumentError(std::string(what));
  };
  if (pieces.empty()) return bad("no pieces");
  auto model = std::unique_ptr<UnigramModel>(new UnigramModel());
  model->byte_fallback_ = byte_fallback;
  model->byte_ids_.fill(-1);
  model->vocab_.reserve(pieces.size());
  model->nodes_.emplace_back();  // the root
  bool have_unk = false;
  // sentencepiece starts from FLT_MAX / FLT_MIN (the smallest positive float, not the most
  // negative one) and takes both over the normal pieces only.
  model->min_score_ = FLT_MAX;
  model->max_score_ = FLT_MIN;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    const auto id = static_cast<int32_t>(i);
    if (p.piece.empty()) return bad(absl::StrCat("piece ", id, " is empty"));
    if (!ValidateUtf8(p.piece).ok()) return bad(absl::StrCat("piece ", id, " is not UTF-8"));
    if (!model->vocab_.emplace(p.piece, id).second) {
      return bad(absl::StrCat("piece \"", p.piece, "\" is defined twice"));
    }
    switch (p.type) {
      case PieceType::kUnknown:
        if (have_unk) return bad("more than one unknown piece");
        have_unk = true;
        model->unk_id_ = id;
        break;
      case PieceType::kByte: {
        if (!byte_fallback) {
          return bad(absl::StrCat("byte piece \"", p.piece, "\" in a model without byte_fallback"));
        }
        const auto byte = ParseByteToken(p.piece);
        if (!byte.has_value()) {
          return bad(absl::StrCat("byte piece \"", p.piece, "\" is not of the form <0xNN>"));
        }
        model->byte_ids_[*byte] = id;
        break;
      }
      case PieceType::kNormal:
        model->min_score_ = std::min(model->min_score_, p.score);
        model->max_score_ = std::max(model->max_score_, p.score);
        break;
      default:
        break;
    }
    if (!InTrie(p.type)) continue;
    int32_t node = 0;
    for (const char c : p.piece) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
      const auto [it, inserted] =
          model->children_.emplace(key, static_cast<int32_t>(model->nodes_.size()));
      if (inserted) model->nodes_.emplace_back();
      node = it->second;
    }
    model->nodes_[static_cast<size_t>(node)].piece = id;
  }
  if (!have_unk) return bad("no unknown piece (<unk>)");
  if (byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      if (model->byte_ids_[static_cast<size_t>(b)] < 0) {
        return bad(absl::StrCat("byte_fallback is set but byte piece <0x",
                                absl::Hex(b, absl::kZeroPad2), "> is missing"));
      }
    }
  }
  model->pieces_ = std::move(pieces);
  return model;
}

void UnigramModel::Encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  // best[e]: the best path over text[0, e): its score, where its last piece starts, which id.
  struct Best {
    float score = 0;
    int64_t start = -1;
    int32_t id = -1;
  };
  thread_local std::vector<Best> best;
  best.assign(text.size() + 1, Best{});
  const float unk_score = min_score_ - kUnkPenalty;
  const size_t size = text.size();
  for (size_t start = 0; start < size;) {
    const float score_here = best[start].score;
    const size_t char_len =
        std::min(OneCharLen(static_cast<unsigned char>(text[start])), size - start);
    bool has_single_char_piece = false;
    int32_t node = 0;
    for (size_t end = start; end < size;) {
      node = Child(node, static_cast<unsigned char>(text[end]));
      ++end;
      if (node < 0) break;
      const int32_t id = nodes_[static_cast<size_t>(node)].piece;
      if (id < 0) continue;
      const Piece& piece = pieces_[static_cast<size_t>(id)];
      if (piece.type == PieceType::kUnused) continue;
      const size_t length = end - start;
      // As in sentencepiece: the conditional's type is double (0.1 is a double literal), so a
      // piece candidate is a double sum compared against the stored float.
      const double score = piece.type == PieceType::kUserDefined
                               ? (static_cast<float>(length) * max_score_ - 0.1)
                               : static_cast<double>(piece.score);
      const double candidate = score + score_here;
      Best& target = best[end];
      if (target.start < 0 || candidate > target.score) {
        target.score = static_cast<float>(candidate);
        target.start = static_cast<int64_t>(start);
        target.id = id;
      }
      if (length == char_len) has_single_char_piece = true;
    }
    if (!has_single_char_piece) {
      Best& target = best[start + char_len];
      const float candidate = unk_score + score_here;
      if (target.start < 0 || candidate > target.score) {
        target.score = candidate;
        target.start = static_cast<int64_t>(start);
        target.id = unk_id_;
      }
    }
    start += char_len;
  }
  // Backtrack, then emit left to right.
  thread_local std::vector<std::pair<size_t, int32_t>> path;  // (start, id)
  path.clear();
  for (size_t end = size; end > 0;) {
    const Best& b = best[end];
    path.emplace_back(static_cast<size_t>(b.start), b.id);
    end = static_cast<size_t>(b.start);
  }
  bool previous_unknown = false;
  for (size_t i = path.size(); i-- > 0;) {
    const auto [start, id] = path[i];
    const bool unknown = id == unk_id_;
    if (unknown && byte_fallback_) {
      const size_t end = i == 0 ? size : path[i - 1].first;
      for (size_t b = start; b < end; ++b) {
        out.push_back(byte_ids_[static_cast<unsigned char>(text[b])]);
      }
    } else if (!(unknown && previous_unknown)) {  // a run of unknowns is one unknown id
      out.push_back(id);
    }
    previous_unknown = unknown;
  }
}

}  // namespace manyshot
