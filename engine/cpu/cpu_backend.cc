#include "engine/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_gemv.h"
#include "engine/cpu/cpu_target.h"
#include "engine/cpu/cpu_util.h"
#include "engine/cpu/vector_math.h"

namespace manyshot {
namespace {

using cpu_internal::ParallelRows;
using cpu_internal::RequireF32;

constexpr size_t kAlignment = 64;
constexpr size_t kHugePage = size_t{2} << 20;

int ResolveThreads(int threads) {
  if (threads > 0) return threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

Tensor AllocateAligned(DType dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  size_t bytes = std::max<size_t>(kAlignment, static_cast<size_t>(n) * DTypeSize(dtype));
  // Large tensors (weights, K/V) get transparent huge pages: first touch of a 2 GB restored
  // context otherwise spends most of its time in 4 KiB page faults, and every later pass over
  // it in TLB misses. The kernel's THP mode is often "madvise", hence the advice.
  const size_t alignment = bytes >= kHugePage ? kHugePage : kAlignment;
  bytes = (bytes + alignment - 1) / alignment * alignment;
  void* data = std::aligned_alloc(alignment, bytes);
  if (data == nullptr) return Tensor();
  if (alignment == kHugePage) madvise(data, bytes, MADV_HUGEPAGE);
  auto buffer =
      std::make_shared<Buffer>(data, bytes, Device::kCPU, [](void* p, size_t) { std::free(p); });
  return Tensor(std::move(buffer), dtype, std::move(shape));
}

// Exact: a bf16 value is the top half of an f32 (a loop the compiler vectorises).
void WidenBF16(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(src[i]);
}

}  // namespace

std::string BlasKernelName() {
  const char* core = openblas_get_corename();
  return core ? core : "unknown";
}

CpuBackend::CpuBackend(int threads) : pool_(std::make_unique<ThreadPool>(ResolveThreads(threads))) {
  // Our pool partitions every GEMM; OpenBLAS must not start threads of its own.
  openblas_set_num_threads(1);
  // MANYSHOT_CPU_TARGET before the first kernel runs (an unusable value is reported on stderr).
  ApplyCpuTargetFromEnvironment().IgnoreError();
}

std::string CpuBackend::description() const {
  return absl::StrCat("host CPU, ", pool_->size(), " threads, kernels ", CpuTargetName(),
                      ", OpenBLAS ", BlasKernelName());
}

absl::StatusOr<Tensor> CpuBackend::AllocateImpl(DType dtype, std::vector<int64_t> shape) {
  Tensor t = AllocateAligned(dtype, shape);
  if (!t.defined()) {
    return absl::ResourceExhaustedError(absl::StrCat("out of host memory allocating ",
                                                     std::string(DTypeName(dtype)),
                                                     Tensor(nullptr, dtype, shape).ShapeString()));
  }
  return t;
}

absl::StatusOr<Tensor> CpuBackend::AllocateHostImpl(DType dtype, std::vector<int64_t> shape) {
  return AllocateImpl(dtype, std::move(shape));
}

absl::Status CpuBackend::CopyFromHostImpl(const void* src, const Tensor& dst) {
  std::memcpy(dst.raw(), src, dst.bytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyFromHostAsyncImpl(const Tensor& src, const Tensor& dst) {
  std::memcpy(dst.raw(), src.raw(), dst.bytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyToHostImpl(const Tensor& src, void* dst) {
  std::memcpy(dst, src.raw(), src.bytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyImpl(const Tensor& src, const Tensor& dst) {
  std::memmove(dst.raw(), src.raw(), src.bytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::ConvertImpl(const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
  ParallelRows(*pool_, n / 4096 + 1, 4096, [&](int64_t b, int64_t e) {
    const int64_t end = std::min(n, e * 4096);
    for (int64_t i = b * 4096; i < end; ++i) {
      float f;
      switch (src.dtype()) {
        case DType::kF32:
          f = src.data<float>()[i];
          break;
        case DType::kBF16:
          f = BF16ToF32(src.data<uint16_t>()[i]);
          break;
        default:
          f = F16ToF32(src.data<uint16_t>()[i]);
          break;
      }
      switch (dst.dtype()) {
        case DType::kF32:
          dst.data<float>()[i] = f;
          break;
        case DType::kBF16:
          dst.data<uint16_t>()[i] = F32ToBF16(f);
          break;
        default:
          dst.data<uint16_t>()[i] = F32ToF16(f);
          break;
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::EmbeddingImpl(const Tensor& id_tensor, const Tensor& table,
                                       const Tensor& out, bool accumulate) {
  if (auto st = RequireF32("Embedding", {&out}); !st.ok()) return st;
  absl::Span<const int32_t> ids(id_tensor.data<int32_t>(), id_tensor.numel());
  const int64_t hidden = table.dim(1);
  const bool bf16 = table.dtype() == DType::kBF16;  // else f32 (SupportsWeightDType)
  float* o = out.data<float>();
  ParallelRows(*pool_, static_cast<int64_t>(ids.size()), hidden, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t row = static_cast<int64_t>(ids[r]) * hidden;
      float* dst = o + r * hidden;
      if (bf16) {
        const uint16_t* src = table.data<uint16_t>() + row;
        for (int64_t i = 0; i < hidden; ++i) {
          dst[i] = (accumulate ? dst[i] : 0.0f) + BF16ToF32(src[i]);
        }
        continue;
      }
      const float* src = table.data<float>() + row;
      if (accumulate) {
        for (int64_t i = 0; i < hidden; ++i) dst[i] += src[i];
      } else {
        std::memcpy(dst, src, hidden * sizeof(float));
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::GatherRowsImpl(const Tensor& x, const Tensor& row_tensor,
                                        const Tensor& out) {
  const size_t row_bytes = x.RowBytes();
  const int32_t* rows = row_tensor.data<int32_t>();
  for (int64_t r = 0; r < row_tensor.numel(); ++r) {
    std::memcpy(static_cast<char*>(out.raw()) + r * row_bytes,
                static_cast<const char*>(x.raw()) + static_cast<size_t>(rows[r]) * row_bytes,
                row_bytes);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::RmsNormImpl(const Tensor& x, const Tensor& weight, float eps,
                                     const Tensor& out) {
  if (auto st = RequireF32("RmsNorm", {&x}); !st.ok()) return st;
  const int64_t n = x.dim(x.rank() - 1);
  const int64_t rows = x.numel() / n;
  const float* w = weight.data<float>();
  ParallelRows(*pool_, rows, n, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x.data<float>() + r * n;
      float* orow = out.data<float>() + r * n;
      float ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
      float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
      for (int64_t i = 0; i < n; ++i) orow[i] = xr[i] * inv * w[i];
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::LayerNormImpl(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                       float eps, const Tensor& out) {
  if (auto st = RequireF32("LayerNorm", {&x}); !st.ok()) return st;
  const int64_t n = x.dim(x.rank() - 1);
  const int64_t rows = x.numel() / n;
  const float* w = weight.data<float>();
  const float* bi = bias.data<float>();
  ParallelRows(*pool_, rows, n, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x.data<float>() + r * n;
      float* orow = out.data<float>() + r * n;
      float mean = 0;
      for (int64_t i = 0; i < n; ++i) mean += xr[i];
      mean /= static_cast<float>(n);
      float var = 0;
      for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      float inv = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
      for (int64_t i = 0; i < n; ++i) orow[i] = (xr[i] - mean) * inv * w[i] + bi[i];
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::LinearImpl(const Tensor& x, const Tensor& weight, WeightLayout layout,
                                    const Tensor& bias, const Tensor& out) {
  if (auto st = RequireF32("Linear", {&x, &out}); !st.ok()) return st;
  const int64_t rows = x.numel() / x.dim(x.rank() - 1);
  const int64_t in = x.dim(x.rank() - 1);
  const int64_t out_features = layout == WeightLayout::kOutIn ? weight.dim(0) : weight.dim(1);
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  if (rows <= cpu_internal::kGemvMaxRows) {
    // Decode: bound by reading the weights once (cpu_gemv.h).
    cpu_internal::Gemv(*pool_, xp, rows, in, weight.raw(), weight.dtype(), layout, out_features, bp,
                       op);
    return absl::OkStatus();
  }
  const bool bf16 = weight.dtype() == DType::kBF16;  // else f32 (SupportsWeightDType)
  // out[:, c0, c0 + cols) from a panel of f32 weights: [cols, in] (kOutIn) or [in, cols] (kInOut)
  // with leading dimension ld.
  auto sgemm_panel = [&](const float* panel, int64_t ld, int64_t c0, int64_t cols) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans,
                layout == WeightLayout::kOutIn ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
                static_cast<int>(cols), static_cast<int>(in), 1.0f, xp, static_cast<int>(in), panel,
                static_cast<int>(ld), 0.0f, op + c0, static_cast<int>(out_features));
  };
  // Each thread computes a slice of output columns over all rows: it reads all of x and only its
  // share of the weights. bf16 weights are widened a panel at a time into a per-thread buffer
  // that stays in cache (converting costs one pass over the weights, sgemm `rows` passes).
  const int64_t col_block = 16;
  const int64_t blocks = (out_features + col_block - 1) / col_block;
  pool_->ParallelFor(blocks, [&](int64_t b0, int64_t b1) {
    const int64_t c0 = b0 * col_block;
    const int64_t c1 = std::min(out_features, b1 * col_block);
    if (!bf16) {
      const float* wp = weight.data<float>();
      if (layout == WeightLayout::kOutIn) {
        sgemm_panel(wp + c0 * in, in, c0, c1 - c0);
      } else {
        sgemm_panel(wp + c0, out_features, c0, c1 - c0);
      }
    } else {
      constexpr int64_t kPanelCols = 64;
      thread_local std::vector<float> panel;
      panel.resize(static_cast<size_t>(kPanelCols * in));
      const uint16_t* wp = weight.data<uint16_t>();
      for (int64_t p0 = c0; p0 < c1; p0 += kPanelCols) {
        const int64_t cols = std::min(kPanelCols, c1 - p0);
        if (layout == WeightLayout::kOutIn) {
          WidenBF16(wp + p0 * in, cols * in, panel.data());
          sgemm_panel(panel.data(), in, p0, cols);
        } else {
          for (int64_t i = 0; i < in; ++i) {
            WidenBF16(wp + i * out_features + p0, cols, panel.data() + i * cols);
          }
          sgemm_panel(panel.data(), cols, p0, cols);
        }
      }
    }
    if (bp != nullptr) {
      for (int64_t r = 0; r < rows; ++r) {
        float* orow = op + r * out_features;
        for (int64_t c = c0; c < c1; ++c) orow[c] += bp[c];
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::RopeImpl(const Tensor& x, const Tensor& position_tensor,
                                  const RopeTable& table) {
  if (auto st = RequireF32("Rope", {&x}); !st.ok()) return st;
  const int32_t* positions = position_tensor.data<int32_t>();
  const int64_t tokens = x.dim(0);
  const int64_t heads = x.dim(1);
  const int64_t dim = x.dim(2);
  const int64_t half = dim / 2;
  const std::vector<double>& inv_freq = table.inv_freq;
  // The factor multiplies cos/sin in double before the rounding: exact (a no-op) when it is 1.
  const double scale = table.attention_factor;
  ParallelRows(*pool_, tokens, heads * dim, [&](int64_t b, int64_t e) {
    std::vector<float> cos_v(half), sin_v(half);
    for (int64_t t = b; t < e; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        double angle = static_cast<double>(positions[t]) * inv_freq[i];
        cos_v[i] = static_cast<float>(std::cos(angle) * scale);
        sin_v[i] = static_cast<float>(std::sin(angle) * scale);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x.data<float>() + (t * heads + h) * dim;
        for (int64_t i = 0; i < half; ++i) {
          float a = v[i];
          float c = v[i + half];
          v[i] = a * cos_v[i] - c * sin_v[i];
          v[i + half] = c * cos_v[i] + a * sin_v[i];
        }
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::GeluTanhImpl(const Tensor& x) {
  if (auto st = RequireF32("GeluTanh", {&x}); !st.ok()) return st;
  const int64_t n = x.numel();
  float* p = x.data<float>();
  ParallelRows(*pool_, n / 1024 + 1, 1024, [&](int64_t b, int64_t e) {
    int64_t end = std::min(n, e * 1024);
    for (int64_t i = b * 1024; i < end; ++i) p[i] = vmath::GeluTanh(p[i]);
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::GeluErfImpl(const Tensor& x) {
  if (auto st = RequireF32("GeluErf", {&x}); !st.ok()) return st;
  const int64_t n = x.numel();
  float* p = x.data<float>();
  ParallelRows(*pool_, n / 1024 + 1, 1024, [&](int64_t b, int64_t e) {
    int64_t end = std::min(n, e * 1024);
    for (int64_t i = b * 1024; i < end; ++i) p[i] = vmath::GeluErf(p[i]);
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::SwiGluImpl(const Tensor& gate_up, const Tensor& out) {
  if (auto st = RequireF32("SwiGlu", {&gate_up}); !st.ok()) return st;
  const int64_t rows = gate_up.dim(0);
  const int64_t inter = out.numel() / rows;
  ParallelRows(*pool_, rows, inter, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = gate_up.data<float>() + r * 2 * inter;
      const float* u = g + inter;
      float* o = out.data<float>() + r * inter;
      for (int64_t i = 0; i < inter; ++i) o[i] = vmath::Silu(g[i]) * u[i];
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::SplitQkvImpl(const Tensor& qkv, const Tensor& q, const Tensor& k,
                                      const Tensor& v) {
  if (auto st = RequireF32("SplitQkv", {&qkv}); !st.ok()) return st;
  const int64_t rows = qkv.dim(0);
  const int64_t nq = q.numel() / rows, nk = k.numel() / rows, nv = v.numel() / rows;
  ParallelRows(*pool_, rows, nq + nk + nv, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* src = qkv.data<float>() + r * (nq + nk + nv);
      std::memcpy(q.data<float>() + r * nq, src, nq * sizeof(float));
      std::memcpy(k.data<float>() + r * nk, src + nq, nk * sizeof(float));
      std::memcpy(v.data<float>() + r * nv, src + nq + nk, nv * sizeof(float));
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::AddImpl(const Tensor& x, const Tensor& y) {
  if (auto st = RequireF32("Add", {&x}); !st.ok()) return st;
  const int64_t n = x.numel();
  float* xp = x.data<float>();
  const float* yp = y.data<float>();
  ParallelRows(*pool_, n / 1024 + 1, 1024, [&](int64_t b, int64_t e) {
    int64_t end = std::min(n, e * 1024);
    for (int64_t i = b * 1024; i < end; ++i) xp[i] += yp[i];
  });
  return absl::OkStatus();
}

}  // namespace manyshot
