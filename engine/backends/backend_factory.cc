#include "engine/backends/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#if MANYSHOT_CUDA_ENABLED
#include "engine/cuda/cuda_backend.h"
#endif

namespace manyshot {

absl::StatusOr<BackendKind> ParseBackendKind(const std::string& name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend \"", name, "\": expected cpu or cuda"));
}

const char* BackendKindName(BackendKind kind) {
  return kind == BackendKind::kCuda ? "cuda" : "cpu";
}

bool CudaBuilt() { return MANYSHOT_CUDA_ENABLED != 0; }

absl::StatusOr<int> CudaDevicesAvailable() {
#if MANYSHOT_CUDA_ENABLED
  return CudaDeviceCount();
#else
  return absl::FailedPreconditionError(
      "this build has no CUDA backend (configure with nvcc available, MANYSHOT_CUDA=ON)");
#endif
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, int device, int threads) {
  if (device < 0) return absl::InvalidArgumentError(absl::StrCat("device ", device, " < 0"));
  if (kind == BackendKind::kCpu) {
    if (device != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the cpu backend has one device (0), not ", device));
    }
    return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(threads));
  }
  auto count = CudaDevicesAvailable();
  if (!count.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the cuda backend cannot start: ", count.status().message()));
  }
#if MANYSHOT_CUDA_ENABLED
  return CreateCudaBackend(device);
#else
  return absl::InternalError("unreachable: CUDA devices without a CUDA build");
#endif
}

BackendKind DefaultBackendKind(std::string* why) {
  auto count = CudaDevicesAvailable();
  if (count.ok() && *count > 0) {
    if (why) *why = absl::StrCat(*count, " CUDA device(s) found");
    return BackendKind::kCuda;
  }
  if (why) *why = absl::StrCat("no usable GPU: ", count.status().message());
  return BackendKind::kCpu;
}

}  // namespace manyshot
