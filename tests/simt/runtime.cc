// The emulated CUDA runtime's state (include/cuda_runtime.h): last error, per-kernel shared
// memory limits, device allocations (each ending at a guard page).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "cuda_runtime.h"

namespace simt {
namespace {

std::mutex g_mu;

struct Mapping {
  void* base = nullptr;
  size_t length = 0;
};

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
  Mappings()[p] = Mapping{base, length};
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
  }
  munmap(m.base, m.length);
}

}  // namespace simt
