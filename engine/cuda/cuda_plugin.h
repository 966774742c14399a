// The CUDA backend is a plugin: libmanyshot_cuda.so, loaded with dlopen() by
// engine/backends/backend_factory.cc when a process first asks for CUDA. It is never linked into an
// executable, because the CUDA runtime's and cuBLASLt's thread-local storage (4 KiB-aligned, and
// 92 KiB for cuBLASLt) then joins the static TLS block that glibc carves out of every thread's
// stack: a library that runs threads on small fixed stacks (civetweb, the /metrics server manyshot
// used before, on 100 KiB) crashed or failed to start in any process that linked them (with
// OpenBLAS's 60 KiB of TLS beside them). A dlopen()ed library's TLS is allocated per thread on
// first use instead.
//
// One C entry point hands out the plugin's functions; both sides are built from this tree by
// the same compiler against the same absl, so C++ types cross the boundary unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"

namespace manyshot {

struct CudaPlugin {
  // Raised whenever this struct changes shape (3: abi_hash, 4: device_fault and
  // set_pool_release_threshold, 5: the benchmark references behind get_proc_address, and
  // Backend::TrimMemory).
  static constexpr int kAbiVersion = 5;
  int abi_version = kAbiVersion;
  // The hash of the headers that define the types crossing the boundary (engine/core/*.h and
  // this one; engine/CMakeLists.txt computes it): a plugin built from other headers than the
  // program loading it is refused, whatever changed (Backend's layout is compiled into both).
  const char* abi_hash = nullptr;
  absl::StatusOr<int> (*device_count)() = nullptr;
  absl::StatusOr<std::unique_ptr<Backend>> (*create_backend)(int device) = nullptr;
  // OK, or the fault that killed the CUDA context (engine/cuda/device_fault.h).
  absl::Status (*device_fault)() = nullptr;
  // The device's memory pool keeps at most this many freed bytes (engine/cuda/memory_pool.h).
  absl::Status (*set_pool_release_threshold)(int device, uint64_t bytes) = nullptr;
  // A function that serving does not need (benchmark references, diagnostics), by name, as
  // ggml's get_proc_address: the names and types below. nullptr for a name the plugin does not
  // have. Adding one changes no layout, so it needs no new kAbiVersion.
  void* (*get_proc_address)(const char* name) = nullptr;
};

// The functions get_proc_address hands out, by name and type.
namespace cuda_plugin_functions {

// The device's name, e.g. "NVIDIA H100 80GB HBM3" (engine/cuda/cuda_reference.h).
inline constexpr char kDeviceName[] = "cuda_reference_device_name";
using DeviceName = absl::StatusOr<std::string>(int device);
// Same-run references for benchmarks (engine/cuda/cuda_reference.h).
inline constexpr char kCopyBytesPerSecond[] = "cuda_reference_copy_bytes_per_second";
using CopyBytesPerSecond = absl::StatusOr<double>(int device, size_t bytes, int iterations);
inline constexpr char kGemmFlopsPerSecond[] = "cuda_reference_gemm_flops_per_second";
using GemmFlopsPerSecond = absl::StatusOr<double>(int device, int64_t m, int64_t n, int64_t k,
                                                  DType dtype, int iterations);
// Bytes the device's memory pool holds from the driver (engine/cuda/memory_pool.h).
inline constexpr char kPoolReservedBytes[] = "cuda_memory_pool_reserved_bytes";
using PoolReservedBytes = absl::StatusOr<uint64_t>(int device);

}  // namespace cuda_plugin_functions

}  // namespace manyshot

// Exported by libmanyshot_cuda.so.
extern "C" const manyshot::CudaPlugin* manyshot_cuda_plugin();
