#include "engine/cuda/cuda_reference.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_backend_impl.h"
#include "engine/cuda/elementwise_kernels.h"

namespace manyshot {
namespace {

using cuda_internal::CudaCheck;

absl::Status CheckDevice(int device) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  if (device < 0 || device >= *count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " does not exist (", *count, " devices)"));
  }
  return absl::OkStatus();
}

// Owns what a measurement creates and releases it on every return path: first waits for its
// streams, then runs the cleanups in reverse order of creation.
class Resources {
 public:
  Resources() = default;
  Resources(const Resources&) = delete;
  Resources& operator=(const Resources&) = delete;
  ~Resources() {
    for (cudaStream_t s : streams_) (void)cudaStreamSynchronize(s);
    for (auto it = cleanups_.rbegin(); it != cleanups_.rend(); ++it) (*it)();
    (void)cudaGetLastError();
  }

  absl::StatusOr<cudaStream_t> Stream() {
    cudaStream_t s = nullptr;
    absl::Status status = CudaCheck("cudaStreamCreateWithFlags",
                                    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (!status.ok()) return status;
    streams_.push_back(s);
    cleanups_.push_back([s] { (void)cudaStreamDestroy(s); });
    return s;
  }
  absl::StatusOr<void*> Malloc(size_t bytes) {
    void* p = nullptr;
    absl::Status status = CudaCheck(absl::StrCat("cudaMalloc(", bytes, " bytes)"),
                                    cudaMalloc(&p, std::max<size_t>(bytes, 1)));
    if (!status.ok()) return status;
    cleanups_.push_back([p] { (void)cudaFree(p); });
    return p;
  }
  absl::StatusOr<cudaEvent_t> Event() {
    cudaEvent_t e = nullptr;
    absl::Status status = CudaCheck("cudaEventCreate", cudaEventCreate(&e));
    if (!status.ok()) return status;
    cleanups_.push_back([e] { (void)cudaEventDestroy(e); });
    return e;
  }
  void Defer(std::function<void()> cleanup) { cleanups_.push_back(std::move(cleanup)); }

 private:
  std::vector<cudaStream_t> streams_;
  std::vector<std::function<void()>> cleanups_;
};

// Runs `run` `warmup` times, then `iterations` times each between two events on `stream`;
// returns the median duration in seconds.
absl::StatusOr<double> MedianSeconds(Resources& res, cudaStream_t stream, int warmup,
                                     int iterations, const std::function<absl::Status()>& run) {
  for (int i = 0; i < warmup; ++i) {
    absl::Status s = run();
    if (!s.ok()) return s;
  }
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events;
  for (int i = 0; i < iterations; ++i) {
    absl::StatusOr<cudaEvent_t> start = res.Event();
    if (!start.ok()) return start.status();
    absl::StatusOr<cudaEvent_t> stop = res.Event();
    if (!stop.ok()) return stop.status();
    events.emplace_back(*start, *stop);
  }
  for (const auto& [start, stop] : events) {
    absl::Status s = CudaCheck("cudaEventRecord", cudaEventRecord(start, stream));
    if (!s.ok()) return s;
    s = run();
    if (!s.ok()) return s;
    s = CudaCheck("cudaEventRecord", cudaEventRecord(stop, stream));
    if (!s.ok()) return s;
  }
  absl::Status s = CudaCheck("cudaStreamSynchronize", cudaStreamSynchronize(stream));
  if (!s.ok()) return s;
  std::vector<double> seconds;
  for (const auto& [start, stop] : events) {
    float ms = 0.0f;
    s = CudaCheck("cudaEventElapsedTime", cudaEventElapsedTime(&ms, start, stop));
    if (!s.ok()) return s;
    seconds.push_back(static_cast<double>(ms) * 1e-3);
  }
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  const double median = n % 2 == 1 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  if (!(median > 0.0)) return absl::InternalError("cuda timing: zero elapsed time");
  return median;
}

// Fills `bytes` bytes with non-zero data: random f32 words, then 0x5a for any remainder.
absl::Status FillNonZero(void* p, size_t bytes, uint32_t seed, cudaStream_t stream) {
  const size_t words = bytes / 4;
  absl::Status s = CudaCheck(
      "fill",
      cuda::LaunchFillRandom(p, cuda::ElemType::kF32, static_cast<int64_t>(words), seed, stream));
  if (!s.ok() || bytes % 4 == 0) return s;
  return CudaCheck("cudaMemsetAsync",
                   cudaMemsetAsync(static_cast<char*>(p) + words * 4, 0x5a, bytes % 4, stream));
}

}  // namespace

absl::StatusOr<std::string> CudaDeviceName(int device) {
  absl::Status s = CheckDevice(device);
  if (!s.ok()) return s;
  cudaDeviceProp prop{};
  s = CudaCheck("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, device));
  if (!s.ok()) return s;
  return std::string(prop.name);
}

absl::StatusOr<double> MeasureDeviceCopyBytesPerSecond(int device, size_t bytes, int iterations) {
  if (bytes == 0 || iterations < 1) {
    return absl::InvalidArgumentError("copy measurement needs bytes > 0 and iterations >= 1");
  }
  absl::Status s = CheckDevice(device);
  if (!s.ok()) return s;
  s = CudaCheck("cudaSetDevice", cudaSetDevice(device));
  if (!s.ok()) return s;
  Resources res;
  absl::StatusOr<cudaStream_t> stream = res.Stream();
  if (!stream.ok()) return stream.status();
  absl::StatusOr<void*> src = res.Malloc(bytes);
  if (!src.ok()) return src.status();
  absl::StatusOr<void*> dst = res.Malloc(bytes);
  if (!dst.ok()) return dst.status();
  s = FillNonZero(*src, bytes, 0x1234u, *stream);
  if (!s.ok()) return s;
  s = FillNonZero(*dst, bytes, 0x5678u, *stream);
  if (!s.ok()) return s;
  absl::StatusOr<double> seconds = MedianSeconds(res, *stream, 3, iterations, [&] {
    return CudaCheck("cudaMemcpyAsync",
                     cudaMemcpyAsync(*dst, *src, bytes, cudaMemcpyDeviceToDevice, *stream));
  });
  if (!seconds.ok()) return seconds.status();
  return 2.0 * static_cast<double>(bytes) / *seconds;
}

absl::StatusOr<double> MeasureGemmFlopsPerSecond(int device, int64_t m, int64_t n, int64_t k,
                                                 DType dtype, int iterations) {
  if (m < 1 || n < 1 || k < 1 || iterations < 1) {
    return absl::InvalidArgumentError("GEMM measurement needs m, n, k >= 1 and iterations >= 1");
  }
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError("GEMM measurement needs an f32, f16 or bf16 dtype");
  }
  constexpr int64_t kMaxElements = int64_t{1} << 40;
  if (m > kMaxElements / k || n > kMaxElements / k || m > kMaxElements / n) {
    return absl::InvalidArgumentError("GEMM measurement shape too large");
  }
  absl::Status s = CheckDevice(device);
  if (!s.ok()) return s;
  s = CudaCheck("cudaSetDevice", cudaSetDevice(device));
  if (!s.ok()) return s;
  Resources res;
  absl::StatusOr<cudaStream_t> stream = res.Stream();
  if (!stream.ok()) return stream.status();
  const size_t es = DTypeSize(dtype);
  absl::StatusOr<void*> w = res.Malloc(static_cast<size_t>(m * k) * es);
  if (!w.ok()) return w.status();
  absl::StatusOr<void*> x = res.Malloc(static_cast<size_t>(n * k) * es);
  if (!x.ok()) return x.status();
  absl::StatusOr<void*> y = res.Malloc(static_cast<size_t>(m * n) * es);
  if (!y.ok()) return y.status();
  absl::StatusOr<void*> workspace = res.Malloc(cuda_internal::GemmPlan::kWorkspaceBytes);
  if (!workspace.ok()) return workspace.status();
  const cuda::ElemType type = cuda_internal::ElemTypeOf(dtype);
  s = CudaCheck("fill", cuda::LaunchFillRandom(*w, type, m * k, 11u, *stream));
  if (!s.ok()) return s;
  s = CudaCheck("fill", cuda::LaunchFillRandom(*x, type, n * k, 22u, *stream));
  if (!s.ok()) return s;

  cublasLtHandle_t lt = nullptr;
  const cublasStatus_t cs = cublasLtCreate(&lt);
  if (cs != CUBLAS_STATUS_SUCCESS) return cuda_internal::CublasError("cublasLtCreate", cs, "");
  res.Defer([lt] { cublasLtDestroy(lt); });
  cuda_internal::GemmKey key;
  key.rows = n;
  key.in = k;
  key.out = m;
  key.in_type = dtype;
  key.out_type = dtype;
  key.layout = WeightLayout::kOutIn;
  key.align_x = cuda_internal::PointerAlignment(*x);
  key.align_w = cuda_internal::PointerAlignment(*w);
  key.align_y = cuda_internal::PointerAlignment(*y);
  absl::StatusOr<std::unique_ptr<cuda_internal::GemmPlan>> plan =
      cuda_internal::GemmPlan::Create(lt, key);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<double> seconds = MedianSeconds(res, *stream, 3, iterations, [&] {
    return (*plan)->Run(lt, *x, *w, nullptr, *y, *workspace, *stream);
  });
  if (!seconds.ok()) return seconds.status();
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / *seconds;
}

}  // namespace manyshot
