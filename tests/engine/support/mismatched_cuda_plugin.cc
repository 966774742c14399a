// A CUDA plugin of the current struct version whose ABI hash is not the program's, as a plugin
// built from other engine headers would be: the factory must refuse it (backend_seam_test.cc).
// It has no backend; nothing of it may be called.
#include "engine/cuda/cuda_plugin.h"

extern "C" __attribute__((visibility("default"))) const manyshot::CudaPlugin*
manyshot_cuda_plugin() {
  static const manyshot::CudaPlugin plugin = [] {
    manyshot::CudaPlugin p;
    p.abi_hash = "0000000000000000";
    return p;
  }();
  return &plugin;
}
