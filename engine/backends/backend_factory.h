// Creating a backend by name, for every backend this build contains. The server, the benchmarks
// and the tests choose backends only through here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"

namespace manyshot {

enum class BackendKind { kCpu, kCuda };

// "cpu" or "cuda"; INVALID_ARGUMENT otherwise.
absl::StatusOr<BackendKind> ParseBackendKind(const std::string& name);
const char* BackendKindName(BackendKind kind);

// Whether this binary was built with the CUDA backend.
bool CudaBuilt();

// Whether a CUDA device can be used now: OK with the count, or why not ("not built", the driver's
// error, "no CUDA device").
absl::StatusOr<int> CudaDevicesAvailable();

// kCpu: `threads` compute threads (<= 0: every core), `device` must be 0. kCuda: device `device`;
// FAILED_PRECONDITION naming the reason when CUDA is not built or no GPU can be used.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, int device, int threads);

// OK, or the fault that made this process's GPU unusable (an illegal address, a launch failure,
// an ECC error: the CUDA context is lost and only a new process recovers). Never loads the CUDA
// plugin; OK in a process that created no CUDA backend.
absl::Status DeviceFault();

// The CUDA memory pool of `device` keeps at most `bytes` of freed memory
// (engine/cuda/memory_pool.h); FAILED_PRECONDITION before a CUDA backend exists.
absl::Status SetGpuPoolReleaseThreshold(int device, uint64_t bytes);

// A function of the CUDA plugin that serving does not need, by name (the names and types of
// engine/cuda/cuda_plugin.h's cuda_plugin_functions: benchmark references, diagnostics), loading
// the plugin if need be. FAILED_PRECONDITION when no plugin loads, NOT_FOUND naming `name` when
// the plugin has no such function.
absl::StatusOr<void*> CudaPluginFunction(const char* name);
template <typename Type>
absl::StatusOr<Type*> CudaPluginFunction(const char* name) {
  absl::StatusOr<void*> function = CudaPluginFunction(name);
  if (!function.ok()) return function.status();
  return reinterpret_cast<Type*>(*function);
}

// The server's default: CUDA when a device is available, else the CPU. `why` receives one line
// saying which and why.
BackendKind DefaultBackendKind(std::string* why);

}  // namespace manyshot
