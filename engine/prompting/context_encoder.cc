#include "engine/prompting/context_encoder.h"

#include <algorithm>

namespace manyshot {
namespace {

// The context keys' position ids (kI32) on the model's backend.
absl::Status SetPositions(const Transformer& model, const std::vector<int32_t>& positions,
                          EncodedContext& ctx) {
  auto t = model.backend().Allocate(DType::kI32,
                                    {std::max<int64_t>(static_cast<int64_t>(positions.size()), 1)});
  if (!t.ok()) return t.status();
  ctx.kv.positions = t->Rows(0, static_cast<int64_t>(positions.size()));
  model.backend().CopyFromHost(positions.data(), ctx.kv.positions);
  return absl::OkStatus();
}

// Allocates the context tensors for `tokens` rows, in the model's KV dtype, on its backend.
absl::StatusOr<EncodedContext> AllocateContext(const Transformer& model, int64_t tokens) {
  const ModelConfig& c = model.config();
  EncodedContext ctx;
  ctx.tokens = tokens;
  ctx.kv.len = tokens;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    for (auto* list : {&ctx.kv.k, &ctx.kv.v}) {
      auto t = model.backend().Allocate(model.kv_dtype(),
                                        {std::max<int64_t>(tokens, 1), c.num_kv_heads, c.head_dim});
      if (!t.ok()) return t.status();
      list->push_back(*std::move(t));
    }
  }
  return ctx;
}

}  // namespace

std::vector<int32_t> ContextPositions(const GroupLayout& layout) {
  std::vector<int32_t> positions;
  for (const auto& slots : layout.slots) {
    for (size_t s = 0; s < slots.size(); ++s) {
      if (slots[s] != kMaskedSlot) positions.push_back(static_cast<int32_t>(s + 1));
    }
  }
  return positions;
}

absl::StatusOr<EncodedContext> EncodeGroups(const Transformer& model, const GroupLayout& layout,
                                            int32_t bos_id, int64_t groups_per_pass,
                                            const EncodeProgress& progress) {
  const int64_t M = layout.groups();
  auto allocated = AllocateContext(model, layout.context_tokens);
  if (!allocated.ok()) return allocated.status();
  EncodedContext& ctx = *allocated;
  ctx.groups = M;
  ctx.group_length = layout.group_length;
  int64_t written = 0;
  for (int64_t g0 = 0; g0 < M; g0 += groups_per_pass) {
    const int64_t g1 = std::min(M, g0 + groups_per_pass);
    std::vector<std::vector<int32_t>> tokens(g1 - g0), positions(g1 - g0);
    std::vector<KvCache> caches;
    std::vector<ForwardSequence> batch;
    for (int64_t g = g0; g < g1; ++g) {
      auto& t = tokens[g - g0];
      auto& p = positions[g - g0];
      t.push_back(bos_id);
      p.push_back(0);
      const auto& slots = layout.slots[g];
      for (size_t s = 0; s < slots.size(); ++s) {
        if (slots[s] == kMaskedSlot) continue;
        t.push_back(slots[s]);
        p.push_back(static_cast<int32_t>(s + 1));
      }
      caches.push_back(model.NewCache(static_cast<int64_t>(t.size())));
    }
    for (int64_t g = g0; g < g1; ++g) {
      batch.push_back({tokens[g - g0], positions[g - g0], &caches[g - g0], {}});
    }
    auto result = model.Forward(batch);
    if (!result.ok()) return result.status();
    // Keep every layer's K/V of the non-bos rows.
    for (int64_t g = g0; g < g1; ++g) {
      const KvCache& cache = caches[g - g0];
      const int64_t n = cache.length() - 1;
      for (int64_t l = 0; l < cache.layers(); ++l) {
        model.backend().Convert(cache.k(l).Rows(1, n + 1), ctx.kv.k[l].Rows(written, written + n));
        model.backend().Convert(cache.v(l).Rows(1, n + 1), ctx.kv.v[l].Rows(written, written + n));
      }
      written += n;
    }
    // The group caches die with this batch: their copies must be done (and errors seen) first.
    auto status = model.backend().Synchronize();
    if (!status.ok()) return status;
    if (progress) progress(g1, M, written);
  }
  auto status = SetPositions(model, ContextPositions(layout), ctx);
  if (!status.ok()) return status;
  status = model.backend().Synchronize();
  if (!status.ok()) return status;
  return allocated;
}

absl::StatusOr<EncodedContext> EncodeWindow(const Transformer& model,
                                            const std::vector<int32_t>& window, int32_t bos_id) {
  std::vector<int32_t> tokens = {bos_id};
  tokens.insert(tokens.end(), window.begin(), window.end());
  std::vector<int32_t> positions(tokens.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  KvCache cache = model.NewCache(static_cast<int64_t>(tokens.size()));
  ForwardSequence seq{tokens, positions, &cache, {}};
  auto result = model.Forward({&seq, 1});
  if (!result.ok()) return result.status();
  const int64_t n = static_cast<int64_t>(tokens.size());
  auto allocated = AllocateContext(model, n);
  if (!allocated.ok()) return allocated.status();
  EncodedContext& ctx = *allocated;
  ctx.groups = 1;
  ctx.group_length = n;
  for (int64_t l = 0; l < cache.layers(); ++l) {
    model.backend().Convert(cache.k(l).Rows(0, n), ctx.kv.k[l].Rows(0, n));
    model.backend().Convert(cache.v(l).Rows(0, n), ctx.kv.v[l].Rows(0, n));
  }
  auto status = SetPositions(model, positions, ctx);
  if (!status.ok()) return status;
  status = model.backend().Synchronize();
  if (!status.ok()) return status;
  return allocated;
}

}  // namespace manyshot
