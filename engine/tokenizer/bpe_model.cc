#include "engine/tokenizer/bpe_model.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/utf8.h"

namespace manyshot {
namespace {

constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kMaxCacheEntries = 100000;

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// A symbol of the word being merged, in a doubly linked list over a vector; len == 0 marks a
// symbol that was merged into its left neighbour.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t len;
};

// (rank, position, merged id): the heap pops the lowest rank, then the leftmost position, which
// is the order Hugging Face's Word::merge_all applies merges in.
using Candidate = std::tuple<int32_t, int32_t, int32_t>;

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    StringMap<int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    BpeOptions options) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("negative id for token ", token));
    max_id = std::max(max_id, id);
  }
  // Ids index a table, so they must be dense: a few bytes naming id 77777193 would otherwise
  // make the loader allocate gigabytes. Real vocabularies number their tokens 0..N-1.
  if (max_id >= 0 && static_cast<size_t>(max_id) >= vocab.size()) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary id ", max_id, " is not below the ",
                                                   vocab.size(),
                                                   " tokens: ids must be numbered 0..N-1"));
  }
  m->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : vocab) m->id_to_token_[static_cast<size_t>(id)] = token;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = vocab.find(a);
    const auto ib = vocab.find(b);
    const auto iab = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || iab == vocab.end()) {
      return absl::InvalidArgumentError(absl::StrCat("merge ", rank, " (\"", a, "\" \"", b,
                                                     "\") uses a token not in the vocabulary"));
    }
    // A repeated pair keeps its last rank, as Hugging Face's HashMap collect does.
    m->merges_[PairKey(ia->second, ib->second)] = {static_cast<int32_t>(rank), iab->second};
  }
  m->fallback_ids_.fill(-1);
  m->has_all_fallback_ = true;
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab.find(absl::StrFormat("<0x%02X>", b));
    if (it != vocab.end()) {
      m->fallback_ids_[b] = it->second;
    } else {
      m->has_all_fallback_ = false;
    }
    const auto bt = vocab.find(ByteToUtf8(static_cast<uint8_t>(b)));
    m->byte_ids_[b] = bt == vocab.end() ? -1 : bt->second;
  }
  for (const auto& [token, id] : vocab) {
    if (!token.empty() && Utf8SequenceLength(token, 0) == token.size()) {
      size_t pos = 0;
      m->char_ids_[DecodeUtf8(token, pos)] = id;
    }
  }
  if (options.unk_token) {
    const auto it = vocab.find(*options.unk_token);
    if (it == vocab.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unk_token \"", *options.unk_token, "\" is not in the vocabulary"));
    }
    m->unk_id_ = it->second;
  }
  m->vocab_ = std::move(vocab);
  m->options_ = std::move(options);
  return m;
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mu_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  EncodeUncached(word, out);
  if (cacheable) {
    std::unique_lock lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + start, out.end()));
  }
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<int32_t>& ids) const {
  ids.clear();
  bool last_was_unk = false;
  const auto unknown = [&] {
    if (unk_id_ < 0) return;  // No unk token: the character cannot be represented; drop it.
    if (options_.fuse_unk && last_was_unk) return;
    ids.push_back(unk_id_);
    last_was_unk = true;
  };
  if (options_.byte_level) {
    for (char c : word) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) {
        ids.push_back(id);
        last_was_unk = false;
      } else {
        unknown();
      }
    }
    return;
  }
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t begin = pos;
    const uint32_t cp = DecodeUtf8(word, pos);
    const auto it = char_ids_.find(cp);
    if (it != char_ids_.end()) {
      ids.push_back(it->second);
      last_was_unk = false;
      continue;
    }
    if (options_.byte_fallback && has_all_fallback_) {
      for (size_t k = begin; k < pos; ++k)
        ids.push_back(fallback_ids_[static_cast<uint8_t>(word[k])]);
      last_was_unk = false;
      continue;
    }
    unknown();
  }
}

void BpeModel::EncodeUncached(std::string_view word, std::vector<int32_t>& out) const {
  if (options_.ignore_merges) {
    const auto it = options_.byte_level ? vocab_.find(BytesToByteLevel(word)) : vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Reused per thread: the merge loop allocates nothing in steady state.
  thread_local std::vector<int32_t> ids;
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  InitialSymbols(word, ids);
  const auto n = static_cast<int32_t>(ids.size());
  symbols.clear();
  heap.clear();
  for (int32_t i = 0; i < n; ++i) symbols.push_back({ids[i], i - 1, i + 1 < n ? i + 1 : -1, 1});
  const auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto it = merges_.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it == merges_.end()) return;
    heap.emplace_back(it->second.first, pos, it->second.second);
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const auto [rank, pos, new_id] = heap.back();
    heap.pop_back();
    Symbol& left = symbols[pos];
    if (left.len == 0 || left.next < 0) continue;
    // Stale entry: one side was merged since it was pushed.
    const auto it = merges_.find(PairKey(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.second != new_id || it->second.first != rank) continue;
    Symbol& right = symbols[left.next];
    left.id = new_id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (left.next >= 0) symbols[left.next].prev = pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(pos);
  }
  for (int32_t i = 0; i < n; ++i) {
    if (symbols[i].len > 0) out.push_back(symbols[i].id);
  }
}

}  // namespace manyshot
