// The emulated cuBLASLt (include/cublasLt.h): descriptors as plain structs, one "algorithm" that
// remembers the alignments the caller promised, and a host GEMM with cuBLASLt's column-major
// meaning: D (m x n) = alpha op(A) op(B) + beta C (+ bias[m] per column with a bias epilogue,
// then GELU or ReLU with those epilogues), accumulated in double and rounded once to D's type.
// GELU is the tanh approximation (what PyTorch's fused addmm-GELU assumes of the library), in
// double. Calls that the library would refuse are
// refused (CUBLAS_STATUS_INVALID_VALUE / NOT_SUPPORTED) and say why on stderr.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cublasLt.h"
#include "engine/core/dtype.h"
#include "testing/simt/simt.h"

struct cublasLtContext {
  int unused = 0;
};

struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
};

struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};

struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};

namespace {

cublasStatus_t Refuse(cublasStatus_t status, const char* why) {
  std::fprintf(stderr, "emulated cuBLASLt: %s\n", why);
  return status;
}

bool FloatType(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }

double Load(const void* base, cudaDataType_t t, int64_t i) {
  uint16_t h;
  switch (t) {
    case CUDA_R_16F:
      std::memcpy(&h, static_cast<const uint16_t*>(base) + i, 2);
      return manyshot::F16ToF32(h);
    case CUDA_R_16BF:
      std::memcpy(&h, static_cast<const uint16_t*>(base) + i, 2);
      return manyshot::BF16ToF32(h);
    default: {
      float f;
      std::memcpy(&f, static_cast<const float*>(base) + i, 4);
      return f;
    }
  }
}

void Store(void* base, cudaDataType_t t, int64_t i, double x) {
  const float f = static_cast<float>(x);
  uint16_t h;
  switch (t) {
    case CUDA_R_16F:
      h = manyshot::F32ToF16(f);
      std::memcpy(static_cast<uint16_t*>(base) + i, &h, 2);
      break;
    case CUDA_R_16BF:
      h = manyshot::F32ToBF16(f);
      std::memcpy(static_cast<uint16_t*>(base) + i, &h, 2);
      break;
    default:
      std::memcpy(static_cast<float*>(base) + i, &f, 4);
      break;
  }
}

uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return a == 0 ? 256u : static_cast<uint32_t>(std::min<uintptr_t>(256, a & (~a + 1)));
}

// The operand shapes a descriptor and its layouts describe, or an error text.
const char* CheckShapes(const cublasLtMatmulDescOpaque_t& desc,
                        const cublasLtMatrixLayoutOpaque_t& a,
                        const cublasLtMatrixLayoutOpaque_t& b,
                        const cublasLtMatrixLayoutOpaque_t& c,
                        const cublasLtMatrixLayoutOpaque_t& d) {
  const uint64_t m = d.rows, n = d.cols;
  const uint64_t a_m = desc.trans_a == CUBLAS_OP_N ? a.rows : a.cols;
  const uint64_t a_k = desc.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t b_k = desc.trans_b == CUBLAS_OP_N ? b.rows : b.cols;
  const uint64_t b_n = desc.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
  if (a_m != m || b_n != n || a_k != b_k) return "op(A), op(B) and D do not chain (m, n, k)";
  if (c.rows != d.rows || c.cols != d.cols || c.type != d.type) return "C and D differ";
  for (const cublasLtMatrixLayoutOpaque_t* l : {&a, &b, &c, &d}) {
    if (l->ld < static_cast<int64_t>(l->rows) || l->ld < 1) return "a leading dimension < rows";
  }
  if (a.type != b.type) return "A and B of different types";
  if (!FloatType(a.type) || !FloatType(d.type)) return "a type other than f32, f16 or bf16";
  if (d.type != CUDA_R_32F && d.type != a.type) return "a 16-bit D of another type than A";
  if (desc.compute != CUBLAS_COMPUTE_32F || desc.scale != CUDA_R_32F) {
    return "compute or scale type other than 32F";
  }
  return nullptr;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  *desc = new cublasLtMatmulDescOpaque_t();
  (*desc)->compute = compute;
  (*desc)->scale = scale;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t bytes) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      if (bytes != sizeof(cublasOperation_t)) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "size");
      cublasOperation_t op;
      std::memcpy(&op, buf, bytes);
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->trans_a : desc->trans_b) = op;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (bytes != sizeof(cublasLtEpilogue_t)) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "size");
      std::memcpy(&desc->epilogue, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (bytes != sizeof(void*)) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "size");
      std::memcpy(&desc->bias, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
  }
  return Refuse(CUBLAS_STATUS_INVALID_VALUE, "unknown descriptor attribute");
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes) {
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (bytes != sizeof(uint64_t)) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "size");
    std::memcpy(&pref->max_workspace, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES &&
      attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
    if (bytes != sizeof(uint32_t)) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "size");
    std::memcpy(&pref->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
  }
  return Refuse(CUBLAS_STATUS_INVALID_VALUE, "unknown preference attribute");
}

namespace {

bool EpilogueHasBias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_BIAS;
}

// Why the descriptor's epilogue cannot run, or nullptr.
const char* CheckEpilogue(const cublasLtMatmulDescOpaque_t& desc) {
  switch (desc.epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      break;
    default:
      return "an epilogue the emulator does not know";
  }
  return EpilogueHasBias(desc.epilogue) && desc.bias == nullptr
             ? "bias epilogue without a bias pointer"
             : nullptr;
}

// The epilogue's activation of v (after the bias).
double Activate(cublasLtEpilogue_t e, double v) {
  if (e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS) return v > 0.0 ? v : 0.0;
  if (e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS) {
    const double k = std::sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
  }
  return v;
}

}  // namespace

// One algorithm for every valid problem; it carries the alignments the caller promised (the
// pointers of every later call must have them, as a real kernel chosen for them assumes).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  *returned = 0;
  if (requested < 1) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "requested < 1");
  if (const char* why = CheckShapes(*desc, *a, *b, *c, *d)) {
    return Refuse(CUBLAS_STATUS_INVALID_VALUE, why);
  }
  if (const char* why = CheckEpilogue(*desc)) return Refuse(CUBLAS_STATUS_INVALID_VALUE, why);
  const bool activation =
      desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT && desc->epilogue != CUBLASLT_EPILOGUE_BIAS;
  if (simt::Props().no_gemm_algorithm ||
      (desc->epilogue == CUBLASLT_EPILOGUE_BIAS && simt::Props().no_bias_epilogue_algorithm) ||
      (activation && simt::Props().no_activation_epilogue_algorithm)) {
    return CUBLAS_STATUS_SUCCESS;  // none found: *returned stays 0
  }
  cublasLtMatmulHeuristicResult_t r{};
  for (int i = 0; i < 4; ++i) r.algo.data[i] = preference->align[i];
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  results[0] = r;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {

// D = alpha op(A) op(B) + beta C (+ bias), in double, for the checked shapes.
void Multiply(const cublasLtMatmulDescOpaque_t& desc, const void* a,
              const cublasLtMatrixLayoutOpaque_t& a_desc, const void* b,
              const cublasLtMatrixLayoutOpaque_t& b_desc, const void* c,
              const cublasLtMatrixLayoutOpaque_t& c_desc, void* d,
              const cublasLtMatrixLayoutOpaque_t& d_desc, float alpha_f, float beta_f) {
  const bool bias = EpilogueHasBias(desc.epilogue);
  const int64_t m = static_cast<int64_t>(d_desc.rows), n = static_cast<int64_t>(d_desc.cols);
  const int64_t k = static_cast<int64_t>(desc.trans_a == CUBLAS_OP_N ? a_desc.cols : a_desc.rows);
  // Element (i, j) of op(X) for a column-major X with leading dimension ld.
  auto at = [](const void* x, const cublasLtMatrixLayoutOpaque_t& l, cublasOperation_t op,
               int64_t i, int64_t j) {
    return op == CUBLAS_OP_N ? Load(x, l.type, i + j * l.ld) : Load(x, l.type, j + i * l.ld);
  };
  std::vector<double> column(static_cast<size_t>(m));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        acc += at(a, a_desc, desc.trans_a, i, p) * at(b, b_desc, desc.trans_b, p, j);
      }
      double v = alpha_f * acc;
      if (beta_f != 0.0f) v += beta_f * Load(c, c_desc.type, i + j * c_desc.ld);
      if (bias) v += Load(desc.bias, d_desc.type, i);
      column[static_cast<size_t>(i)] = Activate(desc.epilogue, v);
    }
    // C may be D: every element of the column is read before any is written.
    for (int64_t i = 0; i < m; ++i) Store(d, d_desc.type, i + j * d_desc.ld, column[i]);
  }
}

}  // namespace

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                              cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t,
                              cudaStream_t stream) {
  if (const char* why = CheckShapes(*desc, *a_desc, *b_desc, *c_desc, *d_desc)) {
    return Refuse(CUBLAS_STATUS_INVALID_VALUE, why);
  }
  if (algo == nullptr) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "no algorithm");
  const void* pointers[4] = {a, b, c, d};
  for (int i = 0; i < 4; ++i) {
    if (Alignment(pointers[i]) < algo->data[i]) {
      return Refuse(CUBLAS_STATUS_INVALID_VALUE,
                    "an operand less aligned than the heuristic was promised");
    }
  }
  // alpha and beta are host scalars, read at the call; the product runs in stream order.
  float alpha_f, beta_f;
  std::memcpy(&alpha_f, alpha, 4);
  std::memcpy(&beta_f, beta, 4);
  if (const char* why = CheckEpilogue(*desc)) return Refuse(CUBLAS_STATUS_INVALID_VALUE, why);
  if (!simt::IsCapturing(stream)) simt::CountHostLaunch();  // the library launches a kernel
  const cudaError_t queued =
      simt::Submit(stream, [op = *desc, al = *a_desc, bl = *b_desc, cl = *c_desc, dl = *d_desc, a,
                            b, c, d, alpha_f, beta_f] {
        Multiply(op, a, al, b, bl, c, cl, d, dl, alpha_f, beta_f);
        return std::string();
      });
  return queued == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
