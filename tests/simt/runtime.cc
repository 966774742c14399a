// The emulated CUDA runtime's state (include/cuda_runtime.h): last error, per-kernel shared
// memory limits, device allocations.
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "cuda_runtime.h"

namespace simt {
namespace {

std::mutex g_mu;

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
  // 256-byte aligned as cudaMalloc's blocks; at least one line so that 0 bytes is a real block.
  const size_t rounded = (bytes + 255) / 256 * 256 + 256;
  void* p = std::aligned_alloc(256, rounded);
  if (p != nullptr) std::memset(p, 0xff, rounded);
  return p;
}

void DeviceFree(void* p) { std::free(p); }

}  // namespace simt
