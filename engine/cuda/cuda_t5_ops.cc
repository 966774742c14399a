// The ops T5 and Gemma added to the backend seam on CUDA: GeGlu, Relu and Scale run the elementwise
// kernels (elementwise_kernels.cu). The third, AttendBiased, is in cuda_biased_attention.cc (the
// kernel of biased_attention_kernels.cu, which ALiBi attention shares).
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

absl::Status CudaBackend::ScaleImpl(const Tensor& x, float factor) {
  auto state = context_->State();
  if (!state.ok()) return state.status();
  return CudaCheck("Scale", cuda::LaunchScale(x.raw(), ElemTypeOf(x.dtype()), x.numel(), factor,
                                              (*state)->stream));
}

}  // namespace manyshot
