// engine/cuda/attention_kernels.cu compiled as C++ for the SIMT emulator (simt.h): the same
// source, with testing/simt/include standing in for the CUDA headers and
// MANYSHOT_SIMT_EMULATION selecting testing/simt/ptx_instructions.h.
#include "engine/cuda/attention_kernels.cu"
