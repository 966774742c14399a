// cuBLASLt GEMM plans (cuda_backend_impl.h: GemmKey, GemmPlan): descriptors, layouts and the
// heuristic's algorithm for one row-major GEMM shape, and running it. In a file of its own so that
// a test can build it against the real cuBLASLt without the rest of the backend.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace manyshot {
namespace cuda_internal {

absl::Status CublasError(absl::string_view op, cublasStatus_t status, absl::string_view detail) {
  return absl::InternalError(absl::StrCat("cublasLt ", op, ": status ", static_cast<int>(status),
                                          detail.empty() ? "" : " (", detail,
                                          detail.empty() ? "" : ")"));
}

cudaDataType_t CudaDataTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kI32:
      return CUDA_R_32I;
    case DType::kF32:
      break;
  }
  return CUDA_R_32F;
}

uint32_t PointerAlignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  return static_cast<uint32_t>(std::min<uintptr_t>(256, a & (~a + 1)));
}

std::string GemmKey::ToString() const {
  const std::string x_type(DTypeName(in_type));
  const std::string y_type(DTypeName(out_type));
  const std::string w = layout == WeightLayout::kOutIn ? absl::StrFormat("W[%d,%d]^T", out, in)
                                                       : absl::StrFormat("W[%d,%d]", in, out);
  const std::string then = !activation                            ? ""
                           : *activation == GemmActivation::kRelu ? ", then ReLU"
                                                                  : ", then GELU";
  return absl::StrFormat("y[%d,%d] %s = x[%d,%d] %s * %s %s%s%s, alignment x/w/y %u/%u/%u%s", rows,
                         out, y_type, rows, in, x_type, w, x_type,
                         bias ? absl::StrFormat(" + bias[%d] %s", out, x_type) : "", then, align_x,
                         align_w, align_y, bias ? absl::StrFormat("/bias %u", align_bias) : "");
}

size_t GemmKeyHash::operator()(const GemmKey& k) const {
  size_t h = std::hash<int64_t>()(k.rows);
  auto mix = [&h](uint64_t v) {
    h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  mix(static_cast<uint64_t>(k.in));
  mix(static_cast<uint64_t>(k.out));
  mix(static_cast<uint64_t>(k.in_type) | static_cast<uint64_t>(k.out_type) << 8 |
      static_cast<uint64_t>(k.layout) << 16);
  mix(static_cast<uint64_t>(k.align_x) | static_cast<uint64_t>(k.align_w) << 16 |
      static_cast<uint64_t>(k.align_y) << 32 | static_cast<uint64_t>(k.align_bias) << 48);
  mix(k.bias ? 1 : 0);
  mix(k.activation ? 1 + static_cast<uint64_t>(*k.activation) : 0);
  return h;
}

// Row-major y = x op(W) as a column-major cuBLASLt problem: row-major y [rows, out] is
// column-major y^T [out, rows], so we compute D = y^T (m = out, n = rows, k = in) as
//   kOutIn: y^T = W x^T, where row-major W [out, in] is the column-major [in, out] matrix W^T
//           (ld in): A = that matrix with TRANSA = T;
//   kInOut: y^T = W^T x^T, where row-major W [in, out] is the column-major [out, in] matrix W^T
//           (ld out): A = that matrix, TRANSA = N;
// and B = x^T, row-major x [rows, in] read as column-major [in, rows] (ld in), TRANSB = N.
absl::StatusOr<std::unique_ptr<GemmPlan>> GemmPlan::Create(cublasLtHandle_t handle,
                                                           const GemmKey& key, const void* bias) {
  // The bias epilogue adds the bias in f32 before the output is rounded (one rounding, as against
  // two for a separate pass into a 16-bit output). Its bias vector has the output's dtype, so it
  // is used only when the bias has that dtype; for f32 output from 16-bit inputs a separate f32
  // pass rounds only once anyway. The heuristic takes no alignment preference for the bias, and
  // the epilogue's kernels read it in vectors (others saw misaligned-address faults below 16
  // bytes), so a bias that is not 16-byte aligned (a view into a larger tensor) is added apart.
  const bool bias_fits = key.bias && key.in_type == key.out_type && key.align_bias >= 16;
  // The activation follows the bias: in the epilogue only when the bias is there too (or there is
  // none). Each epilogue cuBLASLt has no kernel for falls back to the next: the caller does the
  // rest.
  std::vector<Epilogue> choices;
  if (key.activation && (!key.bias || bias_fits)) choices.push_back({bias_fits, true});
  if (bias_fits) choices.push_back({true, false});
  for (const Epilogue& epilogue : choices) {
    bool no_algorithm = false;
    absl::StatusOr<std::unique_ptr<GemmPlan>> plan =
        Build(handle, key, bias, epilogue, &no_algorithm);
    if (plan.ok() || !no_algorithm) return plan;
  }
  bool no_algorithm = false;
  return Build(handle, key, nullptr, Epilogue{}, &no_algorithm);
}

namespace {

cublasLtEpilogue_t EpilogueOf(bool bias, std::optional<GemmActivation> activation) {
  if (!activation) return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  // cuBLASLt's GELU is the tanh approximation (PyTorch's fused addmm-GELU falls back to
  // gelu(approximate="tanh") where the epilogue is not used), so it stands for GeluTanh.
  if (*activation == GemmActivation::kRelu) {
    return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  }
  return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GemmPlan>> GemmPlan::Build(cublasLtHandle_t handle,
                                                          const GemmKey& key, const void* bias,
                                                          Epilogue epilogue, bool* no_algorithm) {
  std::unique_ptr<GemmPlan> plan(new GemmPlan());
  plan->key_ = key;
  plan->bias_in_epilogue_ = epilogue.bias;
  plan->activation_in_epilogue_ = epilogue.activation;
  if (absl::Status s = plan->DescribeMatmul(epilogue, bias); !s.ok()) return s;
  if (absl::Status s = plan->DescribeLayouts(); !s.ok()) return s;
  if (absl::Status s = plan->PickAlgorithm(handle, no_algorithm); !s.ok()) return s;
  return plan;
}

absl::Status GemmPlan::Check(const char* op, cublasStatus_t status) const {
  return status == CUBLAS_STATUS_SUCCESS ? absl::OkStatus()
                                         : CublasError(op, status, key_.ToString());
}

absl::Status GemmPlan::DescribeMatmul(Epilogue epilogue, const void* bias) {
  // CUBLAS_COMPUTE_32F (not ..._FAST_TF32): f32 GEMMs stay full f32 for parity with the CPU.
  absl::Status s = Check("cublasLtMatmulDescCreate",
                         cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (!s.ok()) return s;
  // One descriptor attribute, passed with the size of its value's type (cuBLASLt checks it).
  auto set_desc = [&](const char* op, cublasLtMatmulDescAttributes_t attribute, const auto& value) {
    return Check(op, cublasLtMatmulDescSetAttribute(desc_, attribute, &value, sizeof(value)));
  };
  const cublasOperation_t trans_a = key_.layout == WeightLayout::kOutIn ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t trans_b = CUBLAS_OP_N;
  s = set_desc("cublasLtMatmulDescSetAttribute(TRANSA)", CUBLASLT_MATMUL_DESC_TRANSA, trans_a);
  if (!s.ok()) return s;
  s = set_desc("cublasLtMatmulDescSetAttribute(TRANSB)", CUBLASLT_MATMUL_DESC_TRANSB, trans_b);
  if (!s.ok()) return s;
  if (epilogue.bias || epilogue.activation) {
    const cublasLtEpilogue_t mode =
        EpilogueOf(epilogue.bias, epilogue.activation ? key_.activation : std::nullopt);
    s = set_desc("cublasLtMatmulDescSetAttribute(EPILOGUE)", CUBLASLT_MATMUL_DESC_EPILOGUE, mode);
    if (!s.ok()) return s;
  }
  if (!epilogue.bias) return absl::OkStatus();
  // The bias has length m (D's rows, our output features) and is broadcast over D's columns
  // (our rows). Set now because the heuristic reads its alignment from the pointer.
  return set_desc("cublasLtMatmulDescSetAttribute(BIAS_POINTER)", CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                  bias);
}

absl::Status GemmPlan::DescribeLayouts() {
  const uint64_t m = static_cast<uint64_t>(key_.out);
  const uint64_t n = static_cast<uint64_t>(key_.rows);
  const uint64_t k = static_cast<uint64_t>(key_.in);
  const cudaDataType_t in_type = CudaDataTypeOf(key_.in_type);
  const cudaDataType_t out_type = CudaDataTypeOf(key_.out_type);
  // Layouts describe the matrices as stored (before TRANSA/TRANSB).
  absl::Status s;
  if (key_.layout == WeightLayout::kOutIn) {
    s = Check("cublasLtMatrixLayoutCreate(A)",
              cublasLtMatrixLayoutCreate(&a_, in_type, k, m, static_cast<int64_t>(k)));
  } else {
    s = Check("cublasLtMatrixLayoutCreate(A)",
              cublasLtMatrixLayoutCreate(&a_, in_type, m, k, static_cast<int64_t>(m)));
  }
  if (!s.ok()) return s;
  s = Check("cublasLtMatrixLayoutCreate(B)",
            cublasLtMatrixLayoutCreate(&b_, in_type, k, n, static_cast<int64_t>(k)));
  if (!s.ok()) return s;
  return Check("cublasLtMatrixLayoutCreate(D)",
               cublasLtMatrixLayoutCreate(&d_, out_type, m, n, static_cast<int64_t>(m)));
}

absl::Status GemmPlan::PickAlgorithm(cublasLtHandle_t handle, bool* no_algorithm) {
  cublasLtMatmulPreference_t pref = nullptr;
  absl::Status s = Check("cublasLtMatmulPreferenceCreate", cublasLtMatmulPreferenceCreate(&pref));
  if (!s.ok()) return s;
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } pref_guard{pref};
  const uint64_t workspace = kWorkspaceBytes;
  s = Check("cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)",
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &workspace, sizeof(workspace)));
  if (!s.ok()) return s;
  // The actual alignments: tensors may be row views at any offset, and the default (256) would
  // let the heuristic pick kernels that assume more than these pointers have.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key_.align_w},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key_.align_x},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key_.align_y},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key_.align_y},
  };
  for (const auto& [attribute, value] : alignments) {
    s = Check("cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)",
              cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof(value)));
    if (!s.ok()) return s;
  }
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  s = Check(
      "cublasLtMatmulAlgoGetHeuristic",
      cublasLtMatmulAlgoGetHeuristic(handle, desc_, a_, b_, d_, d_, pref, 1, &result, &returned));
  if (!s.ok()) return s;
  if (returned < 1 || result.state != CUBLAS_STATUS_SUCCESS) {
    *no_algorithm = true;
    return CublasError("cublasLtMatmulAlgoGetHeuristic: no algorithm",
                       returned < 1 ? CUBLAS_STATUS_NOT_SUPPORTED : result.state, key_.ToString());
  }
  algo_ = result.algo;
  return absl::OkStatus();
}

GemmPlan::~GemmPlan() {
  if (d_ != nullptr) cublasLtMatrixLayoutDestroy(d_);
  if (b_ != nullptr) cublasLtMatrixLayoutDestroy(b_);
  if (a_ != nullptr) cublasLtMatrixLayoutDestroy(a_);
  if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
}

absl::Status GemmPlan::Run(cublasLtHandle_t handle, const void* x, const void* w, const void* bias,
                           void* y, void* workspace, cudaStream_t stream) {
  if (bias_in_epilogue_) {
    const cublasStatus_t s = cublasLtMatmulDescSetAttribute(
        desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (s != CUBLAS_STATUS_SUCCESS) {
      return CublasError("cublasLtMatmulDescSetAttribute(BIAS_POINTER)", s, key_.ToString());
    }
  }
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const cublasStatus_t s = cublasLtMatmul(handle, desc_, &alpha, w, a_, x, b_, &beta, y, d_, y, d_,
                                          &algo_, workspace, kWorkspaceBytes, stream);
  if (s != CUBLAS_STATUS_SUCCESS) {
    (void)cudaGetLastError();
    return CublasError("cublasLtMatmul", s, key_.ToString());
  }
  return absl::OkStatus();
}

}  // namespace cuda_internal
}  // namespace manyshot
