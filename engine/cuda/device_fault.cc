#include "engine/cuda/device_fault.h"

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"

namespace manyshot {
namespace cuda_internal {
namespace {

std::mutex& FaultMutex() {
  static std::mutex mutex;
  return mutex;
}

std::string& FirstFault() {  // under FaultMutex(); "" while none
  static std::string fault;
  return fault;
}

}  // namespace

bool IsStickyError(cudaError_t error) {
  switch (error) {
    case cudaErrorECCUncorrectable:
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
      return true;
    default:
      return false;
  }
}

void RecordDeviceFault(absl::string_view op, cudaError_t error) {
  std::lock_guard<std::mutex> lock(FaultMutex());
  if (!FirstFault().empty()) return;
  FirstFault() = absl::StrCat(op, ": ", cudaGetErrorString(error), " (CUDA error ",
                              static_cast<int>(error), ")");
}

void ForgetDeviceFaultForTests() {
  std::lock_guard<std::mutex> lock(FaultMutex());
  FirstFault().clear();
}

}  // namespace cuda_internal

absl::Status CudaDeviceFault() {
  std::lock_guard<std::mutex> lock(cuda_internal::FaultMutex());
  const std::string& fault = cuda_internal::FirstFault();
  if (fault.empty()) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("the CUDA context is lost after a device fault in ", fault));
}

}  // namespace manyshot
