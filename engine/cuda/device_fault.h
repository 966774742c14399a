// Faults that kill the CUDA context. After an illegal address, a launch failure or an
// uncorrectable ECC error every later call of the process fails with the same error; only a new
// process recovers. The backend records the first such error it sees, and the plugin hands it to
// the server (CudaPlugin::device_fault), which stops serving and exits so the replica restarts.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace manyshot {
namespace cuda_internal {

// Whether `error` leaves the context unusable: the runtime API documents these as "the process
// is left in an inconsistent state and any further CUDA work will return the same error".
bool IsStickyError(cudaError_t error);

// Records `error` from `op` as the device's fault, when it is the first one.
void RecordDeviceFault(absl::string_view op, cudaError_t error);

// Forgets the fault: for tests that fault the emulated device on purpose, then reset it.
void ForgetDeviceFaultForTests();

}  // namespace cuda_internal

// OK while no call of this process has hit a sticky error; INTERNAL naming the first one after.
absl::Status CudaDeviceFault();

}  // namespace manyshot
