// The ops T5 added to the backend seam on CUDA: GeGlu and Relu run the elementwise kernels
// (elementwise_kernels.cu); AttendBiased is not implemented on the GPU yet and returns
// UNIMPLEMENTED naming the op, so a model that needs it fails with a clear status at its first
// forward pass instead of computing something wrong. The CPU backend
// (engine/cpu/cpu_biased_attention.cc) is the reference for it.
#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_backend_impl.h"
#include "engine/cuda/elementwise_kernels.h"

namespace manyshot {

using cuda_internal::CudaCheck;
using cuda_internal::ElemTypeOf;

absl::Status CudaBackend::GeGluImpl(const Tensor& gate_up, const Tensor& out) {
  auto state = context_->State();
  if (!state.ok()) return state.status();
  return CudaCheck("GeGlu", cuda::LaunchGeGlu(gate_up.raw(), out.raw(), ElemTypeOf(out.dtype()),
                                              out.dim(0), out.dim(1), (*state)->stream));
}

absl::Status CudaBackend::ReluImpl(const Tensor& x) {
  auto state = context_->State();
  if (!state.ok()) return state.status();
  return CudaCheck("Relu",
                   cuda::LaunchRelu(x.raw(), ElemTypeOf(x.dtype()), x.numel(), (*state)->stream));
}

absl::Status CudaBackend::AttendBiasedImpl(const Tensor&, absl::Span<const BiasedAttentionSequence>,
                                           float, const AttentionState&) {
  return absl::UnimplementedError(
      "cuda AttendBiased: attention with an additive bias (T5's relative positions) is not "
      "implemented on the CUDA backend yet; run T5 models on the CPU backend (--backend=cpu)");
}

}  // namespace manyshot
