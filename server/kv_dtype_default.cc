#include "server/kv_dtype_default.h"

#include "absl/strings/str_cat.h"

namespace manyshot::server {

std::string DefaultKvDtype(Device device, DType compute) {
  if (device != Device::kCUDA) return "f32";
  return compute == DType::kF16 ? "f16" : "bf16";
}

std::string AttentionKernelDescription(Device device, DType kv, int64_t head_dim) {
  const std::string kv_name(DTypeName(kv));
  if (device != Device::kCUDA) {
    return absl::StrCat("cpu attention (", kv_name, " K/V, f32 accumulation)");
  }
  // SelectKernel's rule (engine/cuda/attention_kernels.cu): 16-bit K/V and a head_dim the flash
  // kernel is instantiated for. ALiBi and T5's bias follow it (BiasedFlashApplies): the flash
  // kernel with the bias as its variant, else the scalar biased kernel.
  const bool flash_head_dim = head_dim == 64 || head_dim == 80 || head_dim == 128;
  if (kv != DType::kF32 && flash_head_dim) {
    return absl::StrCat("cuda flash kernel (", kv_name,
                        " K/V on tensor cores, f32 accumulation; ALiBi/T5 bias as its variants)");
  }
  return absl::StrCat("cuda generic kernel (", kv_name, " K/V, head_dim ", head_dim,
                      ": scalar FMA, no tensor cores; ALiBi/T5 bias: the scalar biased kernel",
                      kv == DType::kF32 ? "; set --kv_dtype=bf16" : "", ")");
}

}  // namespace manyshot::server
