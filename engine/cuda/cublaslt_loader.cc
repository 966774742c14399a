// cuBLASLt, loaded on first use with dlopen instead of linked. Linking libcublasLt.so.13 into a
// process stopped civetweb (the /metrics server manyshot used before) from starting: CivetServer's
// constructor fails with "null context" in any process that merely links it, GPU or not (seen
// with a 10-line program on Debian 12 and CUDA 13.0). Loading it here, when the CUDA backend
// makes its first cuBLASLt call, keeps it out of every process that does not use the CUDA backend
// (and lets a CUDA build run on machines without the CUDA libraries). These definitions stand in
// for the library's own: same names and signatures (from cublasLt.h), forwarding to the loaded
// symbols; when the library cannot be loaded they return CUBLAS_STATUS_NOT_INITIALIZED.
#include <cublasLt.h>
#include <dlfcn.h>

namespace {

void* Library() {
  static void* handle = [] {
    for (const char* name : {"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13"}) {
      if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
    }
    return static_cast<void*>(nullptr);
  }();
  return handle;
}

template <typename Fn>
Fn Symbol(const char* name) {
  void* library = Library();
  return library == nullptr ? nullptr : reinterpret_cast<Fn>(dlsym(library, name));
}

}  // namespace

#define MANYSHOT_CUBLASLT(name, params, args)                       \
  extern "C" cublasStatus_t CUBLASWINAPI name params {              \
    static const auto fn = Symbol<decltype(&::name)>(#name);        \
    return fn == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : fn args; \
  }

MANYSHOT_CUBLASLT(cublasLtCreate, (cublasLtHandle_t * handle), (handle))
MANYSHOT_CUBLASLT(cublasLtDestroy, (cublasLtHandle_t handle), (handle))
MANYSHOT_CUBLASLT(cublasLtMatmul,
                  (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                   const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                   cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                   cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                   const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream),
                  (handle, desc, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d, d_desc, algo,
                   workspace, workspace_bytes, stream))
MANYSHOT_CUBLASLT(cublasLtMatmulAlgoGetHeuristic,
                  (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                   cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                   cublasLtMatmulPreference_t preference, int requested,
                   cublasLtMatmulHeuristicResult_t results[], int* returned),
                  (handle, desc, a, b, c, d, preference, requested, results, returned))
MANYSHOT_CUBLASLT(cublasLtMatmulDescCreate,
                  (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale),
                  (desc, compute, scale))
MANYSHOT_CUBLASLT(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
MANYSHOT_CUBLASLT(cublasLtMatmulDescSetAttribute,
                  (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                   size_t bytes),
                  (desc, attr, buf, bytes))
MANYSHOT_CUBLASLT(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
MANYSHOT_CUBLASLT(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
MANYSHOT_CUBLASLT(cublasLtMatmulPreferenceSetAttribute,
                  (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                   const void* buf, size_t bytes),
                  (pref, attr, buf, bytes))
MANYSHOT_CUBLASLT(cublasLtMatrixLayoutCreate,
                  (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols,
                   int64_t ld),
                  (layout, type, rows, cols, ld))
MANYSHOT_CUBLASLT(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
