// The CUDA backend: stream-ordered pool memory, cuBLASLt GEMMs and the kernels of
// elementwise_kernels.cu and attention_kernels.cu (ALiBi attention and AttendBiased go through
// biased_attention_kernels.cu, from cuda_biased_attention.cc: the flash kernel's bias variants, or
// the scalar biased kernel where those do not apply), with one stream per host thread (see
// engine/core/backend.h, "Concurrency", and cuda_backend_impl.h).
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
#include "engine/cuda/device_fault.h"
#include "engine/cuda/elementwise_kernels.h"

namespace manyshot {
namespace cuda_internal {
namespace {

constexpr size_t kAllocationGranule = 256;

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
  if (IsStickyError(error)) {
    // The context is dead: nothing to clear, and every later call fails the same way. Recorded
    // for the server, which stops serving and exits (CudaDeviceFault).
    RecordDeviceFault(op, error);
    return absl::InternalError(absl::StrCat("cuda ", op, ": ", cudaGetErrorString(error),
                                            " (device fault: the CUDA context is lost)"));
  }
  (void)cudaGetLastError();  // clear it, so a later launch check does not report it again
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

ThreadState::~ThreadState() {
  if (stream != nullptr) (void)cudaStreamSynchronize(stream);
  plans.clear();
  plan_lru.clear();
  if (lt != nullptr) cublasLtDestroy(lt);
  if (workspace != nullptr) (void)cudaFreeAsync(workspace, stream);  // before the stream goes
  if (stream != nullptr) (void)cudaStreamDestroy(stream);
  (void)cudaGetLastError();  // teardown errors (e.g. at process exit) have nowhere to go
}

absl::Status ThreadState::EnsureGemm() {
  if (lt != nullptr) return absl::OkStatus();
  // From the stream-ordered pool, on this state's stream (which every GEMM using it runs on), so
  // it counts against the same memory as the tensors and goes back to the pool, not the driver.
  void* ws = nullptr;
  absl::Status s = CudaCheck("cudaMallocAsync(cuBLASLt workspace)",
                             cudaMallocAsync(&ws, GemmPlan::kWorkspaceBytes, stream));
  if (!s.ok()) return s;
  cublasLtHandle_t handle = nullptr;
  const cublasStatus_t cs = cublasLtCreate(&handle);
  if (cs != CUBLAS_STATUS_SUCCESS) {
    (void)cudaFreeAsync(ws, stream);
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
  if (error != cudaSuccess) {
    // The caller returns on this error with ops still queued on its stream that read tensors it
    // is about to drop; another thread may drop the last reference and free them on its own
    // stream, which does not wait for ours. Wait here, so nothing of this thread is in flight.
    (void)cudaGetLastError();
    const cudaError_t drained = cudaStreamSynchronize(state->stream);
    if (drained != cudaSuccess)
      return CudaError("cudaStreamSynchronize after a failed allocation", drained);
  }
  if (error == cudaErrorMemoryAllocation) {
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

absl::Status CudaBackend::AddRmsNormImpl(const Tensor& x, const Tensor& y, const Tensor& weight,
                                         float eps, const Tensor& out) {
  MANYSHOT_CUDA_STATE(state);
  const int64_t n = cuda_internal::LastDim(x);
  if (n == 0) return absl::OkStatus();
  return Launched("AddRmsNorm",
                  cuda::LaunchAddNorm(x.raw(), y.raw(), weight.raw(), nullptr, out.raw(),
                                      ElemTypeOf(x.dtype()), x.numel() / n, n, eps, state->stream));
}

absl::Status CudaBackend::AddLayerNormImpl(const Tensor& x, const Tensor& y, const Tensor& weight,
                                           const Tensor& bias, float eps, const Tensor& out) {
  MANYSHOT_CUDA_STATE(state);
  const int64_t n = cuda_internal::LastDim(x);
  if (n == 0) return absl::OkStatus();
  return Launched("AddLayerNorm",
                  cuda::LaunchAddNorm(x.raw(), y.raw(), weight.raw(), bias.raw(), out.raw(),
                                      ElemTypeOf(x.dtype()), x.numel() / n, n, eps, state->stream));
}

absl::Status CudaBackend::LinearImpl(const Tensor& x, const Tensor& weight, WeightLayout layout,
                                     const Tensor& bias, const Tensor& out) {
  return RunLinear(x, weight, layout, bias, std::nullopt, out);
}

absl::Status CudaBackend::LinearActivationImpl(const Tensor& x, const Tensor& weight,
                                               WeightLayout layout, const Tensor& bias,
                                               GemmActivation activation, const Tensor& out) {
  return RunLinear(x, weight, layout, bias, activation, out);
}

// One GEMM with whatever of the bias and the activation its cuBLASLt epilogue takes; the rest in
// passes after it.
absl::Status CudaBackend::RunLinear(const Tensor& x, const Tensor& weight, WeightLayout layout,
                                    const Tensor& bias, std::optional<GemmActivation> activation,
                                    const Tensor& out) {
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
  key.activation = activation;
  absl::StatusOr<cuda_internal::GemmPlan*> plan = state->Plan(key, bias_ptr);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<void*> workspace = state->GemmWorkspace();
  if (!workspace.ok()) return workspace.status();
  absl::Status s = (*plan)->Run(state->lt, x.raw(), weight.raw(), bias_ptr, out.raw(), *workspace,
                                state->stream);
  if (!s.ok()) return s;
  if (bias.defined() && !(*plan)->bias_in_epilogue()) {
    // A separate pass adding the bias in f32 (f32 out: the CPU's order, GEMM then += bias; a
    // 16-bit out only lands here when cuBLASLt has no bias-epilogue kernel, and is then rounded
    // twice).
    s = Launched("Linear bias",
                 cuda::LaunchAddBias(out.raw(), ElemTypeOf(out.dtype()), bias.raw(),
                                     ElemTypeOf(bias.dtype()), rows, out_features, state->stream));
    if (!s.ok()) return s;
  }
  if (!activation || (*plan)->activation_in_epilogue()) return absl::OkStatus();
  return *activation == GemmActivation::kRelu ? ReluImpl(out) : GeluTanhImpl(out);
}

absl::Status CudaBackend::RopeImpl(const Tensor& x, const Tensor& positions,
                                   const RopeTable& table) {
  const int64_t tokens = x.dim(0);
  const int64_t heads = x.dim(1);
  const int64_t dim = x.dim(2);
  if (dim / 2 > cuda::kMaxRopeHalf) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda Rope: head_dim ", dim, " exceeds ", 2 * cuda::kMaxRopeHalf));
  }
  if (heads * dim > kInt32Max) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda Rope: ", heads, " heads of ", dim, " exceed 2^31 elements per row"));
  }
  MANYSHOT_CUDA_STATE(state);
  return Launched("Rope", cuda::LaunchRope(x.raw(), ElemTypeOf(x.dtype()), tokens, heads, dim,
                                           positions.data<int32_t>(), table.inv_freq.data(),
                                           table.attention_factor, state->stream));
}

absl::Status CudaBackend::GeluTanhImpl(const Tensor& x) {
  MANYSHOT_CUDA_STATE(state);
  return Launched("GeluTanh",
                  cuda::LaunchGeluTanh(x.raw(), ElemTypeOf(x.dtype()), x.numel(), state->stream));
}

absl::Status CudaBackend::GeluErfImpl(const Tensor& x) {
  MANYSHOT_CUDA_STATE(state);
  return Launched("GeluErf",
                  cuda::LaunchGeluErf(x.raw(), ElemTypeOf(x.dtype()), x.numel(), state->stream));
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
    // kernel rather than cudaMemcpy2DAsync, expected to be faster for many short rows (a target
    // for tools/gpu's run, not measured: no GPU has run this code).
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

namespace {

// q's shape as the attention launches take it: 32-bit row and head counts, head_dim in [1, 256].
absl::Status CheckAttendShape(const char* op, const Tensor& q) {
  if (q.dim(0) > kInt32Max || q.dim(1) > kInt32Max) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda ", op, ": q ", q.ShapeString(), " exceeds 32-bit row/head counts"));
  }
  if (q.dim(2) < 1 || q.dim(2) > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda ", op, ": head_dim ", q.dim(2), " is outside [1, 256]"));
  }
  return absl::OkStatus();
}

// A context without keys: every row of every sequence saw nothing (o = 0, lse = -inf).
absl::Status FillEmptyContext(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                              const AttentionState& out, cudaStream_t stream) {
  const int64_t heads = q.dim(1);
  // The row size from the shape, not RowBytes(): q and o may have no rows at all.
  const size_t o_row = static_cast<size_t>(heads * q.dim(2)) * DTypeSize(out.o.dtype());
  for (const AttentionSequence& seq : sequences) {
    if (seq.q_len == 0) continue;
    absl::Status s =
        CudaCheck("AttendContext cudaMemsetAsync",
                  cudaMemsetAsync(static_cast<std::byte*>(out.o.raw()) + seq.q_begin * o_row, 0,
                                  static_cast<size_t>(seq.q_len) * o_row, stream));
    if (!s.ok()) return s;
    s = Launched(
        "AttendContext fill",
        cuda::LaunchFill(out.lse.data<float>() + seq.q_begin * heads, cuda::ElemType::kF32,
                         seq.q_len * heads, -std::numeric_limits<float>::infinity(), stream));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// What every launch of one Attend call shares: q, o, lse, the scale and the K/V heads and type
// (own K/V: one kv_heads per launch; kv_heads stays 0 when no sequence has rows).
absl::Status FillAttnParams(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                            const AttentionContext* context, float scale, const AttentionState& out,
                            cuda::AttnParams& p) {
  p.q = q.raw();
  p.q_type = ElemTypeOf(q.dtype());
  p.tokens = static_cast<int32_t>(q.dim(0));
  p.heads = static_cast<int32_t>(q.dim(1));
  p.head_dim = static_cast<int32_t>(q.dim(2));
  p.scale = scale;
  p.softcap = sequences.empty() ? 0.0f : sequences.front().logit_softcap;
  p.o = out.o.raw();
  p.o_type = ElemTypeOf(out.o.dtype());
  p.lse = out.lse.data<float>();
  if (context != nullptr) {
    p.kv_heads = static_cast<int32_t>(context->k->dim(1));
    p.kv_type = ElemTypeOf(context->k->dtype());
    return absl::OkStatus();
  }
  // Own K/V: the front checked every sequence's k/v.
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
  return absl::OkStatus();
}

// The kernel's descriptor of one sequence (own K/V pointers when `own`).
cuda::AttnSequence DescribeSequence(const AttentionSequence& seq, bool own) {
  cuda::AttnSequence d{};
  d.q_begin = static_cast<int32_t>(seq.q_begin);
  d.q_len = static_cast<int32_t>(seq.q_len);
  d.kv_len = static_cast<int32_t>(seq.kv_len);
  // Clamping to [0, kv_len] keeps the meaning (own indices and keys are all < kv_len) and makes
  // any int64 sentinel fit in int32.
  d.weighted_from = static_cast<int32_t>(std::clamp<int64_t>(seq.weighted_from, 0, seq.kv_len));
  d.context_from = static_cast<int32_t>(std::clamp<int64_t>(seq.context_from, 0, seq.kv_len));
  d.own_log_weight = seq.own_log_weight;
  if (own) {
    d.k = seq.k->raw();
    d.v = seq.v->raw();
  }
  return d;
}

}  // namespace

absl::Status CudaBackend::Attend(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                                 const AttentionContext* context, float scale,
                                 const AttentionState& out) {
  const char* op = context == nullptr ? "AttendOwn" : "AttendContext";
  if (absl::Status s = CheckAttendShape(op, q); !s.ok()) return s;
  MANYSHOT_CUDA_STATE(state);
  if (context != nullptr && context->len == 0) {
    return FillEmptyContext(q, sequences, out, state->stream);
  }
  if (!sequences.empty() && sequences.front().alibi_slopes != nullptr) {
    return AttendAlibi(q, sequences, context, scale, out, state->stream);
  }
  // ~5 KiB of descriptors: on the heap rather than the caller's stack.
  auto params = std::make_unique<cuda::AttnParams>();
  cuda::AttnParams& p = *params;
  if (absl::Status s = FillAttnParams(q, sequences, context, scale, out, p); !s.ok()) return s;
  if (p.kv_heads == 0) return absl::OkStatus();  // no sequence has rows
  // Sequences go in launches of at most kMaxAttnSequences.
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
    p.sequences[p.num_sequences++] = DescribeSequence(seq, context == nullptr);
    if (p.num_sequences == cuda::kMaxAttnSequences) {
      if (absl::Status s = launch(); !s.ok()) return s;
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
