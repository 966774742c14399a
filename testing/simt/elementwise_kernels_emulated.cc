// engine/cuda/elementwise_kernels.cu compiled as C++ for the SIMT emulator (simt.h), as
// attention_kernels_emulated.cc.
#include "engine/cuda/elementwise_kernels.cu"
