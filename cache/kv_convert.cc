#include "cache/kv_convert.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace manyshot {
namespace {

// The first `tokens` rows of t, flattened to elements.
Tensor FlatRows(const Tensor& t, int64_t tokens) {
  return t.Rows(0, tokens).Reshape({tokens * t.numel() / t.dim(0)});
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels refuse it (EINVAL), which is harmless
#endif

// Provides every page of a large host tensor now, in small pages, in one call. The tensors of a
// restored context are fresh memory that a copy then fills once, front to back; providing that
// memory was the largest cost of a restore. On the 2-core VM where this was measured (load 10),
// 640 MiB in 26 MiB buffers took 1.7 to 1.9 s populated in small pages, 2.9 to 7.7 s faulted in
// by the copy, and 9.5 to 12.7 s in the transparent huge pages the CPU backend advises for large
// tensors (faulted or populated alike). Both calls are advice: when one fails (an older kernel),
// the copy faults the pages in as before.
void PopulateHostMemory(const Tensor& t) {
  constexpr size_t kSmallest = size_t{2} << 20;  // below this the backend's malloc heap holds it
  if (t.device() != Device::kCPU || t.bytes() < kSmallest) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(t.raw()) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(t.raw()) + t.bytes();
  void* const range = reinterpret_cast<void*>(begin);
  (void)madvise(range, end - begin, MADV_NOHUGEPAGE);
  (void)madvise(range, end - begin, MADV_POPULATE_WRITE);
}

}  // namespace

size_t KvShape::PayloadBytes() const {
  return 2 * static_cast<size_t>(layers) * static_cast<size_t>(tokens) *
         static_cast<size_t>(kv_heads) * static_cast<size_t>(head_dim) * DTypeSize(dtype);
}

absl::StatusOr<KvShape> ShapeOf(const EncodedContext& ctx) {
  KvShape s;
  s.layers = static_cast<int64_t>(ctx.kv.k.size());
  s.tokens = ctx.tokens;
  s.groups = ctx.groups;
  s.group_length = ctx.group_length;
  if (ctx.kv.v.size() != ctx.kv.k.size() || ctx.kv.len != ctx.tokens || ctx.tokens < 0) {
    return absl::InvalidArgumentError("context K/V layer counts or lengths disagree");
  }
  if (s.layers == 0) return s;
  const Tensor& first = ctx.kv.k.front();
  if (first.rank() != 3) return absl::InvalidArgumentError("context K/V must be rank 3");
  s.dtype = first.dtype();
  s.kv_heads = first.dim(1);
  s.head_dim = first.dim(2);
  for (size_t l = 0; l < ctx.kv.k.size(); ++l) {
    for (const Tensor* t : {&ctx.kv.k[l], &ctx.kv.v[l]}) {
      if (!t->defined() || t->rank() != 3 || t->dtype() != s.dtype || t->dim(1) != s.kv_heads ||
          t->dim(2) != s.head_dim || t->dim(0) < s.tokens) {
        return absl::InvalidArgumentError(
            absl::StrCat("context layer ", l, " has tensor ", t->ShapeString(), " (",
                         std::string(DTypeName(t->dtype())), "), expected [", s.tokens, ", ",
                         s.kv_heads, ", ", s.head_dim, "] ", std::string(DTypeName(s.dtype))));
      }
    }
  }
  return s;
}

absl::StatusOr<EncodedContext> AllocateContext(Backend& backend, const KvShape& shape) {
  EncodedContext ctx;
  ctx.tokens = shape.tokens;
  ctx.groups = shape.groups;
  ctx.group_length = shape.group_length;
  ctx.kv.len = shape.tokens;
  const int64_t rows = std::max<int64_t>(shape.tokens, 1);
  for (int64_t l = 0; l < shape.layers; ++l) {
    for (auto* list : {&ctx.kv.k, &ctx.kv.v}) {
      auto t = backend.Allocate(shape.dtype, {rows, shape.kv_heads, shape.head_dim});
      if (!t.ok()) return t.status();
      PopulateHostMemory(*t);
      list->push_back(*std::move(t));
    }
  }
  return ctx;
}

void ConvertElements(const void* src, DType from, void* dst, DType to, size_t n) {
  if (from == to) {
    std::memcpy(dst, src, n * DTypeSize(from));
    return;
  }
  if (to == DType::kF32) {  // widening is exact; the bf16 loop vectorizes (a shift)
    const auto* h = static_cast<const uint16_t*>(src);
    auto* f = static_cast<float*>(dst);
    if (from == DType::kBF16) {
      for (size_t i = 0; i < n; ++i) f[i] = BF16ToF32(h[i]);
    } else {
      for (size_t i = 0; i < n; ++i) f[i] = F16ToF32(h[i]);
    }
    return;
  }
  if (from == DType::kF32) {  // narrowing rounds to nearest even
    const auto* f = static_cast<const float*>(src);
    auto* h = static_cast<uint16_t*>(dst);
    if (to == DType::kBF16) {
      for (size_t i = 0; i < n; ++i) h[i] = F32ToBF16(f[i]);
    } else {
      for (size_t i = 0; i < n; ++i) h[i] = F32ToF16(f[i]);
    }
    return;
  }
  // f16 <-> bf16 through f32 (exact widening, so it rounds only once).
  std::vector<float> wide(n);
  ConvertElements(src, from, wide.data(), DType::kF32, n);
  ConvertElements(wide.data(), DType::kF32, dst, to, n);
}

absl::StatusOr<EncodedContext> ConvertContext(const EncodedContext& ctx, DType dtype,
                                              Backend& backend) {
  auto shape = ShapeOf(ctx);
  if (!shape.ok()) return shape.status();
  if (shape->dtype == dtype || shape->layers == 0) return ctx;
  KvShape out_shape = *shape;
  out_shape.dtype = dtype;
  auto allocated = AllocateContext(backend, out_shape);
  if (!allocated.ok()) return allocated.status();
  EncodedContext& out = *allocated;
  out.kv.log_weight = ctx.kv.log_weight;
  out.kv.positions = ctx.kv.positions;  // i32 position ids (ALiBi models): not converted, shared
  // On the device: the backend's Convert rounds to nearest even, as ConvertElements does.
  for (size_t l = 0; l < ctx.kv.k.size(); ++l) {
    backend.Convert(FlatRows(ctx.kv.k[l], shape->tokens), FlatRows(out.kv.k[l], shape->tokens));
    backend.Convert(FlatRows(ctx.kv.v[l], shape->tokens), FlatRows(out.kv.v[l], shape->tokens));
  }
  auto status = backend.Synchronize();
  if (!status.ok()) return status;
  return allocated;
}

absl::StatusOr<EncodedContext> ToF32(const EncodedContext& ctx, Backend& backend) {
  return ConvertContext(ctx, DType::kF32, backend);
}

}  // namespace manyshot
