// The PTX instructions of engine/cuda/ptx_instructions.cuh, executed on the SIMT emulator
// (simt.h) as the PTX ISA defines them: the fragment layouts below are the ISA's ("Matrix
// Fragments for mma.m16n8k16 with floating point type", "ldmatrix"), written from its tables and
// not from the kernels, so a kernel that assumes another layout computes wrong numbers here.
// Each collective also checks what the hardware requires of its operands (16-byte aligned
// shared-memory rows for ldmatrix, aligned cp.async operands, every lane taking part).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime.h"
#include "engine/core/dtype.h"

namespace manyshot::cuda {

inline unsigned char* DynamicSmem() { return simt::DynamicSmem(); }

// ex2.approx.ftz.f32: subnormal inputs and results are flushed to zero; exp2(-inf) = +0.
inline float Exp2(float x) {
  if (std::fpclassify(x) == FP_SUBNORMAL) x = 0.0f;
  const float y = std::exp2(x);
  return std::fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;
}

namespace simt_ptx {

// Lane l of a fragment: groupID = l >> 2, threadID_in_group = l % 4.
inline int Group(int lane) { return lane >> 2; }
inline int InGroup(int lane) { return lane & 3; }

inline uint16_t Lo(uint32_t r) { return static_cast<uint16_t>(r & 0xffffu); }
inline uint16_t Hi(uint32_t r) { return static_cast<uint16_t>(r >> 16); }
inline uint32_t Pack(uint16_t lo, uint16_t hi) { return uint32_t{lo} | (uint32_t{hi} << 16); }

template <typename T>
float Widen(uint16_t bits) {
  return std::is_same_v<T, __half> ? manyshot::F16ToF32(bits) : manyshot::BF16ToF32(bits);
}

struct MmaLane {
  float* c;
  const uint32_t* a;
  uint32_t b0, b1;
};

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: D (16 x 8) = A (16 x 16) B (16 x 8) + C.
//   A: a_i, i = 0..7, two per register (low half first): row = groupID for i in {0, 1, 4, 5},
//      groupID + 8 otherwise; col = threadID_in_group * 2 + (i & 1), + 8 for i >= 4.
//   B: b_i, i = 0..3: row (k) = threadID_in_group * 2 + (i & 1), + 8 for i >= 2; col = groupID.
//   C, D: c_i, i = 0..3: row = groupID, + 8 for i >= 2; col = threadID_in_group * 2 + (i & 1).
template <typename T>
void ResolveMma(void* const* data, int lanes) {
  float a[16][16], b[16][8], c[16][8];
  for (int l = 0; l < lanes; ++l) {
    const auto* m = static_cast<const MmaLane*>(data[l]);
    const int g = Group(l), t = InGroup(l);
    for (int i = 0; i < 8; ++i) {
      const uint32_t reg = m->a[i / 2];
      const uint16_t bits = (i & 1) ? Hi(reg) : Lo(reg);
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      a[row][col] = Widen<T>(bits);
    }
    for (int i = 0; i < 4; ++i) {
      const uint32_t reg = i < 2 ? m->b0 : m->b1;
      const uint16_t bits = (i & 1) ? Hi(reg) : Lo(reg);
      b[t * 2 + (i & 1) + (i >= 2 ? 8 : 0)][g] = Widen<T>(bits);
    }
    for (int i = 0; i < 4; ++i) c[i < 2 ? g : g + 8][t * 2 + (i & 1)] = m->c[i];
  }
  for (int l = 0; l < lanes; ++l) {
    auto* m = static_cast<MmaLane*>(data[l]);
    const int g = Group(l), t = InGroup(l);
    for (int i = 0; i < 4; ++i) {
      const int row = i < 2 ? g : g + 8;
      const int col = t * 2 + (i & 1);
      double acc = c[row][col];  // products of 16-bit values are exact; f32 accumulation
      for (int k = 0; k < 16; ++k) acc += static_cast<double>(a[row][k]) * b[k][col];
      m->c[i] = static_cast<float>(acc);
    }
  }
}

struct LdMatrixLane {
  const uint16_t* row;  // this lane's row address (lanes 8i .. 8i + 7: matrix i)
  uint32_t* r;
};

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: register i of lane l holds, of matrix i
// (rows given by lanes 8i .. 8i + 7), elements (row l / 4, cols 2 (l % 4) and + 1); with
// .trans, elements (rows 2 (l % 4) and + 1, col l / 4).
template <bool kTrans>
void ResolveLdMatrix(void* const* data, int lanes) {
  if (lanes != 32) {
    simt::Fail("ldmatrix .x4 needs all 32 lanes");
    return;
  }
  for (int l = 0; l < 32; ++l) {
    auto* me = static_cast<LdMatrixLane*>(data[l]);
    const int g = Group(l), t = InGroup(l);
    for (int i = 0; i < 4; ++i) {
      auto at = [&](int row, int col) {
        return static_cast<const LdMatrixLane*>(data[8 * i + row])->row[col];
      };
      me->r[i] =
          kTrans ? Pack(at(2 * t, g), at(2 * t + 1, g)) : Pack(at(g, 2 * t), at(g, 2 * t + 1));
    }
  }
}

template <bool kTrans>
void LdMatrix(uint32_t (&r)[4], const uint16_t* smem) {
  if (reinterpret_cast<uintptr_t>(smem) % 16 != 0 || !simt::InDynamicSmem(smem, 16)) {
    simt::Fail("ldmatrix row address not 16-byte aligned in shared memory");
  }
  ++simt::Count().ldmatrix;
  LdMatrixLane lane{smem, r};
  simt::WarpCollective(kTrans ? "ldmatrix.x4.trans" : "ldmatrix.x4", &lane,
                       ResolveLdMatrix<kTrans>);
}

}  // namespace simt_ptx

template <typename T>
void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "f16 or bf16");
  ++simt::Count().mma;
  simt_ptx::MmaLane lane{c, a, b0, b1};
  simt::WarpCollective(std::is_same_v<T, __half> ? "mma.m16n8k16.f16" : "mma.m16n8k16.bf16", &lane,
                       simt_ptx::ResolveMma<T>);
}

inline void LdMatrixX4(uint32_t (&r)[4], const uint16_t* smem) {
  simt_ptx::LdMatrix<false>(r, smem);
}

inline void LdMatrixX4Trans(uint32_t (&r)[4], const uint16_t* smem) {
  simt_ptx::LdMatrix<true>(r, smem);
}

// cp.async.cg.shared.global [smem], [gmem], 16, src-size: both addresses 16-byte aligned.
inline void CpAsync16(uint16_t* smem, const uint16_t* gmem, bool valid) {
  if (reinterpret_cast<uintptr_t>(smem) % 16 != 0 || !simt::InDynamicSmem(smem, 16) ||
      reinterpret_cast<uintptr_t>(gmem) % 16 != 0) {
    simt::Fail("cp.async.cg with an address not 16-byte aligned (or not in shared memory)");
  }
  simt::CpAsync(smem, gmem, 16, valid ? 16 : 0);
}

inline void CpAsyncCommit() { simt::CpAsyncCommit(); }

template <int N>
void CpAsyncWait() {
  simt::CpAsyncWait(N);
}

}  // namespace manyshot::cuda
