#include "engine/cuda/cuda_plugin.h"

#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_reference.h"
#include "engine/cuda/device_fault.h"
#include "engine/cuda/memory_pool.h"

extern "C" __attribute__((visibility("default"))) const manyshot::CudaPlugin*
manyshot_cuda_plugin() {
  static const manyshot::CudaPlugin plugin = [] {
    manyshot::CudaPlugin p;
    p.abi_hash = MANYSHOT_CUDA_PLUGIN_ABI;
    p.device_count = &manyshot::CudaDeviceCount;
    p.create_backend = &manyshot::CreateCudaBackend;
    p.device_fault = &manyshot::CudaDeviceFault;
    p.set_pool_release_threshold = &manyshot::SetCudaPoolReleaseThreshold;
    p.device_name = &manyshot::CudaDeviceName;
    p.copy_bytes_per_second = &manyshot::MeasureDeviceCopyBytesPerSecond;
    p.gemm_flops_per_second = &manyshot::MeasureGemmFlopsPerSecond;
    return p;
  }();
  return &plugin;
}
