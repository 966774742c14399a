// A SIMT emulator for checking CUDA kernels on machines without a GPU.
//
// The kernel sources (engine/cuda/*.cu) are compiled as plain C++ against the stand-in CUDA
// headers in testing/simt/include, and a launch runs every CUDA thread of a block as a fiber on the
// calling OS thread, block after block. A fiber runs until it reaches a point where real hardware
// would make it wait for others: __syncthreads() (every thread of the block), or a warp-collective
// instruction (__shfl_xor_sync, __syncwarp, mma.sync, ldmatrix: every lane of its warp). When all
// the threads a wait needs have arrived, the collective is executed once, as the PTX ISA defines
// it, from what every lane brought, and they go on. Shared memory is shared because the fibers of
// a block share one address space and blocks run one at a time.
//
// What this finds without a GPU: wrong fragment layouts and index arithmetic, missing or misplaced
// barriers and cp.async waits (copies land as late or as early as the ISA allows, and threads
// run in a chosen order: tests run the combinations), accesses past the end of device memory, reads
// of shared memory nobody wrote (the dynamic shared memory of every block starts as 0xff bytes, a
// NaN in f32, f16 and bf16), collectives some lanes of a warp never reach, __syncthreads() after
// some threads returned, misaligned ldmatrix / cp.async addresses, launches over the device's
// limits. With the stand-in runtime (memory, copies that check their direction, streams that run
// at once or, deferred, only when the host waits for them: a missing wait shows as stale data)
// and cuBLASLt (cublaslt.cc), the CUDA backend's host code runs on it too ("simt-cuda" in the
// engine tests). What it cannot find: anything about timing, streams really running at the same
// time, the real memory model, occupancy or speed, the real driver and library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

// CUDA's vector types and built-in variables, as the kernels use them.
struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}  // NOLINT: implicit as in CUDA
};

struct alignas(8) float2 {
  float x, y;
};

inline float2 make_float2(float x, float y) { return float2{x, y}; }

// Set by the scheduler before it resumes a thread.
extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;
constexpr int warpSize = 32;

namespace simt {

// What the emulated runtime reports and enforces (defaults: an H100's limits).
struct DeviceProps {
  int sms = 132;                    // cudaDevAttrMultiProcessorCount
  int blocks_per_sm = 2;            // occupancy reported for every kernel
  size_t default_smem = 48 * 1024;  // dynamic shared memory without the opt-in attribute
  size_t max_smem = 227 * 1024;     // largest opt-in per block
  size_t max_param_bytes = 32764;   // kernel parameters (CUDA 12.1+, Volta and later)
  // The emulated cuBLASLt's heuristic finds no algorithm with the bias epilogue (the real library
  // has none for some shapes and types), so callers' fallbacks can be tested.
  bool no_bias_epilogue_algorithm = false;
  // It finds none with a GELU or ReLU epilogue (with or without the bias).
  bool no_activation_epilogue_algorithm = false;
  // It finds no algorithm for any GEMM, so the error path of a GEMM that cannot be planned can be
  // tested.
  bool no_gemm_algorithm = false;
};
DeviceProps& Props();

// The order in which each pass of the scheduler runs the threads that can run.
enum class Order { kForward, kReverse };
void SetOrder(Order order);

// When a cp.async copy lands: as late as the ISA allows (when its thread waits for its group or
// returns), which exposes reads that do not wait; or at once, which exposes a refill of a buffer
// other threads may still be reading (a missing barrier before the copy is issued).
enum class CopyTiming { kAtWait, kAtIssue };
void SetCopyTiming(CopyTiming timing);

// Device memory (cudaMallocAsync, and the tests' buffers): `bytes` rounded up to 16 end exactly
// at an inaccessible page, so a kernel that reads or writes past the end of an allocation
// crashes the test instead of reading a neighbour; the bytes start as 0xff (a NaN in f32, f16
// and bf16, so what a kernel never wrote is recognisable). Freed memory stays inaccessible for
// a while (runtime.cc: the last 256 frees), so a use after free crashes too.
void* DeviceAlloc(size_t bytes);
void DeviceFree(void* p);

// Runs thread_body once for every thread of every block (blocks in x, y, z order). Returns ""
// or what went wrong (the first problem; the launch stops at a block that cannot go on).
std::string Launch(dim3 grid, dim3 block, size_t dynamic_smem,
                   const std::function<void()>& thread_body);

// Counters of the emulated instructions since the process started (tests check coverage).
struct Counters {
  int64_t launches = 0;
  int64_t blocks = 0;
  int64_t mma = 0;
  int64_t ldmatrix = 0;
  int64_t cp_async = 0;
  int64_t shuffles = 0;
  int64_t barriers = 0;
};
Counters& Count();

// ---- For the stand-in headers (inside a launch) ----

// __syncthreads().
void SyncThreads();

// A warp-collective instruction: every lane of the calling thread's warp calls it with the same
// `what`; when all have, resolve(data of lane 0, 1, ..., lanes) runs once and every call returns.
using Resolver = void (*)(void* const* lane_data, int lanes);
void WarpCollective(const char* what, void* data, Resolver resolve);

// The calling thread's lane in its warp.
int LaneId();

// The running block's dynamic shared memory.
unsigned char* DynamicSmem();
bool InDynamicSmem(const void* p, size_t bytes);

// cp.async: `bytes` to dst, of which the first src_bytes come from src and the rest are zeros,
// performed when the issuing thread waits for its group (cp.async.wait_group) or returns.
void CpAsync(void* dst, const void* src, size_t bytes, size_t src_bytes);
void CpAsyncCommit();
void CpAsyncWait(int pending_groups);

// Records a problem of the running launch (the first one is kept and returned by Launch).
void Fail(const std::string& why);

}  // namespace simt
