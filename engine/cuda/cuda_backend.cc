// The CUDA backend: stream-ordered pool memory, cuBLASLt GEMMs and the kernels of
// elementwise_kernels.cu and attention_kernels.cu (ALiBi attention and AttendBiased: the kernel of
// biased_attention_kernels.cu, from cuda_biased_attention.cc), with one stream per host thread
// (see engine/core/backend.h, "Concurrency", and cuda_backend_impl.h).
#include "engine/cuda/cuda_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cuda/cuda_backend_impl.h"
#include "engine/cuda/elementwise_kernels.h"

namespace manyshot {
namespace cuda_internal {
namespace {

constexpr size_t kAllocationGranule = 256;

absl::Status CublasError(absl::string_view op, cublasStatus_t status, absl::string_view detail) {
  return absl::InternalError(absl::StrCat("cublasLt ", op, ": status ", static_cast<int>(status),
                                          detail.empty() ? "" : " (", detail,
                                          detail.empty() ? "" : ")"));
}

// Element count and bytes of a shape, or an error when they overflow.
absl::StatusOr<size_t> ShapeBytes(DType dtype, const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension");
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
      return absl::InvalidArgumentError("tensor size overflows");
    }
    n *= static_cast<uint64_t>(d);
  }
  if (n > std::numeric_limits<uint64_t>::max() / 2 / DTypeSize(dtype)) {
    return absl::InvalidArgumentError("tensor size overflows");
  }
  return static_cast<size_t>(n * DTypeSize(dtype));
}

size_t RoundAllocation(size_t bytes) {
  return std::max(kAllocationGranule,
                  (bytes + kAllocationGranule - 1) / kAllocationGranule * kAllocationGranule);
}

int64_t LastDim(const Tensor& t) { return t.rank() == 0 ? 1 : t.dim(t.rank() - 1); }

// The calling thread's leases, one per DeviceContext it has used (DeviceContext::State), given
// back when the thread ends. Context ids are never reused, so a lease with the running context's
// id is that context's (a context's methods never run after it is destroyed).
struct Lease {
  uint64_t context_id = 0;
  std::weak_ptr<DeviceContext> context;
  ThreadState* state = nullptr;
};
// Set when the thread's leases have been given back (trivially destructible, so it can still be
// read by what runs after: the destructors of statics and other thread_locals may free tensors).
thread_local bool tls_leases_given_back = false;
struct ThreadLeases {
  ~ThreadLeases() {
    for (const Lease& lease : leases) {
      if (std::shared_ptr<DeviceContext> context = lease.context.lock()) {
        context->Return(lease.state);
      }
    }
    tls_leases_given_back = true;
  }
  std::vector<Lease> leases;
};
thread_local ThreadLeases tls_leases;

std::atomic<uint64_t> next_context_id{1};

}  // namespace

absl::Status CudaError(absl::string_view op, cudaError_t error) {
  (void)cudaGetLastError();  // clear it (a sticky error stays in the context regardless)
  if (error == cudaErrorMemoryAllocation) {  // routine on a GPU: the caller may free and retry
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda ", op, ": out of memory (", cudaGetErrorString(error), ")"));
  }
  return absl::InternalError(absl::StrCat("cuda ", op, ": ", cudaGetErrorString(error)));
}

cuda::ElemType ElemTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return cuda::ElemType::kF16;
    case DType::kBF16:
      return cuda::ElemType::kBF16;
    case DType::kF32:
    case DType::kI32:  // never passed: the fronts check that these tensors are floats
      break;
  }
  return cuda::ElemType::kF32;
}

cudaDataType_t CudaDataTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kI32:
      return CUDA_R_32I;
    case DType::kF32:
      break;
  }
  return CUDA_R_32F;
}

uint32_t PointerAlignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  return static_cast<uint32_t>(std::min<uintptr_t>(256, a & (~a + 1)));
}

std::string GemmKey::ToString() const {
  const std::string x_type(DTypeName(in_type));
  const std::string y_type(DTypeName(out_type));
  const std::string w = layout == WeightLayout::kOutIn ? absl::StrFormat("W[%d,%d]^T", out, in)
                                                       : absl::StrFormat("W[%d,%d]", in, out);
  return absl::StrFormat("y[%d,%d] %s = x[%d,%d] %s * %s %s%s, alignment x/w/y %u/%u/%u%s", rows,
                         out, y_type, rows, in, x_type, w, x_type,
                         bias ? absl::StrFormat(" + bias[%d] %s", out, x_type) : "", align_x,
                         align_w, align_y, bias ? absl::StrFormat("/bias %u", align_bias) : "");
}

size_t GemmKeyHash::operator()(const GemmKey& k) const {
  size_t h = std::hash<int64_t>()(k.rows);
  auto mix = [&h](uint64_t v) {
    h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  mix(static_cast<uint64_t>(k.in));
  mix(static_cast<uint64_t>(k.out));
  mix(static_cast<uint64_t>(k.in_type) | static_cast<uint64_t>(k.out_type) << 8 |
      static_cast<uint64_t>(k.layout) << 16);
  mix(static_cast<uint64_t>(k.align_x) | static_cast<uint64_t>(k.align_w) << 16 |
      static_cast<uint64_t>(k.align_y) << 32 | static_cast<uint64_t>(k.align_bias) << 48);
  mix(k.bias ? 1 : 0);
  return h;
}

// Row-major y = x op(W) as a column-major cuBLASLt problem: row-major y [rows, out] is
// column-major y^T [out, rows], so we compute D = y^T (m = out, n = rows, k = in) as
//   kOutIn: y^T = W x^T, where row-major W [out, in] is the column-major [in, out] matrix W^T
//           (ld in): A = that matrix with TRANSA = T;
//   kInOut: y^T = W^T x^T, where row-major W [in, out] is the column-major [out, in] matrix W^T
//           (ld out): A = that matrix, TRANSA = N;
// and B = x^T, row-major x [rows, in] read as column-major [in, rows] (ld in), TRANSB = N.
absl::StatusOr<std::unique_ptr<GemmPlan>> GemmPlan::Create(cublasLtHandle_t handle,
                                                           const GemmKey& key, const void* bias) {
  // The bias epilogue adds the bias in f32 before the output is rounded (one rounding, as against
  // two for a separate pass into a 16-bit output). Its bias vector has the output's dtype, so it
  // is used only when the bias has that dtype; for f32 output from 16-bit inputs a separate f32
  // pass rounds only once anyway. The heuristic takes no alignment preference for the bias, and
  // the epilogue's kernels read it in vectors (others saw misaligned-address faults below 16
  // bytes), so a bias that is not 16-byte aligned (a view into a larger tensor) is added apart.
  if (key.bias && key.in_type == key.out_type && key.align_bias >= 16) {
    bool no_algorithm = false;
    absl::StatusOr<std::unique_ptr<GemmPlan>> plan =
        Build(handle, key, bias, /*bias_epilogue=*/true, &no_algorithm);
    if (plan.ok() || !no_algorithm) return plan;
    // No kernel for this shape with the epilogue: the caller adds the bias.
  }
  bool no_algorithm = false;
  return Build(handle, key, nullptr, /*bias_epilogue=*/false, &no_algorithm);
}

absl::StatusOr<std::unique_ptr<GemmPlan>> GemmPlan::Build(cublasLtHandle_t handle,
                                                          const GemmKey& key, const void* bias,
                                                          bool bias_epilogue, bool* no_algorithm) {
  std::unique_ptr<GemmPlan> plan(new GemmPlan());
  plan->key_ = key;
  plan->bias_in_epilogue_ = bias_epilogue;
  const std::string shape = key.ToString();
  auto check = [&](const char* op, cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? absl::OkStatus() : CublasError(op, s, shape);
  };
  const uint64_t m = static_cast<uint64_t>(key.out);
  const uint64_t n = static_cast<uint64_t>(key.rows);
  const uint64_t k = static_cast<uint64_t>(key.in);
  const cudaDataType_t in_type = CudaDataTypeOf(key.in_type);
  const cudaDataType_t out_type = CudaDataTypeOf(key.out_type);
  // CUBLAS_COMPUTE_32F (not ..._FAST_TF32): f32 GEMMs stay full f32 for parity with the CPU.
  absl::Status s = check("cublasLtMatmulDescCreate",
                         cublasLtMatmulDescCreate(&plan->desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (!s.ok()) return s;
  const cublasOperation_t trans_a = key.layout == WeightLayout::kOutIn ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t trans_b = CUBLAS_OP_N;
  s = check("cublasLtMatmulDescSetAttribute(TRANSA)",
            cublasLtMatmulDescSetAttribute(plan->desc_, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                           sizeof(trans_a)));
  if (!s.ok()) return s;
  s = check("cublasLtMatmulDescSetAttribute(TRANSB)",
            cublasLtMatmulDescSetAttribute(plan->desc_, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                           sizeof(trans_b)));
  if (!s.ok()) return s;
  if (bias_epilogue) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    s = check("cublasLtMatmulDescSetAttribute(EPILOGUE)",
              cublasLtMatmulDescSetAttribute(plan->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                             sizeof(epilogue)));
    if (!s.ok()) return s;
    // The bias has length m (D's rows, our output features) and is broadcast over D's columns
    // (our rows). Set now because the heuristic reads its alignment from the pointer.
    s = check("cublasLtMatmulDescSetAttribute(BIAS_POINTER)",
              cublasLtMatmulDescSetAttribute(plan->desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                             sizeof(bias)));
    if (!s.ok()) return s;
  }
  // Layouts describe the matrices as stored (before TRANSA/TRANSB).
  if (key.layout == WeightLayout::kOutIn) {
    s = check("cublasLtMatrixLayoutCreate(A)",
              cublasLtMatrixLayoutCreate(&plan->a_, in_type, k, m, static_cast<int64_t>(k)));
  } else {
    s = check("cublasLtMatrixLayoutCreate(A)",
              cublasLtMatrixLayoutCreate(&plan->a_, in_type, m, k, static_cast<int64_t>(m)));
  }
  if (!s.ok()) return s;
  s = check("cublasLtMatrixLayoutCreate(B)",
            cublasLtMatrixLayoutCreate(&plan->b_, in_type, k, n, static_cast<int64_t>(k)));
  if (!s.ok()) return s;
  s = check("cublasLtMatrixLayoutCreate(D)",
            cublasLtMatrixLayoutCreate(&plan->d_, out_type, m, n, static_cast<int64_t>(m)));
  if (!s.ok()) return s;

  cublasLtMatmulPreference_t pref = nullptr;
  s = check("cublasLtMatmulPreferenceCreate", cublasLtMatmulPreferenceCreate(&pref));
  if (!s.ok()) return s;
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } pref_guard{pref};
  const uint64_t workspace = kWorkspaceBytes;
  s = check("cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)",
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &workspace, sizeof(workspace)));
  if (!s.ok()) return s;
  // The actual alignments: tensors may be row views at any offset, and the default (256) would
  // let the heuristic pick kernels that assume more than these pointers have.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_w},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_x},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_y},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_y},
  };
  for (const auto& [attribute, value] : alignments) {
    s = check("cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)",
              cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof(value)));
    if (!s.ok()) return s;
  }
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  s = check("cublasLtMatmulAlgoGetHeuristic",
            cublasLtMatmulAlgoGetHeuristic(handle, plan->desc_, plan->a_, plan->b_, plan->d_,
                                           plan->d_, pref, 1, &result, &returned));
  if (!s.ok()) return s;
  if (returned < 1 || result.state != CUBLAS_STATUS_SUCCESS) {
    *no_algorithm = true;
    return CublasError("cublasLtMatmulAlgoGetHeuristic: no algorithm",
                       returned < 1 ? CUBLAS_STATUS_NOT_SUPPORTED : result.state, shape);
  }
  plan->algo_ = result.algo;
  return plan;
}

GemmPlan::~GemmPlan() {
  if (d_ != nullptr) cublasLtMatrixLayoutDestroy(d_);
  if (b_ != nullptr) cublasLtMatrixLayoutDestroy(b_);
  if (a_ != nullptr) cublasLtMatrixLayoutDestroy(a_);
  if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
}

absl::Status GemmPlan::Run(cublasLtHandle_t handle, const void* x, const void* w, const void* bias,
                           void* y, void* workspace, cudaStream_t stream) {
  if (bias_in_epilogue_) {
    const cublasStatus_t s = cublasLtMatmulDescSetAttribute(
        desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (s != CUBLAS_STATUS_SUCCESS) {
      return CublasError("cublasLtMatmulDescSetAttribute(BIAS_POINTER)", s, key_.ToString());
    }
  }
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const cublasStatus_t s = cublasLtMatmul(handle, desc_, &alpha, w, a_, x, b_, &beta, y, d_, y, d_,
                                          &algo_, workspace, kWorkspaceBytes, stream);
  if (s != CUBLAS_STATUS_SUCCESS) {
    (void)cudaGetLastError();
    return CublasError("cublasLtMatmul", s, key_.ToString());
  }
  return absl::OkStatus();
}

ThreadState::~ThreadState() {
  if (stream != nullptr) (void)cudaStreamSynchronize(stream);
  plans.clear();
  plan_lru.clear();
  if (lt != nullptr) cublasLtDestroy(lt);
  if (workspace != nullptr) (void)cudaFree(workspace);
  if (stream != nullptr) (void)cudaStreamDestroy(stream);
  (void)cudaGetLastError();  // teardown errors (e.g. at process exit) have nowhere to go
}

absl::Status ThreadState::EnsureGemm() {
  if (lt != nullptr) return absl::OkStatus();
  void* ws = nullptr;
  absl::Status s =
      CudaCheck("cudaMalloc(cuBLASLt workspace)", cudaMalloc(&ws, GemmPlan::kWorkspaceBytes));
  if (!s.ok()) return s;
  cublasLtHandle_t handle = nullptr;
  const cublasStatus_t cs = cublasLtCreate(&handle);
  if (cs != CUBLAS_STATUS_SUCCESS) {
    (void)cudaFree(ws);
    return CublasError("cublasLtCreate", cs, "");
  }
  workspace = ws;
  lt = handle;
  return absl::OkStatus();
}

absl::StatusOr<GemmPlan*> ThreadState::Plan(const GemmKey& key, const void* bias) {
  auto it = plans.find(key);
  if (it != plans.end()) {
    plan_lru.splice(plan_lru.begin(), plan_lru, it->second);  // now the most recently used
    return it->second->second.get();
  }
  absl::Status s = EnsureGemm();
  if (!s.ok()) return s;
  absl::StatusOr<std::unique_ptr<GemmPlan>> plan = GemmPlan::Create(lt, key, bias);
  if (!plan.ok()) return plan.status();
  plan_lru.emplace_front(key, *std::move(plan));
  plans.emplace(key, plan_lru.begin());
  if (plan_lru.size() > kMaxPlans) {
    plans.erase(plan_lru.back().first);
    plan_lru.pop_back();
  }
  return plan_lru.front().second.get();
}

DeviceContext::DeviceContext(int device) : device_(device), id_(next_context_id.fetch_add(1)) {}

DeviceContext::~DeviceContext() {
  if (cudaSetDevice(device_) != cudaSuccess) (void)cudaGetLastError();
  states_.clear();
}

absl::StatusOr<ThreadState*> DeviceContext::State() {
  // Every call: the calling thread may be new, or may have used another device since.
  absl::Status s = CudaCheck("cudaSetDevice", cudaSetDevice(device_));
  if (!s.ok()) return s;
  if (tls_leases_given_back) {
    // The thread is ending (or the process exiting) and gave its state back; Free falls back to
    // a device-wide synchronization.
    return absl::FailedPreconditionError("cuda: called on a thread that is ending");
  }
  std::vector<Lease>& leases = tls_leases.leases;
  for (const Lease& lease : leases) {
    if (lease.context_id == id_) return lease.state;
  }
  ThreadState* state = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      state = idle_.back();
      idle_.pop_back();
    }
  }
  if (state == nullptr) {
    auto fresh = std::make_unique<ThreadState>(device_);
    s = CudaCheck("cudaStreamCreateWithFlags",
                  cudaStreamCreateWithFlags(&fresh->stream, cudaStreamNonBlocking));
    if (!s.ok()) return s;
    state = fresh.get();
    std::lock_guard<std::mutex> lock(mutex_);
    states_.push_back(std::move(fresh));
  }
  std::erase_if(leases, [](const Lease& lease) { return lease.context.expired(); });
  leases.push_back({id_, weak_from_this(), state});
  return state;
}

void DeviceContext::Return(ThreadState* state) {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(state);
}

size_t DeviceContext::thread_states() {
  std::lock_guard<std::mutex> lock(mutex_);
  return states_.size();
}

void DeviceContext::Free(void* p) {
  absl::StatusOr<ThreadState*> state = State();
  if (state.ok()) {
    if (cudaFreeAsync(p, (*state)->stream) != cudaSuccess) (void)cudaGetLastError();
    return;
  }
  // No stream for this thread (creating one failed, or the thread is ending and gave it back):
  // wait for all work on the device, since the legacy stream does not order against our
  // non-blocking streams, then free on it.
  if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
  if (cudaFreeAsync(p, nullptr) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace cuda_internal

using cuda_internal::CudaCheck;
using cuda_internal::CudaError;
using cuda_internal::ElemTypeOf;
using cuda_internal::ThreadState;

namespace {

// The calling thread's state, or return its error.
#define MANYSHOT_CUDA_STATE(var)                             \
  absl::StatusOr<ThreadState*> var##_or = context_->State(); \
  if (!var##_or.ok()) return var##_or.status();              \
  ThreadState* var = *var##_or

// A launcher's result as a status naming the op.
absl::Status Launched(absl::string_view op, cudaError_t error) { return CudaCheck(op, error); }

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA unavailable: ", cudaGetErrorString(error)));
  }
  if (count <= 0) return absl::FailedPreconditionError("no CUDA device");
  return count;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  if (device < 0 || device >= *count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", device, " does not exist (",
                                                   *count, " device", *count == 1 ? "" : "s", ")"));
  }
  absl::Status s = CudaCheck("cudaSetDevice", cudaSetDevice(device));
  if (!s.ok()) return s;
  cudaDeviceProp prop{};
  s = CudaCheck("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, device));
  if (!s.ok()) return s;
  int pools = 0;
  s = CudaCheck("cudaDeviceGetAttribute(MemoryPoolsSupported)",
                cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
  if (!s.ok()) return s;
  if (pools == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " (", prop.name, ") has no stream-ordered allocator"));
  }
  // Freed memory stays in the pool instead of going back to the driver at every synchronisation,
  // so steady-state allocation is a pool lookup.
  cudaMemPool_t pool = nullptr;
  s = CudaCheck("cudaDeviceGetDefaultMemPool", cudaDeviceGetDefaultMemPool(&pool, device));
  if (!s.ok()) return s;
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  s = CudaCheck("cudaMemPoolSetAttribute(ReleaseThreshold)",
                cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  if (!s.ok()) return s;

  auto context = std::make_shared<cuda_internal::DeviceContext>(device);
  // The creating thread's stream, cuBLASLt handle and workspace now, so a broken setup fails here.
  absl::StatusOr<ThreadState*> state = context->State();
  if (!state.ok()) return state.status();
  s = (*state)->EnsureGemm();
  if (!s.ok()) return s;

  const std::string description = absl::StrFormat(
      "%s, device %d, sm_%d%d, %d SMs, %.1f GiB", prop.name, device, prop.major, prop.minor,
      prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024 * 1024));
  return std::make_unique<CudaBackend>(std::move(context), description);
}

CudaBackend::CudaBackend(std::shared_ptr<cuda_internal::DeviceContext> context,
                         std::string description)
    : context_(std::move(context)), description_(std::move(description)) {}

// ---- Memory ----

absl::StatusOr<Tensor> CudaBackend::AllocateImpl(DType dtype, std::vector<int64_t> shape) {
  absl::StatusOr<size_t> bytes = cuda_internal::ShapeBytes(dtype, shape);
  if (!bytes.ok()) return bytes.status();
  const size_t size = cuda_internal::RoundAllocation(*bytes);
  MANYSHOT_CUDA_STATE(state);
  void* p = nullptr;
  const cudaError_t error = cudaMallocAsync(&p, size, state->stream);
  if (error == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda: out of device memory allocating ", size, " bytes on device ",
                     context_->device(), " (", free_bytes, " free of ", total_bytes, " bytes)"));
  }
  if (error != cudaSuccess) return CudaError("cudaMallocAsync", error);
  auto context = context_;
  auto buffer = std::make_shared<Buffer>(p, size, Device::kCUDA,
                                         [context](void* ptr, size_t) { context->Free(ptr); });
  return Tensor(std::move(buffer), dtype, std::move(shape));
}

absl::StatusOr<Tensor> CudaBackend::AllocateHostImpl(DType dtype, std::vector<int64_t> shape) {
  absl::StatusOr<size_t> bytes = cuda_internal::ShapeBytes(dtype, shape);
  if (!bytes.ok()) return bytes.status();
  const size_t size = cuda_internal::RoundAllocation(*bytes);
  MANYSHOT_CUDA_STATE(state);
  (void)state;
  void* p = nullptr;
  // Portable: pinned for every device, whichever thread or context later copies from it.
  const cudaError_t error = cudaHostAlloc(&p, size, cudaHostAllocPortable);
  if (error == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda: out of pinned host memory allocating ", size, " bytes"));
  }
  if (error != cudaSuccess) return CudaError("cudaHostAlloc", error);
  auto buffer = std::make_shared<Buffer>(p, size, Device::kCPU, [](void* ptr, size_t) {
    if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
  });
  return Tensor(std::move(buffer), dtype, std::move(shape));
}

absl::Status CudaBackend::CopyFromHostImpl(const void* src, const Tensor& dst) {
  MANYSHOT_CUDA_STATE(state);
  absl::Status s = CudaCheck(
      "CopyFromHost cudaMemcpyAsync",
      cudaMemcpyAsync(dst.raw(), src, dst.bytes(), cudaMemcpyHostToDevice, state->stream));
  if (!s.ok()) return s;
  // The caller may reuse `src` on return.
  return CudaCheck("CopyFromHost cudaStreamSynchronize", cudaStreamSynchronize(state->stream));
}

absl::Status CudaBackend::CopyFromHostAsyncImpl(const Tensor& src, const Tensor& dst) {
  MANYSHOT_CUDA_STATE(state);
  return CudaCheck(
      "CopyFromHostAsync cudaMemcpyAsync",
      cudaMemcpyAsync(dst.raw(), src.raw(), dst.bytes(), cudaMemcpyHostToDevice, state->stream));
}

absl::Status CudaBackend::CopyToHostImpl(const Tensor& src, void* dst) {
  MANYSHOT_CUDA_STATE(state);
  absl::Status s = CudaCheck(
      "CopyToHost cudaMemcpyAsync",
      cudaMemcpyAsync(dst, src.raw(), src.bytes(), cudaMemcpyDeviceToHost, state->stream));
  if (!s.ok()) return s;
  return CudaCheck("CopyToHost cudaStreamSynchronize", cudaStreamSynchronize(state->stream));
}

absl::Status CudaBackend::CopyImpl(const Tensor& src, const Tensor& dst) {
  MANYSHOT_CUDA_STATE(state);
  // cudaMemcpyDefault: unified addressing finds the direction (device or pinned host memory).
  return CudaCheck("Copy cudaMemcpyAsync", cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(),
                                                           cudaMemcpyDefault, state->stream));
}

absl::Status CudaBackend::ConvertImpl(const Tensor& src, const Tensor& dst) {
  MANYSHOT_CUDA_STATE(state);
  if (src.dtype() == dst.dtype()) {
    return CudaCheck("Convert cudaMemcpyAsync", cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(),
                                                                cudaMemcpyDefault, state->stream));
  }
  return Launched("Convert",
                  cuda::LaunchConvert(src.raw(), ElemTypeOf(src.dtype()), dst.raw(),
                                      ElemTypeOf(dst.dtype()), src.numel(), state->stream));
}

absl::Status CudaBackend::SynchronizeImpl() {
  MANYSHOT_CUDA_STATE(state);
  absl::Status s =
      CudaCheck("Synchronize cudaStreamSynchronize", cudaStreamSynchronize(state->stream));
  if (!s.ok()) return s;
  return CudaCheck("Synchronize", cudaGetLastError());
}

// ---- Ops ----

absl::Status CudaBackend::EmbeddingImpl(const Tensor& ids, const Tensor& table, const Tensor& out,
                                        bool accumulate) {
  MANYSHOT_CUDA_STATE(state);
  const int64_t tokens = ids.dim(0);
  const int64_t hidden = table.dim(1);
  if (tokens == 0 || hidden == 0) return absl::OkStatus();
  if (!accumulate) {
    // A plain row gather; out-of-range ids give zero rows rather than a fault.
    return Launched("Embedding",
                    cuda::LaunchGatherRows(table.raw(), table.dim(0), ids.data<int32_t>(), tokens,
                                           static_cast<size_t>(hidden) * DTypeSize(table.dtype()),
                                           out.raw(), state->stream));
  }
  return Launched("Embedding", cuda::LaunchEmbeddingAdd(ids.data<int32_t>(), tokens, table.raw(),
                                                        table.dim(0), hidden, out.raw(),
                                                        ElemTypeOf(table.dtype()), state->stream));
}

absl::Status CudaBackend::GatherRowsImpl(const Tensor& x, const Tensor& rows, const Tensor& out) {
  MANYSHOT_CUDA_STATE(state);
  // out.RowBytes(), not x's: x may have no rows (then every index is out of range, giving zeros),
  // and Tensor::RowBytes divides by the row count.
  if (out.dim(0) == 0) return absl::OkStatus();
  return Launched("GatherRows",
                  cuda::LaunchGatherRows(x.raw(), x.dim(0), rows.data<int32_t>(), rows.dim(0),
                                         out.RowBytes(), out.raw(), state->stream));
}

absl::Status CudaBackend::RmsNormImpl(const Tensor& x, const Tensor& weight, float eps,
                                      const Tensor& out) {
  MANYSHOT_CUDA_STATE(state);
  const int64_t n = cuda_internal::LastDim(x);
  if (n == 0) return absl::OkStatus();
  return Launched("RmsNorm",
                  cuda::LaunchRmsNorm(x.raw(), weight.raw(), out.raw(), ElemTypeOf(x.dtype()),
                                      x.numel() / n, n, eps, state->stream));
}

absl::Status CudaBackend::LayerNormImpl(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        float eps, const Tensor& out) {
  MANYSHOT_CUDA_STATE(state);
  const int64_t n = cuda_internal::LastDim(x);
  if (n == 0) return absl::OkStatus();
  return Launched("LayerNorm", cuda::LaunchLayerNorm(x.raw(), weight.raw(), bias.raw(), out.raw(),
                                                     ElemTypeOf(x.dtype()), x.numel() / n, n, eps,
                                                     state->stream));
}

absl::Status CudaBackend::LinearImpl(const Tensor& x, const Tensor& weight, WeightLayout layout,
                                     const Tensor& bias, const Tensor& out) {
  MANYSHOT_CUDA_STATE(state);
  const int64_t in = cuda_internal::LastDim(x);
  const int64_t out_features = layout == WeightLayout::kOutIn ? weight.dim(0) : weight.dim(1);
  if (in == 0 || out_features == 0) {
    // Unreachable through the front (no rows reach here without columns), kept for safety.
    return absl::OkStatus();
  }
  const int64_t rows = x.numel() / in;
  if (rows == 0) return absl::OkStatus();
  cuda_internal::GemmKey key;
  key.rows = rows;
  key.in = in;
  key.out = out_features;
  key.in_type = x.dtype();
  key.out_type = out.dtype();
  key.layout = layout;
  key.align_x = cuda_internal::PointerAlignment(x.raw());
  key.align_w = cuda_internal::PointerAlignment(weight.raw());
  key.align_y = cuda_internal::PointerAlignment(out.raw());
  const void* bias_ptr = bias.defined() ? bias.raw() : nullptr;
  key.bias = bias_ptr != nullptr;
  key.align_bias = bias_ptr != nullptr ? cuda_internal::PointerAlignment(bias_ptr) : 256;
  absl::StatusOr<cuda_internal::GemmPlan*> plan = state->Plan(key, bias_ptr);
  if (!plan.ok()) return plan.status();
  absl::Status s = (*plan)->Run(state->lt, x.raw(), weight.raw(), bias_ptr, out.raw(),
                                state->workspace, state->stream);
  if (!s.ok()) return s;
  if (!bias.defined() || (*plan)->bias_in_epilogue()) return absl::OkStatus();
  // A separate pass adding the bias in f32 (f32 out: the CPU's order, GEMM then += bias; a 16-bit
  // out only lands here when cuBLASLt has no bias-epilogue kernel, and is then rounded twice).
  return Launched("Linear bias",
                  cuda::LaunchAddBias(out.raw(), ElemTypeOf(out.dtype()), bias.raw(),
                                      ElemTypeOf(bias.dtype()), rows, out_features, state->stream));
}

absl::Status CudaBackend::RopeImpl(const Tensor& x, const Tensor& positions, float theta) {
  const int64_t tokens = x.dim(0);
  const int64_t heads = x.dim(1);
  const int64_t dim = x.dim(2);
  const int64_t half = dim / 2;
  if (half > cuda::kMaxRopeHalf) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda Rope: head_dim ", dim, " exceeds ", 2 * cuda::kMaxRopeHalf));
  }
  if (heads * dim > kInt32Max) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda Rope: ", heads, " heads of ", dim, " exceed 2^31 elements per row"));
  }
  MANYSHOT_CUDA_STATE(state);
  // theta^(-2i/dim) in double, as the CPU reference computes it.
  double inv_freq[cuda::kMaxRopeHalf];
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / dim);
  }
  return Launched("Rope", cuda::LaunchRope(x.raw(), ElemTypeOf(x.dtype()), tokens, heads, dim,
                                           positions.data<int32_t>(), inv_freq, state->stream));
}

absl::Status CudaBackend::GeluTanhImpl(const Tensor& x) {
  MANYSHOT_CUDA_STATE(state);
  return Launched("GeluTanh",
                  cuda::LaunchGeluTanh(x.raw(), ElemTypeOf(x.dtype()), x.numel(), state->stream));
}

absl::Status CudaBackend::SwiGluImpl(const Tensor& gate_up, const Tensor& out) {
  MANYSHOT_CUDA_STATE(state);
  return Launched("SwiGlu", cuda::LaunchSwiGlu(gate_up.raw(), out.raw(), ElemTypeOf(out.dtype()),
                                               out.dim(0), out.dim(1), state->stream));
}

absl::Status CudaBackend::SplitQkvImpl(const Tensor& qkv, const Tensor& q, const Tensor& k,
                                       const Tensor& v) {
  MANYSHOT_CUDA_STATE(state);
  const int64_t rows = qkv.dim(0);
  if (rows == 0) return absl::OkStatus();
  const size_t es = DTypeSize(qkv.dtype());
  const size_t src_pitch = static_cast<size_t>(qkv.numel() / rows) * es;
  size_t column = 0;  // byte offset of the part within a qkv row
  for (const Tensor* part : {&q, &k, &v}) {
    const size_t width = static_cast<size_t>(part->numel() / rows) * es;
    // Rows of `width` bytes at pitch src_pitch into a contiguous [rows, width] destination. A
    // kernel rather than cudaMemcpy2DAsync: 148 vs 248 us for a bf16 [8192, 3 x 4096] split on
    // an H100.
    absl::Status s =
        Launched("SplitQkv", cuda::LaunchCopy2D(part->raw(), width,
                                                static_cast<const std::byte*>(qkv.raw()) + column,
                                                src_pitch, width, rows, state->stream));
    if (!s.ok()) return s;
    column += width;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::AddImpl(const Tensor& x, const Tensor& y) {
  MANYSHOT_CUDA_STATE(state);
  return Launched(
      "Add", cuda::LaunchAdd(x.raw(), y.raw(), ElemTypeOf(x.dtype()), x.numel(), state->stream));
}

// ---- Attention ----

absl::Status CudaBackend::Attend(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                                 const AttentionContext* context, float scale,
                                 const AttentionState& out) {
  const char* op = context == nullptr ? "AttendOwn" : "AttendContext";
  const int64_t tokens = q.dim(0);
  const int64_t heads = q.dim(1);
  const int64_t head_dim = q.dim(2);
  if (tokens > kInt32Max || heads > kInt32Max) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda ", op, ": q ", q.ShapeString(), " exceeds 32-bit row/head counts"));
  }
  if (head_dim < 1 || head_dim > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda ", op, ": head_dim ", head_dim, " is outside [1, 256]"));
  }
  MANYSHOT_CUDA_STATE(state);

  if (context != nullptr && context->len == 0) {
    // No context keys: every row of every sequence saw nothing (o = 0, lse = -inf). (The row size
    // from the shape, not RowBytes(): q and o may have no rows at all.)
    const size_t o_row = static_cast<size_t>(heads * head_dim) * DTypeSize(out.o.dtype());
    for (const AttentionSequence& seq : sequences) {
      if (seq.q_len == 0) continue;
      absl::Status s =
          CudaCheck("AttendContext cudaMemsetAsync",
                    cudaMemsetAsync(static_cast<std::byte*>(out.o.raw()) + seq.q_begin * o_row, 0,
                                    static_cast<size_t>(seq.q_len) * o_row, state->stream));
      if (!s.ok()) return s;
      s = Launched("AttendContext fill",
                   cuda::LaunchFill(out.lse.data<float>() + seq.q_begin * heads,
                                    cuda::ElemType::kF32, seq.q_len * heads,
                                    -std::numeric_limits<float>::infinity(), state->stream));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (!sequences.empty() && sequences.front().alibi_slopes != nullptr) {
    return AttendAlibi(q, sequences, context, scale, out, state->stream);
  }

  // ~5 KiB of descriptors: on the heap rather than the caller's stack.
  auto params = std::make_unique<cuda::AttnParams>();
  cuda::AttnParams& p = *params;
  p.q = q.raw();
  p.q_type = ElemTypeOf(q.dtype());
  p.tokens = static_cast<int32_t>(tokens);
  p.heads = static_cast<int32_t>(heads);
  p.head_dim = static_cast<int32_t>(head_dim);
  p.scale = scale;
  p.o = out.o.raw();
  p.o_type = ElemTypeOf(out.o.dtype());
  p.lse = out.lse.data<float>();
  if (context != nullptr) {
    p.kv_heads = static_cast<int32_t>(context->k->dim(1));
    p.kv_type = ElemTypeOf(context->k->dtype());
  } else {
    // Own K/V: the front checked every sequence's k/v; one kv_heads and dtype per launch.
    for (const AttentionSequence& seq : sequences) {
      if (seq.q_len == 0) continue;
      if (p.kv_heads == 0) {
        p.kv_heads = static_cast<int32_t>(seq.k->dim(1));
        p.kv_type = ElemTypeOf(seq.k->dtype());
      } else if (seq.k->dim(1) != p.kv_heads) {
        return absl::InvalidArgumentError(
            absl::StrCat("cuda AttendOwn: sequences have different kv_heads (", p.kv_heads, " and ",
                         seq.k->dim(1), ")"));
      }
    }
    if (p.kv_heads == 0) return absl::OkStatus();  // no sequence has rows
  }

  auto launch = [&]() -> absl::Status {
    if (p.num_sequences == 0) return absl::OkStatus();
    const cudaError_t error =
        context == nullptr ? cuda::LaunchAttendOwn(p, state->stream)
                           : cuda::LaunchAttendContext(p, context->k->raw(), context->v->raw(),
                                                       context->len, state->stream);
    p.num_sequences = 0;
    return Launched(op, error);
  };
  for (const AttentionSequence& seq : sequences) {
    // Rows of a sequence with none are not touched, as in any launch.
    if (seq.q_len == 0) continue;
    cuda::AttnSequence& d = p.sequences[p.num_sequences++];
    d = cuda::AttnSequence{};
    d.q_begin = static_cast<int32_t>(seq.q_begin);
    d.q_len = static_cast<int32_t>(seq.q_len);
    d.kv_len = static_cast<int32_t>(seq.kv_len);
    // Clamping to [0, kv_len] keeps the meaning (own indices and keys are all < kv_len) and
    // makes any int64 sentinel fit in int32.
    d.weighted_from = static_cast<int32_t>(std::clamp<int64_t>(seq.weighted_from, 0, seq.kv_len));
    d.context_from = static_cast<int32_t>(std::clamp<int64_t>(seq.context_from, 0, seq.kv_len));
    d.own_log_weight = seq.own_log_weight;
    if (context == nullptr) {
      d.k = seq.k->raw();
      d.v = seq.v->raw();
    }
    if (p.num_sequences == cuda::kMaxAttnSequences) {
      absl::Status s = launch();
      if (!s.ok()) return s;
    }
  }
  return launch();
}

absl::Status CudaBackend::AttendOwnImpl(const Tensor& q,
                                        absl::Span<const AttentionSequence> sequences, float scale,
                                        const AttentionState& out) {
  return Attend(q, sequences, nullptr, scale, out);
}

absl::Status CudaBackend::AttendContextImpl(const Tensor& q,
                                            absl::Span<const AttentionSequence> sequences,
                                            const AttentionContext& context, float scale,
                                            const AttentionState& out) {
  return Attend(q, sequences, &context, scale, out);
}

absl::Status CudaBackend::MergeStatesImpl(const AttentionState& into, const AttentionState& other,
                                          float other_log_weight) {
  MANYSHOT_CUDA_STATE(state);
  return Launched(
      "MergeStates",
      cuda::LaunchMergeStates(into.o.raw(), into.lse.data<float>(), other.o.raw(),
                              other.lse.data<float>(), ElemTypeOf(into.o.dtype()), into.o.dim(0),
                              into.o.dim(1), into.o.dim(2), other_log_weight, state->stream));
}

#undef MANYSHOT_CUDA_STATE

}  // namespace manyshot
