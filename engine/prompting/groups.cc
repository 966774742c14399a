#include "engine/prompting/groups.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace manyshot {
namespace {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// A group being filled: its tokens and, per token, which demonstration it came from.
struct OpenGroup {
  std::vector<int32_t> tokens;
  std::vector<int64_t> owner;
  void Clear() {
    tokens.clear();
    owner.clear();
  }
};

void CloseGroup(const OpenGroup& g, int64_t capacity, int32_t pad, GroupLayout& layout) {
  std::vector<int32_t> slots(capacity - static_cast<int64_t>(g.tokens.size()), pad);
  slots.insert(slots.end(), g.tokens.begin(), g.tokens.end());
  int32_t holders = 0;
  for (size_t i = 0; i < g.owner.size(); ++i) {
    if (i == 0 || g.owner[i] != g.owner[i - 1]) ++holders;
  }
  for (int32_t s : slots) layout.context_tokens += s != kMaskedSlot;
  layout.slots.push_back(std::move(slots));
  layout.demonstrations_per_group.push_back(holders);
}

}  // namespace

std::vector<int64_t> ShuffledOrder(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  if (seed == 0) return order;
  SplitMix64 rng(seed);
  for (int64_t i = n - 1; i >= 1; --i) {
    int64_t j = static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

absl::StatusOr<GroupLayout> BuildGroups(const std::vector<std::vector<int32_t>>& demonstrations,
                                        const GroupOptions& options) {
  const int64_t L = options.group_length;
  if (L < 2) {
    return absl::InvalidArgumentError(absl::StrCat("group_length ", L, " must be at least 2"));
  }
  if (demonstrations.empty()) {
    return absl::InvalidArgumentError("a task needs at least one demonstration");
  }
  if (options.alignment == Alignment::kPadSpace && options.space_id < 0) {
    return absl::FailedPreconditionError(
        "PAD_SPACE alignment needs a single-space token, and this tokenizer has none");
  }
  const int64_t capacity = L - 1;
  GroupLayout layout;
  layout.group_length = L;
  layout.order = ShuffledOrder(static_cast<int64_t>(demonstrations.size()), options.shuffle_seed);
  const int32_t pad = options.alignment == Alignment::kPadSpace ? options.space_id : kMaskedSlot;

  OpenGroup g;
  for (int64_t index : layout.order) {
    const std::vector<int32_t>* d = &demonstrations[index];
    if (d->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("demonstration ", index, " renders to no tokens"));
    }
    std::vector<int32_t> truncated;
    if (static_cast<int64_t>(d->size()) > capacity) {
      if (options.long_demonstrations == LongDemonstrationPolicy::kReject) {
        return absl::InvalidArgumentError(
            absl::StrCat("demonstration ", index, " has ", d->size(), " tokens, more than the ",
                         capacity, " a group holds (group_length ", L,
                         " minus bos); raise group_length or set long_demonstrations to TRUNCATE"));
      }
      truncated.assign(d->end() - capacity, d->end());
      d = &truncated;
      ++layout.truncated_demonstrations;
    }
    const int64_t n = static_cast<int64_t>(d->size());
    if (options.alignment == Alignment::kTruncate) {
      g.tokens.insert(g.tokens.end(), d->begin(), d->end());
      g.owner.insert(g.owner.end(), n, index);
      const int64_t size = static_cast<int64_t>(g.tokens.size());
      if (size >= capacity) {
        g.tokens.erase(g.tokens.begin(), g.tokens.begin() + (size - capacity));
        g.owner.erase(g.owner.begin(), g.owner.begin() + (size - capacity));
        CloseGroup(g, capacity, pad, layout);
        g.Clear();
      }
    } else {
      if (static_cast<int64_t>(g.tokens.size()) + n > capacity) {
        CloseGroup(g, capacity, pad, layout);
        g.Clear();
      }
      g.tokens.insert(g.tokens.end(), d->begin(), d->end());
      g.owner.insert(g.owner.end(), n, index);
    }
  }
  if (!g.tokens.empty()) CloseGroup(g, capacity, pad, layout);
  return layout;
}

ConventionalWindow BuildConventionalWindow(const std::vector<std::vector<int32_t>>& demonstrations,
                                           int64_t group_length, uint64_t shuffle_seed) {
  ConventionalWindow window;
  const int64_t capacity = group_length - 1;
  for (int64_t index : ShuffledOrder(static_cast<int64_t>(demonstrations.size()), shuffle_seed)) {
    const auto& d = demonstrations[index];
    if (static_cast<int64_t>(window.tokens.size() + d.size()) > capacity) break;
    window.tokens.insert(window.tokens.end(), d.begin(), d.end());
    ++window.demonstrations;
  }
  return window;
}

}  // namespace manyshot
