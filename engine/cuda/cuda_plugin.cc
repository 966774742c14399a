#include "engine/cuda/cuda_plugin.h"

#include <cstring>

#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_reference.h"
#include "engine/cuda/device_fault.h"
#include "engine/cuda/memory_pool.h"

namespace manyshot {
namespace {

namespace fn = cuda_plugin_functions;

// Each name with a function of the type cuda_plugin.h gives it (checked here, at compile time).
template <typename Type>
void* Entry(Type* function) {
  return reinterpret_cast<void*>(function);
}

void* GetProcAddress(const char* name) {
  if (name == nullptr) return nullptr;
  struct Named {
    const char* name;
    void* function;
  };
  static const Named kFunctions[] = {
      {fn::kDeviceName, Entry<fn::DeviceName>(&CudaDeviceName)},
      {fn::kCopyBytesPerSecond, Entry<fn::CopyBytesPerSecond>(&MeasureDeviceCopyBytesPerSecond)},
      {fn::kGemmFlopsPerSecond, Entry<fn::GemmFlopsPerSecond>(&MeasureGemmFlopsPerSecond)},
      {fn::kPoolReservedBytes, Entry<fn::PoolReservedBytes>(&CudaPoolReservedBytes)},
  };
  for (const Named& f : kFunctions) {
    if (std::strcmp(f.name, name) == 0) return f.function;
  }
  return nullptr;
}

}  // namespace
}  // namespace manyshot

extern "C" __attribute__((visibility("default"))) const manyshot::CudaPlugin*
manyshot_cuda_plugin() {
  static const manyshot::CudaPlugin plugin = [] {
    manyshot::CudaPlugin p;
    p.abi_hash = MANYSHOT_CUDA_PLUGIN_ABI;
    p.device_count = &manyshot::CudaDeviceCount;
    p.create_backend = &manyshot::CreateCudaBackend;
    p.device_fault = &manyshot::CudaDeviceFault;
    p.set_pool_release_threshold = &manyshot::SetCudaPoolReleaseThreshold;
    p.get_proc_address = &manyshot::GetProcAddress;
    return p;
  }();
  return &plugin;
}
