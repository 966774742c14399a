// engine/cuda/attention_kernels.cu compiled as C++ for the SIMT emulator (simt.h): the same
// source, with tests/simt/include standing in for the CUDA headers and
// MANYSHOT_SIMT_EMULATION selecting tests/simt/ptx_instructions.h.
#include "engine/cuda/attention_kernels.cu"
