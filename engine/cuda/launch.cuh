// Kernel launches as one C++ function call instead of `kernel<<<grid, block, smem, stream>>>(...)`.
//
// Why: `<<<...>>>` is nvcc syntax, not C++. The SIMT emulation build (testing/simt) compiles the
// kernel sources as plain C++ against stand-in CUDA headers and can only run a launch that goes
// through cudaLaunchKernel with a typed kernel pointer, from which it recovers the parameter
// types. Launch() is that one launch path, for nvcc (the runtime's `cudaLaunchKernel(const T*
// func, ...)` template) and the emulator alike, so the code the tests run is the code that ships.
// CUDA runtime headers only; included by .cu files (and their emulation builds) only.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

namespace manyshot::cuda {

// The outcome of a kernel launch: the error cudaLaunchKernel returned, else the one the launch
// left behind. Either way the runtime's last error is taken, so a failed launch is reported once,
// by its caller, and never again by the next launch's cudaGetLastError().
inline cudaError_t LaunchResult(cudaError_t launched) {
  const cudaError_t last = cudaGetLastError();
  return launched != cudaSuccess ? launched : last;
}

namespace launch_internal {

template <typename T>
struct Identity {
  using type = T;
};

// `value` converted to a kernel parameter's type implicitly, as the arguments of a call (and of
// `<<<...>>>`) are: no cast that the call would not make.
template <typename T>
T AsParam(typename Identity<T>::type value) {
  return value;
}

}  // namespace launch_internal

// Launches kernel(args...) on `stream`, as kernel<<<grid, block, smem, stream>>>(args...) would:
// each argument becomes the kernel's parameter type, the values are passed to cudaLaunchKernel,
// and the result is LaunchResult's (the launch error or the runtime's last error, consumed).
template <typename... P, typename... A>
cudaError_t Launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "Launch: one argument per kernel parameter");
  std::tuple<std::decay_t<P>...> params(
      launch_internal::AsParam<std::decay_t<P>>(std::forward<A>(args))...);
  // One slot more than there are parameters, so that a kernel without any still gets an array.
  std::array<void*, sizeof...(P) + 1> ptrs = std::apply(
      [](auto&... p) {
        return std::array<void*, sizeof...(P) + 1>{{static_cast<void*>(&p)..., nullptr}};
      },
      params);
  return LaunchResult(cudaLaunchKernel(kernel, grid, block, ptrs.data(), smem, stream));
}

namespace launch_internal {

// The dynamic shared-memory limit each (kernel, device) has been raised to.
inline std::mutex& SmemLimitMutex() {
  static std::mutex mu;
  return mu;
}
inline std::map<std::pair<const void*, int>, size_t>& SmemLimits() {
  static auto* limits = new std::map<std::pair<const void*, int>, size_t>();
  return *limits;
}

}  // namespace launch_internal

// Lets `kernel` launch on the current device with `bytes` of dynamic shared memory. Up to the
// default 48 KiB nothing is needed (and nothing is done: this runs before every launch). Above it
// the kernel's limit must be raised first (cudaFuncSetAttribute, which costs host time): it is
// raised, to `raise_to` when that is more (callers pass the most any launch of the kernel needs,
// so it is raised once), whenever `bytes` exceeds the limit already set for this (kernel, device),
// and never lowered. A failure is returned (and the runtime's last error taken), never
// remembered, so every launch that needs the limit reports it.
template <typename... P>
cudaError_t AllowDynamicSmem(void (*kernel)(P...), size_t bytes, size_t raise_to = 0) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return LaunchResult(err);
  const std::pair<const void*, int> key(reinterpret_cast<const void*>(kernel), device);
  std::lock_guard<std::mutex> lock(launch_internal::SmemLimitMutex());
  size_t& raised = launch_internal::SmemLimits()[key];
  if (raised >= bytes) return cudaSuccess;
  const size_t limit = raise_to > bytes ? raise_to : bytes;
  err = LaunchResult(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(limit)));
  if (err == cudaSuccess) raised = limit;
  return err;
}

}  // namespace manyshot::cuda
