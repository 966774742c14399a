// Encoding a task's demonstrations once: every group is a plain causal forward pass
// ([bos, real tokens] at their group positions, masked slots skipped), several groups per pass;
// the context is every layer's K/V of all non-bos tokens, concatenated in group order.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/prompting/groups.h"
#include "engine/task/encoded_context.h"
#include "engine/transformer/transformer.h"

namespace manyshot {

// Called after each batch of groups: (groups encoded so far, total groups, tokens so far).
using EncodeProgress = std::function<void(int64_t, int64_t, int64_t)>;

// The position ids of a group context's keys in context order: every group's unmasked slots
// (slot s is position s + 1; bos, at 0, is not part of the context). What EncodeGroups records.
std::vector<int32_t> ContextPositions(const GroupLayout& layout);

absl::StatusOr<EncodedContext> EncodeGroups(const Transformer& model, const GroupLayout& layout,
                                            int32_t bos_id, int64_t groups_per_pass = 4,
                                            const EncodeProgress& progress = nullptr);

// CONVENTIONAL mode's window [bos, window...] at positions 0..n, encoded as one sequence; all of
// its K/V (bos included) is the context.
absl::StatusOr<EncodedContext> EncodeWindow(const Transformer& model,
                                            const std::vector<int32_t>& window, int32_t bos_id);

}  // namespace manyshot
