// The ops T5 added to the backend seam (GeGlu, Relu, AttendBiased) are not implemented on CUDA
// yet: each returns UNIMPLEMENTED naming the op, so a T5 model on this backend fails with a clear
// status at its first forward pass instead of computing something wrong. The CPU backend
// (engine/cpu/cpu_glu_relu.cc, engine/cpu/cpu_biased_attention.cc) is the reference for them.
#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace manyshot {
namespace {

absl::Status NotYetOnCuda(absl::string_view op) {
  return absl::UnimplementedError(
      absl::StrCat("cuda ", op,
                   ": not implemented on the CUDA backend yet (T5 runs on the CPU "
                   "backend: --backend=cpu)"));
}

}  // namespace

absl::Status CudaBackend::GeGluImpl(const Tensor&, const Tensor&) { return NotYetOnCuda("GeGlu"); }

absl::Status CudaBackend::ReluImpl(const Tensor&) { return NotYetOnCuda("Relu"); }

absl::Status CudaBackend::AttendBiasedImpl(const Tensor&, absl::Span<const BiasedAttentionSequence>,
                                           float, const AttentionState&) {
  return NotYetOnCuda("AttendBiased");
}

}  // namespace manyshot
