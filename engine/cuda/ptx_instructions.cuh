// The PTX instructions the attention kernels issue by inline assembly (tensor-core mma, ldmatrix,
// cp.async, the SFU exp2), and the kernels' dynamic shared memory, behind small device
// functions: one place that says what each instruction is asked to do.
//
// Built with MANYSHOT_SIMT_EMULATION (the CPU test build of testing/simt, which compiles the
// kernels as plain C++), the same functions come from testing/simt/ptx_instructions.h instead,
// which executes each instruction as the PTX ISA defines it, so the kernels' logic is checked on
// machines without a GPU. Included by .cu files only.
#pragma once

#if defined(MANYSHOT_SIMT_EMULATION)
#include "testing/simt/ptx_instructions.h"
#else

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace manyshot::cuda {

// The kernel's dynamic shared memory (the launch's byte count), 16-byte aligned.
__device__ __forceinline__ unsigned char* DynamicSmem() {
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  return dynamic_smem;
}

// 2^x on the SFU; ex2.approx.ftz(-inf) = +0, which the online softmax relies on.
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// c += a * b for one m16n8k16 tile (row.col, f32 accumulation); T: __half or __nv_bfloat16.
template <typename T>
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four 8 x 8 matrices of 16-bit elements from shared memory (lanes 8i .. 8i + 7 give the row
// addresses of matrix i). volatile: the shared memory under the same address changes between
// pipeline stages, so two loads from one address must never be merged or hoisted across a
// barrier.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const uint16_t* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// The same, each matrix transposed on the way.
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const uint16_t* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// 16 bytes global -> shared, asynchronously; with valid = false the 16 bytes are zero-filled
// (src-size 0: nothing is read), so keys past the range end hold zeros, never stale data or
// NaNs that 0 * NaN would spread into the output.
__device__ __forceinline__ void CpAsync16(uint16_t* smem, const uint16_t* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(src_bytes));
}

// Closes this thread's group of cp.async copies issued since the last commit.
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace manyshot::cuda

#endif  // MANYSHOT_SIMT_EMULATION
