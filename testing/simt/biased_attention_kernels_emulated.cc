// engine/cuda/biased_attention_kernels.cu compiled as C++ for the SIMT emulator (simt.h), as
// attention_kernels_emulated.cc.
#include "engine/cuda/biased_attention_kernels.cu"
