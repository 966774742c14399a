// Packing tokenized demonstrations into groups (docs/structured_prompting.md, "Order" and
// "Groups"): shuffle, long-demonstration policy, TRUNCATE / ATTENTION_MASK / PAD_SPACE alignment,
// and the CONVENTIONAL single window.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/task/task_options.h"

namespace manyshot {

inline constexpr int32_t kMaskedSlot = -1;

struct GroupOptions {
  int64_t group_length = 0;  // L, bos included
  Alignment alignment = Alignment::kTruncate;
  LongDemonstrationPolicy long_demonstrations = LongDemonstrationPolicy::kReject;
  uint64_t shuffle_seed = 0;
  int32_t space_id = -1;  // required for PAD_SPACE
};

struct GroupLayout {
  int64_t group_length = 0;
  // Per group exactly L - 1 slots: token ids, or kMaskedSlot.
  std::vector<std::vector<int32_t>> slots;
  // Demonstrations with at least one token in each group.
  std::vector<int32_t> demonstrations_per_group;
  int64_t truncated_demonstrations = 0;
  // Non-masked content tokens over all groups (the context length).
  int64_t context_tokens = 0;
  // The demonstration order after shuffling (indices into the given order).
  std::vector<int64_t> order;

  int64_t groups() const { return static_cast<int64_t>(slots.size()); }
};

// The SplitMix64-driven Fisher–Yates permutation of [0, n) for `seed` (0 = identity).
std::vector<int64_t> ShuffledOrder(int64_t n, uint64_t seed);

// Packs demonstrations (each already tokenized) into groups. INVALID_ARGUMENT for an empty set,
// L < 2, an empty demonstration, or (REJECT policy) one longer than L - 1 tokens, naming its index
// in the given order and its length.
absl::StatusOr<GroupLayout> BuildGroups(const std::vector<std::vector<int32_t>>& demonstrations,
                                        const GroupOptions& options);

// CONVENTIONAL: whole demonstrations in shuffled order while they fit in L - 1 tokens, stopping at
// the first that does not. Returns the window content (without bos) and how many were taken.
struct ConventionalWindow {
  std::vector<int32_t> tokens;
  int64_t demonstrations = 0;
};
ConventionalWindow BuildConventionalWindow(const std::vector<std::vector<int32_t>>& demonstrations,
                                           int64_t group_length, uint64_t shuffle_seed);

}  // namespace manyshot
