// Stand-in for the CUDA runtime header in the SIMT emulation build (testing/simt/simt.h): the
// qualifiers, built-ins, math functions and the part of the runtime API that the kernels of
// engine/cuda use, implemented on the emulator. Found before the toolkit's headers, which the
// emulation build never sees.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "testing/simt/simt.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) alignas(n)
// Static shared arrays: one object for all threads (blocks run one at a time).
#define __shared__ static

// ---- device built-ins ----

// The 16-byte vector type (CUDA's __builtin_align__(16) uint4): one word of the widest copies.
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

inline void __syncthreads() { simt::SyncThreads(); }

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu) simt::Fail("__syncwarp with a partial mask is not emulated");
  simt::WarpCollective("__syncwarp", nullptr, [](void* const*, int) {});
}

// __shfl_xor_sync of a 4-byte value: lane l gets the value of lane l ^ lane_mask.
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask) {
  static_assert(sizeof(T) == 4 && std::is_trivially_copyable_v<T>, "4-byte values only");
  struct Lane {
    uint32_t in, out;
    int lane_mask;
  } lane{0, 0, lane_mask};
  std::memcpy(&lane.in, &value, 4);
  if (mask != 0xffffffffu) simt::Fail("__shfl_xor_sync with a partial mask is not emulated");
  ++simt::Count().shuffles;
  simt::WarpCollective("__shfl_xor_sync", &lane, [](void* const* d, int lanes) {
    for (int l = 0; l < lanes; ++l) {
      auto* me = static_cast<Lane*>(d[l]);
      const int src = l ^ me->lane_mask;
      me->out = src < lanes ? static_cast<Lane*>(d[src])->in : me->in;
    }
  });
  T out;
  std::memcpy(&out, &lane.out, 4);
  return out;
}

inline float __int_as_float(int x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline int __float_as_int(float f) {
  int x;
  std::memcpy(&x, &f, 4);
  return x;
}

// CUDA's overloaded min / max of the device math library.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }

// ---- runtime API ----

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorECCUncorrectable = 214,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchTimeout = 702,
  cudaErrorAssert = 710,
  cudaErrorHardwareStackError = 714,
  cudaErrorIllegalInstruction = 715,
  cudaErrorMisalignedAddress = 716,
  cudaErrorInvalidAddressSpace = 717,
  cudaErrorInvalidPc = 718,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureImplicit = 906,
};

struct CUstream_st;
using cudaStream_t = CUstream_st*;

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrMemoryPoolsSupported = 115 };

namespace simt {

// The runtime's last error (cudaGetLastError returns and clears it) and the text of the last
// failed launch.
cudaError_t& LastError();
std::string& LastLaunchError();
cudaError_t Record(cudaError_t err);

// Sticky faults. Work that fails while it runs (a kernel's failure, an injected fault) leaves the
// device as a GPU's illegal address or launch failure leaves a CUDA context: dead. From then on
// every call that touches the device returns that error (cudaGetLastError too, without clearing
// it), queued work never runs, and only a new process recovers. StickyError() is that error or
// cudaSuccess; ResetDevice() is the new process, for tests that fault on purpose (it also drops
// whatever work is still queued).
cudaError_t StickyError();
void ResetDevice();
// Fault injection: the next kernel launch (InjectFaultAtNextLaunch), or every launch while the
// file named by SIMT_FAULT_FILE exists, is queued as work that fails with an illegal address, as
// a kernel reading outside its memory would on a GPU. Called by cudaLaunchKernel.
void InjectFaultAtNextLaunch();
bool TakeInjectedFault();
// The default pool's release threshold, as last set (cudaMemPoolSetAttribute). The emulated pool
// counts bytes as a GPU's would (cudaMemPoolGetAttribute: reserved = in use + freed and kept) but
// never reuses a block: each allocation is a fresh mapping, and cudaMemGetInfo counts live
// allocations only. At each cudaStreamSynchronize / cudaDeviceSynchronize the pool gives kept
// bytes back down to the threshold (ReleasePoolAboveThreshold); cudaMemPoolTrimTo gives them back
// down to its argument.
uint64_t PoolReleaseThreshold();
void ReleasePoolAboveThreshold();
// A cudaMallocAsync block: DeviceAlloc, counted by the pool.
void* PoolAlloc(size_t bytes);
// Out-of-memory injection: while the file named by SIMT_OOM_FILE exists, every device allocation
// (cudaMalloc, cudaMallocAsync) fails with cudaErrorMemoryAllocation, as on a full GPU (a file
// that reads "after N": all but the first N allocations since it appeared); unlike a fault it is
// not sticky. InjectOutOfMemoryAtNextAllocation fails only the next one (in-process
// tests: an allocation failing in the middle of a sequence of ops).
void InjectOutOfMemoryAtNextAllocation();
bool OutOfMemoryInjected();
// Work (a Submit callback) that fails may name its error here (on the thread that runs it);
// otherwise a failure is an unspecified launch failure.
void SetWorkError(cudaError_t err);

// Stream order. By default every stream runs its work at once, in program order. With
// SIMT_DEFERRED_STREAMS=1 in the environment ("deferred streams"), work on a stream (kernels,
// copies, memsets, stream-ordered frees, cuBLASLt matmuls, event records) only runs when the host
// waits for it: cudaStreamSynchronize of that stream, cudaDeviceSynchronize, and the calls that
// synchronize the device on hardware (cudaFree, cudaFreeHost, cudaStreamDestroy drains its
// stream). So code that reads a result before waiting, reuses a pinned buffer while a copy from
// it is queued, or hands a tensor to another thread's stream before its producer synchronized,
// sees stale data (device memory starts as 0xff bytes) as it might on a GPU. As the runtime
// specifies, a copy from pageable host memory takes the source bytes at the call; any other
// copy reads its source when it runs. A kernel's failure is reported by the next
// synchronization of its stream (cudaErrorLaunchFailure, the text in LastLaunchError()), and by
// every call after it (sticky faults, above).
bool DeferredStreams();
// Switches deferred streams on or off for the rest of the process (tests of the runtime itself);
// work queued so far runs first.
void SetDeferredStreams(bool deferred);
// Runs `work` on `stream` (at once, or queued when streams are deferred). `work` returns "" or
// what went wrong. At once: its failure is returned (cudaErrorLaunchFailure unless the work named
// another, SetWorkError) and is sticky. On a dead device nothing is run or queued.
cudaError_t Submit(cudaStream_t stream, std::function<std::string()> work);

// Stream capture and graphs (cudaStreamBeginCapture .. cudaGraphLaunch). While a stream captures,
// the work put on it (kernels, copies, memsets, cuBLASLt matmuls, event records) is recorded
// instead of run, with its arguments as they are at the call, as a CUDA graph's nodes keep them;
// cudaGraphLaunch puts the recorded work on a stream again, in order, as one launch. As on a GPU,
// a capture on the legacy stream is refused, and a synchronization or a free of memory allocated
// outside the capture fails with cudaErrorStreamCaptureUnsupported and invalidates the capture
// (cudaStreamEndCapture then fails with cudaErrorStreamCaptureInvalidated). cudaMallocAsync on a
// capturing stream is a graph allocation node, as since CUDA 11.4: the memory is the graph's, at
// the same address for every launch, and cudaFreeAsync of it in the capture is its free node.
// Unlike a GPU, the emulator refuses (at cudaStreamEndCapture) an allocation the capture did not
// free again.
bool IsCapturing(cudaStream_t stream);
// A graph allocation node's memory, recorded for the stream's capture (cudaMallocAsync).
void* CaptureAlloc(cudaStream_t stream, size_t bytes);
// Whether `p` was allocated by the stream's capture; if so, its free is recorded.
bool CaptureFree(cudaStream_t stream, void* p);
// Marks the stream's capture invalid for a call a capture cannot hold; returns the error to report.
cudaError_t BreakCapture(cudaStream_t stream, const char* call);
// Host-side launches: kernels launched outside a capture, plus graph launches (one each), since
// the process started. A GPU pays its launch overhead per such call.
uint64_t HostLaunches();
void CountHostLaunch();

// Dynamic shared memory a kernel may use (cudaFuncSetAttribute), by kernel address.
size_t MaxDynamicSmem(const void* fn);
cudaError_t SetMaxDynamicSmem(const void* fn, int bytes);

template <typename... A, size_t... I>
std::tuple<std::decay_t<A>...> ArgsTuple(void** args, std::index_sequence<I...>) {
  return std::tuple<std::decay_t<A>...>(*static_cast<std::decay_t<A>*>(args[I])...);
}

}  // namespace simt

inline cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int /*device*/) {
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = simt::Props().sms;
      return cudaSuccess;
    case cudaDevAttrMemoryPoolsSupported:
      *value = 1;
      return cudaSuccess;
  }
  return simt::Record(cudaErrorInvalidValue);
}

// A sticky fault is returned every time, and stays.
inline cudaError_t cudaGetLastError() {
  const cudaError_t err = simt::LastError();
  simt::LastError() = cudaSuccess;
  const cudaError_t sticky = simt::StickyError();
  return sticky != cudaSuccess ? sticky : err;
}

inline cudaError_t cudaPeekAtLastError() {
  const cudaError_t sticky = simt::StickyError();
  return sticky != cudaSuccess ? sticky : simt::LastError();
}

inline cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  if (const cudaError_t sticky = simt::StickyError(); sticky != cudaSuccess) {
    *p = nullptr;
    return simt::Record(sticky);
  }
  if (simt::IsCapturing(stream)) {  // an allocation node: the graph's own memory
    *p = simt::OutOfMemoryInjected() ? nullptr : simt::CaptureAlloc(stream, bytes);
    return *p != nullptr ? cudaSuccess : simt::Record(cudaErrorMemoryAllocation);
  }
  *p = simt::OutOfMemoryInjected() ? nullptr : simt::PoolAlloc(bytes);
  return *p != nullptr ? cudaSuccess : simt::Record(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* p);  // runtime.cc: refuses an address cudaMalloc did not return

cudaError_t cudaFreeAsync(void* p, cudaStream_t stream);  // runtime.cc: in stream order

template <typename... A>
cudaError_t cudaFuncSetAttribute(void (*fn)(A...), cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) {
    return simt::Record(cudaErrorInvalidValue);
  }
  return simt::SetMaxDynamicSmem(reinterpret_cast<const void*>(fn), value);
}

template <typename... A>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, void (*)(A...),
                                                          int /*threads*/, size_t /*smem*/) {
  *blocks = simt::Props().blocks_per_sm;
  return cudaSuccess;
}

// Runs the kernel on the emulator, at once or when its stream is synchronized (DeferredStreams).
template <typename... A>
cudaError_t cudaLaunchKernel(void (*fn)(A...), dim3 grid, dim3 block, void** args, size_t smem,
                             cudaStream_t stream) {
  constexpr size_t param_bytes = (size_t{0} + ... + sizeof(std::decay_t<A>));
  if (param_bytes > simt::Props().max_param_bytes) {
    simt::LastLaunchError() = "kernel parameters of " + std::to_string(param_bytes) + " bytes";
    return simt::Record(cudaErrorInvalidValue);
  }
  if (smem > simt::MaxDynamicSmem(reinterpret_cast<const void*>(fn))) {
    simt::LastLaunchError() =
        std::to_string(smem) + " bytes of dynamic shared memory over the " +
        std::to_string(simt::MaxDynamicSmem(reinterpret_cast<const void*>(fn))) +
        " the kernel may use";
    return simt::Record(cudaErrorInvalidValue);
  }
  if (!simt::IsCapturing(stream)) simt::CountHostLaunch();
  if (simt::TakeInjectedFault()) {
    return simt::Submit(stream, [] {
      simt::SetWorkError(cudaErrorIllegalAddress);
      return std::string("injected fault: an illegal memory access");
    });
  }
  // The parameters by value, as the hardware takes them at the launch.
  auto params = simt::ArgsTuple<A...>(args, std::index_sequence_for<A...>{});
  return simt::Submit(stream, [fn, grid, block, smem, params] {
    return simt::Launch(grid, block, smem, [&] { std::apply(fn, params); });
  });
}

// ---- host-side runtime API (testing/simt/runtime.cc): one device, the emulator; streams run their
// work at once or deferred (simt::DeferredStreams above). Memory copies check, at the call, that
// the pointers are where their kind says (device memory is what cudaMalloc and cudaMallocAsync
// returned). ----

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

// Their values in CUDA's driver_types.h. Reserved and used: uint64_t values (get only).
enum cudaMemPoolAttr {
  cudaMemPoolAttrReleaseThreshold = 4,
  cudaMemPoolAttrReservedMemCurrent = 5,
  cudaMemPoolAttrUsedMemCurrent = 7,
};
struct CUmemPoolHandle_st;
using cudaMemPool_t = CUmemPoolHandle_st*;

constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaHostAllocPortable = 1;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major;
  int minor;
  int multiProcessorCount;
  size_t sharedMemPerBlockOptin;
};

const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep);

enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1
};
struct CUgraph_st;
using cudaGraph_t = CUgraph_st*;
struct CUgraphExec_st;
using cudaGraphExec_t = CUgraphExec_st*;
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);  // NOLINT: CUDA's type
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream);

struct CUevent_st;
using cudaEvent_t = CUevent_st*;
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
// The host clock when the stream reaches the record.
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
