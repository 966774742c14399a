// The emulated CUDA runtime's state (include/cuda_runtime.h): last error, per-kernel shared
// memory limits, device allocations (each ending at a guard page).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "cuda_runtime.h"

namespace simt {
namespace {

std::mutex g_mu;

struct Mapping {
  void* base = nullptr;
  size_t length = 0;
  size_t used = 0;      // bytes from the handed-out address to the guard page
  bool pooled = false;  // from cudaMallocAsync: the default pool counts it (PoolBytes)
};

// The default memory pool's counters. Every block still gets a mapping of its own and is
// quarantined when freed (so use after free still faults); the pool only counts what a GPU's pool
// would hold: bytes of its blocks in use, and bytes freed and kept for reuse until a
// synchronization finds more than the release threshold reserved, or cudaMemPoolTrimTo.
struct PoolBytes {
  size_t used = 0;
  size_t kept = 0;
};
PoolBytes g_pool;  // guarded by g_mu

// Gives kept bytes back to the "driver" until at most `limit` bytes are reserved (callers hold
// g_mu).
void ReleasePoolAboveLocked(uint64_t limit) {
  if (g_pool.used + g_pool.kept <= limit) return;
  g_pool.kept = limit > g_pool.used ? static_cast<size_t>(limit - g_pool.used) : 0;
}

constexpr size_t kDeviceBytes = size_t{80} << 30;  // what cudaMemGetInfo reports as total
size_t g_allocated = 0;

std::map<void*, size_t>& PinnedBlocks() {
  static std::map<void*, size_t> blocks;
  return blocks;
}

// Whether [p, p + bytes) lies in one device allocation (callers hold g_mu).
bool IsDeviceRangeLocked(const void* p, size_t bytes);

// Refuses a call with `error`, saying why on stderr (the emulation's stand-in for a fault).
cudaError_t Refuse(cudaError_t error, const std::string& why) {
  std::fprintf(stderr, "emulated CUDA runtime: %s\n", why.c_str());
  return Record(error);
}

// Device allocations by the address handed out.
std::map<void*, Mapping>& Mappings() {
  static std::map<void*, Mapping> mappings;
  return mappings;
}

std::map<const void*, size_t>& SmemLimits() {
  static std::map<const void*, size_t> limits;
  return limits;
}

}  // namespace

cudaError_t& LastError() {
  static cudaError_t err = cudaSuccess;
  return err;
}

std::string& LastLaunchError() {
  static std::string text;
  return text;
}

cudaError_t Record(cudaError_t err) {
  if (err != cudaSuccess) LastError() = err;
  return err;
}

namespace {

std::atomic<cudaError_t> g_sticky{cudaSuccess};
std::atomic<bool> g_fault_at_next_launch{false};
std::atomic<bool> g_oom_at_next_allocation{false};
thread_local cudaError_t t_work_error = cudaSuccess;

// The device is dead from here on (the first fault is the one every call reports).
cudaError_t MakeSticky(cudaError_t err) {
  cudaError_t none = cudaSuccess;
  g_sticky.compare_exchange_strong(none, err);
  return Record(g_sticky.load());
}

// The error of work that just failed on this thread (SetWorkError, else a launch failure).
cudaError_t TakeWorkError() {
  const cudaError_t err = t_work_error != cudaSuccess ? t_work_error : cudaErrorLaunchFailure;
  t_work_error = cudaSuccess;
  return err;
}

}  // namespace

cudaError_t StickyError() { return g_sticky.load(); }

void SetWorkError(cudaError_t err) { t_work_error = err; }

void InjectFaultAtNextLaunch() { g_fault_at_next_launch = true; }

void InjectOutOfMemoryAtNextAllocation() { g_oom_at_next_allocation = true; }

bool OutOfMemoryInjected() {
  if (g_oom_at_next_allocation.exchange(false)) return true;
  static const char* file = std::getenv("SIMT_OOM_FILE");
  // Allocations since the file appeared: "after N" in it lets the first N of them succeed.
  static std::atomic<int64_t> since_file{0};
  if (file == nullptr || *file == '\0' || access(file, F_OK) != 0) {
    since_file = 0;
    return false;
  }
  int64_t allowed = 0;
  if (FILE* f = std::fopen(file, "r")) {
    long long n = 0;
    if (std::fscanf(f, "after %lld", &n) == 1) allowed = n;
    std::fclose(f);
  }
  return since_file.fetch_add(1) >= allowed;
}

bool TakeInjectedFault() {
  if (g_fault_at_next_launch.exchange(false)) return true;
  static const char* file = std::getenv("SIMT_FAULT_FILE");
  return file != nullptr && *file != '\0' && access(file, F_OK) == 0;
}

size_t MaxDynamicSmem(const void* fn) {
  std::lock_guard<std::mutex> lock(g_mu);
  const auto it = SmemLimits().find(fn);
  return it != SmemLimits().end() ? it->second : Props().default_smem;
}

cudaError_t SetMaxDynamicSmem(const void* fn, int bytes) {
  if (bytes < 0 || static_cast<size_t>(bytes) > Props().max_smem) {
    return Record(cudaErrorInvalidValue);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  SmemLimits()[fn] = static_cast<size_t>(bytes);
  return cudaSuccess;
}

namespace {

// Freed device memory stays reserved and inaccessible for the next kQuarantined frees, so work
// that still reads or writes it (a kernel queued on another stream than the one that freed it)
// crashes the test instead of reading whatever a later allocation put there.
constexpr size_t kQuarantined = 256;

void Quarantine(const Mapping& m) {
  // A fresh inaccessible mapping in place gives the pages back and keeps the addresses taken.
  void* same = mmap(m.base, m.length, PROT_NONE,
                    MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (same == MAP_FAILED) {
    munmap(m.base, m.length);
    return;
  }
  static std::deque<Mapping> quarantined;
  Mapping oldest;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    quarantined.push_back(m);
    if (quarantined.size() <= kQuarantined) return;
    oldest = quarantined.front();
    quarantined.pop_front();
  }
  munmap(oldest.base, oldest.length);
}

}  // namespace

void* DeviceAlloc(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t used = (bytes + 15) / 16 * 16;
  const size_t length = (used + page - 1) / page * page + page;  // + the guard page
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  auto* guard = static_cast<unsigned char*>(base) + length - page;
  mprotect(guard, page, PROT_NONE);
  unsigned char* p = guard - used;
  std::memset(p, 0xff, used);
  std::lock_guard<std::mutex> lock(g_mu);
  Mappings()[p] = Mapping{base, length, used};
  g_allocated += used;
  return p;
}

void* PoolAlloc(size_t bytes) {
  void* p = DeviceAlloc(bytes);
  if (p == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  Mapping& m = Mappings()[p];
  m.pooled = true;
  g_pool.used += m.used;
  g_pool.kept -= std::min(g_pool.kept, m.used);  // kept bytes are reused first
  return p;
}

void DeviceFree(void* p) {
  if (p == nullptr) return;
  Mapping m;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = Mappings().find(p);
    if (it == Mappings().end()) return;
    m = it->second;
    Mappings().erase(it);
    g_allocated -= m.used;
    if (m.pooled) {
      g_pool.used -= m.used;
      g_pool.kept += m.used;
    }
  }
  Quarantine(m);
}

namespace {

// Whether [p, p + bytes) lies in one block of `blocks` (by start address; size_of(value) is the
// block's size in bytes).
template <typename Map, typename SizeOf>
bool InOneBlock(const Map& blocks, const void* p, size_t bytes, SizeOf size_of) {
  auto it = blocks.upper_bound(const_cast<void*>(p));
  if (it == blocks.begin()) return false;
  --it;
  const auto* start = static_cast<const unsigned char*>(it->first);
  const auto* q = static_cast<const unsigned char*>(p);
  return q >= start && q + bytes <= start + size_of(it->second);
}

bool IsDeviceRangeLocked(const void* p, size_t bytes) {
  return InOneBlock(Mappings(), p, bytes, [](const Mapping& m) { return m.used; });
}

bool IsDeviceRange(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  return IsDeviceRangeLocked(p, bytes);
}

// Whether [p, p + bytes) lies in one cudaHostAlloc block.
bool IsPinnedRange(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  return InOneBlock(PinnedBlocks(), p, bytes, [](size_t size) { return size; });
}

}  // namespace
}  // namespace simt

// A stream: its queued work (deferred streams only).
struct CUstream_st {
  std::mutex running;  // held while its work runs, so two waiting threads keep its order
  std::deque<std::function<std::string()>> queue;  // under simt::g_streams_mu
  // While capturing: the work recorded instead of run, and whether a call the capture cannot
  // hold invalidated it (under simt::g_streams_mu).
  std::shared_ptr<std::vector<std::function<std::string()>>> capture;
  bool capture_broken = false;
  // Memory cudaMallocAsync gave the capture (a graph's allocation nodes), and which of it the
  // capture freed again (under simt::g_streams_mu).
  std::vector<void*> capture_allocations;
  std::vector<void*> capture_frees;
};

namespace simt {
// A graph's own memory (its allocation nodes): reserved when captured, kept at the same addresses
// for every launch, given back when the graph, its instances and their queued launches are gone.
struct GraphMemory {
  std::vector<void*> blocks;
  ~GraphMemory() {
    for (void* p : blocks) DeviceFree(p);
  }
};
}  // namespace simt

// A captured graph and its executable instance: the recorded work, in stream order.
struct CUgraph_st {
  std::vector<std::function<std::string()>> work;
  std::shared_ptr<simt::GraphMemory> memory;
};
struct CUgraphExec_st {
  std::shared_ptr<const std::vector<std::function<std::string()>>> work;
  std::shared_ptr<simt::GraphMemory> memory;
};

namespace simt {
namespace {

std::mutex g_streams_mu;
// Held shared while cudaDeviceSynchronize (or a call that waits like it) drains every stream, and
// exclusively by cudaStreamDestroy to delete one, so a stream is never deleted while drained.
std::shared_mutex g_stream_lifetimes;

// Every live stream, for cudaDeviceSynchronize; the legacy default stream (nullptr) is one too.
std::set<CUstream_st*>& Streams() {
  static auto* streams = new std::set<CUstream_st*>{};
  return *streams;
}

CUstream_st* Resolve(cudaStream_t stream) {
  static auto* legacy = [] {
    auto* s = new CUstream_st();
    std::lock_guard<std::mutex> lock(g_streams_mu);
    Streams().insert(s);
    return s;
  }();
  return stream != nullptr ? stream : legacy;
}

// Runs the stream's queued work, in order, until some work fails: the device is then dead
// (sticky), the rest is dropped, and every later call returns the failure's error.
cudaError_t Drain(CUstream_st* s) {
  std::lock_guard<std::mutex> running(s->running);
  for (;;) {
    std::function<std::string()> work;
    {
      std::lock_guard<std::mutex> lock(g_streams_mu);
      if (StickyError() != cudaSuccess) s->queue.clear();  // a dead context runs nothing
      if (s->queue.empty()) break;
      work = std::move(s->queue.front());
      s->queue.pop_front();
    }
    std::string failure = work();
    if (!failure.empty()) {
      LastLaunchError() = std::move(failure);
      MakeSticky(TakeWorkError());
    }
  }
  const cudaError_t sticky = StickyError();
  return sticky != cudaSuccess ? Record(sticky) : cudaSuccess;
}

cudaError_t DrainAll() {
  Resolve(nullptr);  // registers the legacy stream (it takes the lock itself)
  std::shared_lock<std::shared_mutex> alive(g_stream_lifetimes);
  std::vector<CUstream_st*> streams;
  {
    std::lock_guard<std::mutex> lock(g_streams_mu);
    streams.assign(Streams().begin(), Streams().end());
  }
  cudaError_t first = cudaSuccess;
  for (CUstream_st* s : streams) {
    const cudaError_t err = Drain(s);
    if (first == cudaSuccess) first = err;
  }
  return first;
}

}  // namespace

namespace {

std::atomic<bool>& DeferredFlag() {
  static std::atomic<bool> deferred = [] {
    const char* v = std::getenv("SIMT_DEFERRED_STREAMS");
    return v != nullptr && std::string(v) == "1";
  }();
  return deferred;
}

}  // namespace

bool DeferredStreams() { return DeferredFlag().load(); }

void SetDeferredStreams(bool deferred) {
  DrainAll();
  DeferredFlag() = deferred;
}

cudaError_t Submit(cudaStream_t stream, std::function<std::string()> work) {
  if (const cudaError_t sticky = StickyError(); sticky != cudaSuccess) return Record(sticky);
  {
    CUstream_st* s = Resolve(stream);
    std::lock_guard<std::mutex> lock(g_streams_mu);
    if (s->capture) {
      s->capture->push_back(std::move(work));
      return cudaSuccess;
    }
  }
  if (!DeferredStreams()) {
    std::string failure = work();
    if (failure.empty()) return cudaSuccess;
    LastLaunchError() = std::move(failure);
    return MakeSticky(TakeWorkError());
  }
  CUstream_st* s = Resolve(stream);
  std::lock_guard<std::mutex> lock(g_streams_mu);
  s->queue.push_back(std::move(work));
  return cudaSuccess;
}

bool IsCapturing(cudaStream_t stream) {
  if (stream == nullptr) return false;  // the legacy stream never captures
  std::lock_guard<std::mutex> lock(g_streams_mu);
  return stream->capture != nullptr;
}

cudaError_t BreakCapture(cudaStream_t stream, const char* call) {
  {
    std::lock_guard<std::mutex> lock(g_streams_mu);
    if (stream != nullptr) stream->capture_broken = true;
  }
  return Refuse(cudaErrorStreamCaptureUnsupported,
                std::string(call) + " on a stream that is capturing a graph");
}

namespace {
std::atomic<uint64_t> g_host_launches{0};
}  // namespace

uint64_t HostLaunches() { return g_host_launches.load(); }

void* CaptureAlloc(cudaStream_t stream, size_t bytes) {
  void* p = DeviceAlloc(bytes);
  if (p == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(g_streams_mu);
  stream->capture_allocations.push_back(p);
  return p;
}

bool CaptureFree(cudaStream_t stream, void* p) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  const auto& mine = stream->capture_allocations;
  if (std::find(mine.begin(), mine.end(), p) == mine.end()) return false;
  stream->capture_frees.push_back(p);
  return true;
}
void CountHostLaunch() { g_host_launches.fetch_add(1); }

void ResetDevice() {
  {
    std::lock_guard<std::mutex> lock(g_streams_mu);
    for (CUstream_st* s : Streams()) s->queue.clear();
  }
  g_sticky = cudaSuccess;
  g_fault_at_next_launch = false;
  LastError() = cudaSuccess;
}

}  // namespace simt

using simt::Record;
using simt::Refuse;

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorECCUncorrectable:
      return "uncorrectable ECC error encountered";
    case cudaErrorLaunchTimeout:
      return "the launch timed out and was terminated";
    case cudaErrorAssert:
      return "device-side assert triggered";
    case cudaErrorHardwareStackError:
      return "hardware stack error";
    case cudaErrorIllegalInstruction:
      return "an illegal instruction was encountered";
    case cudaErrorMisalignedAddress:
      return "misaligned address";
    case cudaErrorInvalidAddressSpace:
      return "operation not supported on global/shared address space";
    case cudaErrorInvalidPc:
      return "invalid program counter";
  }
  return "unknown error";
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : Refuse(cudaErrorInvalidDevice, "device other than 0");
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return Refuse(cudaErrorInvalidDevice, "device other than 0");
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "SIMT emulator");
  prop->totalGlobalMem = simt::kDeviceBytes;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = simt::Props().sms;
  prop->sharedMemPerBlockOptin = simt::Props().max_smem;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device != 0) return Refuse(cudaErrorInvalidDevice, "device other than 0");
  static int the_pool = 0;
  *pool = reinterpret_cast<cudaMemPool_t>(&the_pool);
  return cudaSuccess;
}

namespace simt {
std::atomic<uint64_t>& PoolReleaseThresholdValue() {
  static std::atomic<uint64_t> threshold{0};  // CUDA's default
  return threshold;
}
uint64_t PoolReleaseThreshold() { return PoolReleaseThresholdValue().load(); }

void ReleasePoolAboveThreshold() {
  std::lock_guard<std::mutex> lock(g_mu);
  ReleasePoolAboveLocked(PoolReleaseThreshold());
}
}  // namespace simt

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (pool == nullptr || value == nullptr) return Refuse(cudaErrorInvalidValue, "pool attribute");
  if (attr == cudaMemPoolAttrReleaseThreshold) {
    simt::PoolReleaseThresholdValue() = *static_cast<const uint64_t*>(value);
  }
  return cudaSuccess;
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (pool == nullptr || value == nullptr) return Refuse(cudaErrorInvalidValue, "pool attribute");
  std::lock_guard<std::mutex> lock(simt::g_mu);
  uint64_t v = 0;
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold:
      v = simt::PoolReleaseThreshold();
      break;
    case cudaMemPoolAttrReservedMemCurrent:
      v = simt::g_pool.used + simt::g_pool.kept;
      break;
    case cudaMemPoolAttrUsedMemCurrent:
      v = simt::g_pool.used;
      break;
  }
  *static_cast<uint64_t*>(value) = v;
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep) {
  if (pool == nullptr) return Refuse(cudaErrorInvalidValue, "cudaMemPoolTrimTo without a pool");
  if (const cudaError_t sticky = simt::StickyError(); sticky != cudaSuccess) return Record(sticky);
  std::lock_guard<std::mutex> lock(simt::g_mu);
  simt::ReleasePoolAboveLocked(min_bytes_to_keep);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  const cudaError_t err = simt::DrainAll();
  simt::ReleasePoolAboveThreshold();
  const cudaError_t sticky = simt::StickyError();
  return sticky != cudaSuccess ? Record(sticky) : err;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (const cudaError_t sticky = simt::StickyError(); sticky != cudaSuccess) return Record(sticky);
  std::lock_guard<std::mutex> lock(simt::g_mu);
  *total_bytes = simt::kDeviceBytes;
  *free_bytes = simt::kDeviceBytes - std::min(simt::kDeviceBytes, simt::g_allocated);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (const cudaError_t sticky = simt::StickyError(); sticky != cudaSuccess) return Record(sticky);
  *p = simt::OutOfMemoryInjected() ? nullptr : simt::DeviceAlloc(bytes);
  return *p != nullptr ? cudaSuccess : Record(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  simt::DrainAll();  // cudaFree synchronizes the device
  {
    std::lock_guard<std::mutex> lock(simt::g_mu);
    if (simt::Mappings().count(p) == 0) {
      return Refuse(cudaErrorInvalidValue, "cudaFree of an address cudaMalloc did not return");
    }
  }
  simt::DeviceFree(p);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  if (const cudaError_t sticky = simt::StickyError(); sticky != cudaSuccess) return Record(sticky);
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (*p == nullptr) return Record(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(simt::g_mu);
  simt::PinnedBlocks()[*p] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  simt::DrainAll();  // as cudaFree: no queued copy outlives the block
  {
    std::lock_guard<std::mutex> lock(simt::g_mu);
    if (simt::PinnedBlocks().erase(p) == 0) {
      return Refuse(cudaErrorInvalidValue,
                    "cudaFreeHost of an address cudaHostAlloc did not return");
    }
  }
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  if (const cudaError_t sticky = simt::StickyError(); sticky != cudaSuccess) return Record(sticky);
  *stream = new CUstream_st();
  std::lock_guard<std::mutex> lock(simt::g_streams_mu);
  simt::Streams().insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return Refuse(cudaErrorInvalidResourceHandle, "destroying stream 0");
  // The hardware finishes work queued before the destroy.
  const cudaError_t err = simt::Drain(stream);
  std::unique_lock<std::shared_mutex> deleting(simt::g_stream_lifetimes);
  {
    std::lock_guard<std::mutex> lock(simt::g_streams_mu);
    simt::Streams().erase(stream);
  }
  delete stream;
  return err;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (const cudaError_t sticky = simt::StickyError(); sticky != cudaSuccess) return Record(sticky);
  if (simt::IsCapturing(stream)) return simt::BreakCapture(stream, "cudaStreamSynchronize");
  const cudaError_t err = simt::Drain(simt::Resolve(stream));
  simt::ReleasePoolAboveThreshold();  // as a GPU's pool does at each synchronization
  return err;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const bool dst_device = simt::IsDeviceRange(dst, bytes);
  const bool src_device = simt::IsDeviceRange(src, bytes);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      ok = dst_device && !src_device;
      break;
    case cudaMemcpyDeviceToHost:
      ok = src_device && !dst_device;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = src_device && dst_device;
      break;
    case cudaMemcpyHostToHost:
      ok = !src_device && !dst_device;
      break;
    case cudaMemcpyDefault:
      break;
  }
  if (!ok) {
    return Refuse(cudaErrorInvalidValue,
                  "cudaMemcpyAsync of kind " + std::to_string(static_cast<int>(kind)) + " from " +
                      (src_device ? "device" : "host") + " to " + (dst_device ? "device" : "host") +
                      " memory (" + std::to_string(bytes) + " bytes)");
  }
  if (simt::IsCapturing(stream) && ((!src_device && !simt::IsPinnedRange(src, bytes)) ||
                                    (!dst_device && !simt::IsPinnedRange(dst, bytes)))) {
    return simt::BreakCapture(stream, "cudaMemcpyAsync of pageable host memory");
  }
  if (simt::DeferredStreams() && !src_device && !simt::IsPinnedRange(src, bytes)) {
    // From pageable memory the runtime stages the bytes before it returns: the caller may reuse
    // `src` at once.
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
    return simt::Submit(stream, [dst, staged] {
      std::memmove(dst, staged->data(), staged->size());
      return std::string();
    });
  }
  return simt::Submit(stream, [dst, src, bytes] {
    std::memmove(dst, src, bytes);
    return std::string();
  });
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!simt::IsDeviceRange(dst, bytes)) {
    return Refuse(cudaErrorInvalidValue, "cudaMemsetAsync outside device memory");
  }
  return simt::Submit(stream, [dst, value, bytes] {
    std::memset(dst, value, bytes);
    return std::string();
  });
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  if (p == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(simt::g_mu);
    if (simt::Mappings().count(p) == 0) {
      return Refuse(cudaErrorInvalidValue, "cudaFreeAsync of an address cudaMalloc did not return");
    }
  }
  // A capture frees only what it allocated: the graph keeps it for its launches.
  if (simt::IsCapturing(stream)) {
    if (simt::CaptureFree(stream, p)) return cudaSuccess;
    return simt::BreakCapture(stream, "cudaFreeAsync of memory allocated outside the capture");
  }
  // Queued work before it may still use the memory; the free runs after it.
  return simt::Submit(stream, [p] {
    simt::DeviceFree(p);
    return std::string();
  });
}

struct CUevent_st {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (const cudaError_t sticky = simt::StickyError(); sticky != cudaSuccess) return Record(sticky);
  *event = new CUevent_st();
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return simt::Submit(stream, [event] {
    event->at = std::chrono::steady_clock::now();
    event->recorded = true;
    return std::string();
  });
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->recorded || !end->recorded) {
    return Refuse(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an unrecorded event");
  }
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (const cudaError_t sticky = simt::StickyError(); sticky != cudaSuccess) return Record(sticky);
  if (stream == nullptr) {
    return Refuse(cudaErrorStreamCaptureImplicit, "capturing the legacy default stream");
  }
  std::lock_guard<std::mutex> lock(simt::g_streams_mu);
  if (stream->capture) return Refuse(cudaErrorInvalidValue, "the stream is already capturing");
  stream->capture = std::make_shared<std::vector<std::function<std::string()>>>();
  stream->capture_broken = false;
  stream->capture_allocations.clear();
  stream->capture_frees.clear();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (stream == nullptr || graph == nullptr) return Refuse(cudaErrorInvalidValue, "end capture");
  *graph = nullptr;
  std::shared_ptr<std::vector<std::function<std::string()>>> work;
  bool broken = false;
  auto memory = std::make_shared<simt::GraphMemory>();
  size_t unfreed = 0;
  {
    std::lock_guard<std::mutex> lock(simt::g_streams_mu);
    work = std::move(stream->capture);
    stream->capture = nullptr;
    broken = stream->capture_broken;
    memory->blocks = std::move(stream->capture_allocations);
    stream->capture_allocations.clear();
    unfreed = memory->blocks.size() - std::min(memory->blocks.size(), stream->capture_frees.size());
    stream->capture_frees.clear();
  }
  if (!work)
    return Refuse(cudaErrorInvalidValue, "cudaStreamEndCapture: the stream is not capturing");
  if (broken) return Record(cudaErrorStreamCaptureInvalidated);
  // A GPU lets an allocation outlive its graph (the caller frees it later); the emulator keeps
  // graph memory inside the graph only, and says so rather than leak or double-free it.
  if (unfreed != 0) {
    return Refuse(cudaErrorStreamCaptureInvalidated,
                  "an allocation made during the capture was not freed in it (the emulator keeps "
                  "graph allocations inside their graph)");
  }
  *graph = new CUgraph_st{std::move(*work), std::move(memory)};
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long) {  // NOLINT: CUDA's type
  if (exec == nullptr || graph == nullptr) return Refuse(cudaErrorInvalidValue, "instantiate");
  *exec = new CUgraphExec_st{
      std::make_shared<const std::vector<std::function<std::string()>>>(graph->work),
      graph->memory};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return Refuse(cudaErrorInvalidValue, "cudaGraphLaunch without a graph");
  if (simt::IsCapturing(stream)) return simt::BreakCapture(stream, "cudaGraphLaunch");
  simt::CountHostLaunch();
  // An injected fault hits a graph's launch as it hits a kernel's: the graph's kernels fault.
  if (simt::TakeInjectedFault()) {
    return simt::Submit(stream, [] {
      simt::SetWorkError(cudaErrorIllegalAddress);
      return std::string("injected fault: an illegal memory access in a graph");
    });
  }
  // The whole graph is one piece of stream work: its nodes run in the order they were captured,
  // and the first failure stops it (and kills the device, as any failed work does).
  return simt::Submit(stream, [work = exec->work, memory = exec->memory] {
    for (const auto& node : *work) {
      std::string failure = node();
      if (!failure.empty()) return failure;
    }
    return std::string();
  });
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
