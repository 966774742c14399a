// The non-attention kernels of engine/cuda/elementwise_kernels.cu, run on the SIMT emulator
// through their real launch functions (every function of elementwise_kernels.h), against a host
// reference written from the header's contract and from the CPU backend's meaning of each op
// (engine/cpu: the reference semantics of the Backend ops). Every element type a launcher takes,
// shapes that take the 16-byte vector path and shapes that leave it (odd sizes, sizes that are
// not a multiple of the vector width, pointers off a 16-byte boundary), tails, rows wider than
// one block, and both thread schedules of the emulator. Every output array sits between guard
// elements that keep the buffers' initial 0xff bytes: a write outside the contract's range fails.
//
// Tolerances. Exact (bit for bit) where the op is: conversions, copies, gathers, fills, and the
// adds (one f32 add, then one rounding to nearest even, gives the same bits on the host). The
// rest compare with a double-precision reference of the formula over the stored (already
// rounded) inputs: |got - want| <= half an ulp of the output type relative to |want| (the
// kernel's final rounding: 2^-24 f32, 2^-11 f16, 2^-8 bf16; plus 2^-25 absolute for f16's
// subnormals) + the f32 arithmetic's error, stated per op below on the scale of the op's terms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda_runtime.h"
#include "engine/core/dtype.h"
#include "engine/cuda/elementwise_kernels.h"
#include "testing/simt/simt.h"
#include "tests/cuda/device_buffer.h"

namespace {

namespace cuda = manyshot::cuda;
using manyshot::BF16ToF32;
using manyshot::F16ToF32;
using manyshot::F32ToBF16;
using manyshot::F32ToF16;
using simt::Buffer;
using simt::ElemBytes;
using simt::ElemType;

constexpr ElemType kF32 = ElemType::kF32;
constexpr ElemType kF16 = ElemType::kF16;
constexpr ElemType kBF16 = ElemType::kBF16;
constexpr ElemType kTypes[] = {kF32, kF16, kBF16};
constexpr float kInfF = std::numeric_limits<float>::infinity();

std::string Name(ElemType t) { return t == kF32 ? "f32" : t == kF16 ? "f16" : "bf16"; }

// Runs body once under each thread schedule of the emulator (barriers and shared memory that
// only work in one order fail in the other).
template <typename Fn>
void InBothOrders(Fn&& body) {
  for (simt::Order order : {simt::Order::kForward, simt::Order::kReverse}) {
    SCOPED_TRACE(order == simt::Order::kForward ? "forward schedule" : "reverse schedule");
    simt::SetOrder(order);
    body();
  }
  simt::SetOrder(simt::Order::kForward);
}

uint32_t F32Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float F32FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// x rounded to nearest even in t: the bits a kernel stores.
uint32_t BitsIn(ElemType t, float x) {
  return t == kF16 ? F32ToF16(x) : t == kBF16 ? F32ToBF16(x) : F32Bits(x);
}

// The error of rounding an exact result to t once, relative to it, and the absolute floor of
// f16's subnormals.
double HalfUlp(ElemType t) { return t == kBF16 ? 0x1p-8 : t == kF16 ? 0x1p-11 : 0x1p-24; }
double RoundingTolerance(ElemType t, double want) {
  return HalfUlp(t) * std::abs(want) + (t == kF16 ? 0x1p-25 : 0.0);
}

// n elements of type t at `misalign` bytes past a 16-byte boundary, between kGuard guard elements
// on each side that no launch may write.
class Array {
 public:
  static constexpr int64_t kGuard = 16;  // a multiple of 16 bytes for every type

  Array(ElemType t, int64_t n, size_t misalign = 0)
      : buf_(t, n + 2 * kGuard, misalign), type_(t), n_(n) {}

  ElemType type() const { return type_; }
  int64_t size() const { return n_; }
  void* p() const { return static_cast<unsigned char*>(buf_.p) + kGuard * ElemBytes(type_); }

  void Set(int64_t i, float x) { buf_.Set(kGuard + i, x); }
  double Get(int64_t i) const { return buf_.Get(kGuard + i); }
  // The stored bits (16 or 32 of them).
  uint32_t Bits(int64_t i) const {
    uint32_t b = 0;
    std::memcpy(&b, static_cast<const unsigned char*>(p()) + i * ElemBytes(type_),
                ElemBytes(type_));
    return b;
  }
  void SetBits(int64_t i, uint32_t b) {
    std::memcpy(static_cast<unsigned char*>(p()) + i * ElemBytes(type_), &b, ElemBytes(type_));
  }
  void Fill(std::mt19937& rng, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < n_; ++i) Set(i, u(rng));
  }
  std::vector<uint32_t> AllBits() const {
    std::vector<uint32_t> bits(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) bits[static_cast<size_t>(i)] = Bits(i);
    return bits;
  }
  bool Untouched(int64_t i) const { return buf_.Untouched(kGuard + i); }
  // Whether the guards still hold the poison.
  bool GuardsUntouched() const {
    for (int64_t i = 0; i < kGuard; ++i) {
      if (!buf_.Untouched(i) || !buf_.Untouched(kGuard + n_ + i)) return false;
    }
    return true;
  }

 private:
  Buffer buf_;
  ElemType type_;
  int64_t n_;
};

// Device int32 values (row indices, token ids, positions).
Buffer Int32s(const std::vector<int32_t>& v) {
  Buffer b(kF32, static_cast<int64_t>(v.size()));
  if (!v.empty()) std::memcpy(b.p, v.data(), v.size() * sizeof(int32_t));
  return b;
}

// Counts the elements of one check that miss, reporting the first few.
class Misses {
 public:
  explicit Misses(std::string what) : what_(std::move(what)) {}
  ~Misses() {
    if (count_ > kShown) ADD_FAILURE() << what_ << ": " << count_ << " elements wrong in all";
  }
  void Near(int64_t i, double got, double want, double tol) {
    if (std::abs(got - want) <= tol) return;  // NaN misses
    if (++count_ <= kShown) {
      ADD_FAILURE() << what_ << " [" << i << "]: got " << got << ", want " << want << " (error "
                    << std::abs(got - want) << " > " << tol << ")";
    }
  }
  void Bits(int64_t i, uint32_t got, uint32_t want) {
    if (got == want) return;
    if (++count_ <= kShown) {
      ADD_FAILURE() << what_ << " [" << i << "]: got bits 0x" << std::hex << got << ", want 0x"
                    << want << std::dec;
    }
  }
  void True(int64_t i, bool ok, const std::string& why) {
    if (ok) return;
    if (++count_ <= kShown) ADD_FAILURE() << what_ << " [" << i << "]: " << why;
  }

 private:
  static constexpr int kShown = 5;
  std::string what_;
  int64_t count_ = 0;
};

void ExpectLaunched(cudaError_t err) {
  EXPECT_EQ(err, cudaSuccess) << simt::LastLaunchError();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// ---- Reference pins ----

// The conversions the kernels' stores use (cuda_fp16.h / cuda_bf16.h stand-ins call these) round
// to nearest even: pinned on values whose right answer is known independently of dtype.h.
TEST(EmulatedElementwiseTest, ReferenceConversionsRoundToNearestEven) {
  // f16: ties to even at 1 (ulp 2^-10), overflow, subnormals and their ties.
  EXPECT_EQ(F32ToF16(1.0f + 0x1p-11f), 0x3c00);      // tie, down to even
  EXPECT_EQ(F32ToF16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie, up to even
  EXPECT_EQ(F32ToF16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);    // largest finite
  EXPECT_EQ(F32ToF16(65519.996f), 0x7bff);  // just under the tie to inf
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);    // tie: to inf
  EXPECT_EQ(F32ToF16(-kInfF), 0xfc00);
  EXPECT_EQ(F32ToF16(0x1p-24f), 0x0001);      // smallest subnormal
  EXPECT_EQ(F32ToF16(0x1p-25f), 0x0000);      // tie to even (0)
  EXPECT_EQ(F32ToF16(3 * 0x1p-25f), 0x0002);  // tie to even (2)
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(std::nanf("")))));
  // bf16: ties at 1 (ulp 2^-7), rounding into inf.
  EXPECT_EQ(F32ToBF16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(F32ToBF16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(F32ToBF16(F32FromBits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds up to inf
  EXPECT_EQ(F32ToBF16(F32FromBits(0x00008000u)), 0x0000);  // subnormal tie to even
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::nanf("")))));
}

// ---- LaunchConvert ----

// Source values: random bit patterns (every exponent, subnormals, inf, NaN), then the f16 and
// bf16 ties and boundaries.
std::vector<uint32_t> ConvertSourceBits(ElemType t, int64_t n, std::mt19937& rng) {
  std::vector<uint32_t> bits(static_cast<size_t>(n));
  for (auto& b : bits) b = t == kF32 ? rng() : rng() & 0xffffu;
  if (t == kF32) {
    const float special[] = {0.0f,
                             -0.0f,
                             kInfF,
                             -kInfF,
                             std::nanf(""),
                             1.0f + 0x1p-11f,
                             1.0f + 3 * 0x1p-11f,
                             -(1.0f + 0x1p-8f),
                             1.0f + 3 * 0x1p-8f,
                             65504.0f,
                             65519.996f,
                             65520.0f,
                             -1e6f,
                             0x1p-24f,
                             0x1p-25f,
                             3 * 0x1p-25f,
                             0x1p-14f,
                             F32FromBits(0x7f7fffffu),
                             F32FromBits(0x00008000u),
                             F32FromBits(0x00000001u)};
    for (size_t i = 0; i < std::size(special) && i < bits.size(); ++i) {
      bits[i * 7 % bits.size()] = F32Bits(special[i]);
    }
  }
  return bits;
}

float ValueOf(ElemType t, uint32_t bits) {
  return t == kF16    ? F16ToF32(static_cast<uint16_t>(bits))
         : t == kBF16 ? BF16ToF32(static_cast<uint16_t>(bits))
                      : F32FromBits(bits);
}

// Every pair of types (the backend copies equal types instead, but the launcher takes them), the
// 4-element vector path with a tail (1031 = 4 * 257 + 3: two blocks of packs), a tail
// only, and each side 2 or 4 bytes off its vector alignment (the scalar path). Bit-exact against
// dtype.h's F32ToF16 / F32ToBF16 of the exactly widened source; NaN stays NaN.
TEST(EmulatedElementwiseTest, ConvertIsBitExactOnEveryTypePair) {
  struct Shape {
    int64_t n;
    size_t src_off, dst_off;  // in elements
  };
  const Shape shapes[] = {{1031, 0, 0}, {3, 0, 0}, {1031, 1, 0}, {1031, 0, 1}};
  for (ElemType s : kTypes) {
    for (ElemType d : kTypes) {
      for (const Shape& sh : shapes) {
        SCOPED_TRACE(Name(s) + " -> " + Name(d) + ", n " + std::to_string(sh.n) + ", offsets " +
                     std::to_string(sh.src_off) + "/" + std::to_string(sh.dst_off));
        std::mt19937 rng(static_cast<uint32_t>(sh.n * 31 + sh.src_off));
        const std::vector<uint32_t> src_bits = ConvertSourceBits(s, sh.n, rng);
        InBothOrders([&] {
          Array src(s, sh.n, sh.src_off * ElemBytes(s));
          Array dst(d, sh.n, sh.dst_off * ElemBytes(d));
          for (int64_t i = 0; i < sh.n; ++i) src.SetBits(i, src_bits[static_cast<size_t>(i)]);
          ExpectLaunched(cuda::LaunchConvert(src.p(), s, dst.p(), d, sh.n, nullptr));
          Misses miss("converted");
          for (int64_t i = 0; i < sh.n; ++i) {
            const float v = ValueOf(s, src_bits[static_cast<size_t>(i)]);
            if (std::isnan(v)) {
              miss.True(i, std::isnan(dst.Get(i)), "NaN did not stay NaN");
            } else {
              miss.Bits(i, dst.Bits(i), BitsIn(d, v));
            }
          }
          EXPECT_TRUE(dst.GuardsUntouched());
        });
      }
    }
  }
}

// ---- LaunchGatherRows / LaunchCopy2D (bytes) ----

// `bytes` device bytes at `misalign` past a 16-byte boundary, between 64 guard bytes each side.
class Bytes {
 public:
  static constexpr int64_t kGuard = 64;
  Bytes(int64_t bytes, size_t misalign)
      : buf_(kF32, (bytes + 2 * kGuard + 3) / 4, misalign), n_(bytes) {}
  unsigned char* p() const { return static_cast<unsigned char*>(buf_.p) + kGuard; }
  int64_t size() const { return n_; }
  // Byte i, i in [-kGuard, size + kGuard).
  unsigned char At(int64_t i) const { return p()[i]; }
  void Fill(std::mt19937& rng) {
    for (int64_t i = 0; i < n_; ++i) p()[i] = static_cast<unsigned char>(rng());
  }

 private:
  Buffer buf_;
  int64_t n_;
};

// Rows of any size and alignment: 16-byte words (48 and 4144 bytes, the latter wider than one
// block), 4-byte words (x 4 bytes off), 2-byte words (6 bytes), bytes (7 bytes; out 1 byte off).
// Out-of-range indices (negative, x_rows, INT32_MIN / MAX) give zero rows; x with no rows gives
// only zero rows; bytes past the last row stay untouched.
TEST(EmulatedElementwiseTest, GatherRowsCopiesRowsAndZeroesOutOfRangeOnes) {
  struct Case {
    size_t row_bytes, x_off, out_off;
    int64_t x_rows;
  };
  const Case cases[] = {{48, 0, 0, 5}, {4144, 0, 0, 3}, {48, 4, 0, 5}, {6, 0, 0, 5},
                        {7, 0, 0, 4},  {48, 0, 1, 5},   {32, 0, 0, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE("row_bytes " + std::to_string(c.row_bytes) + ", offsets " +
                 std::to_string(c.x_off) + "/" + std::to_string(c.out_off) + ", x_rows " +
                 std::to_string(c.x_rows));
    const int32_t x_rows = static_cast<int32_t>(c.x_rows);
    const std::vector<int32_t> idx = {
        2 % std::max(x_rows, 1), -1, 0, x_rows, INT32_MIN, x_rows - 1, INT32_MAX,
        1 % std::max(x_rows, 1), 0};
    const int64_t num_rows = static_cast<int64_t>(idx.size());
    const int64_t rb = static_cast<int64_t>(c.row_bytes);
    InBothOrders([&] {
      std::mt19937 rng(static_cast<uint32_t>(c.row_bytes));
      Bytes x(c.x_rows * rb, c.x_off);
      Bytes out(num_rows * rb, c.out_off);
      x.Fill(rng);
      const Buffer rows = Int32s(idx);
      ExpectLaunched(cuda::LaunchGatherRows(x.p(), c.x_rows, static_cast<const int32_t*>(rows.p),
                                            num_rows, c.row_bytes, out.p(), nullptr));
      Misses miss("gathered byte");
      for (int64_t r = 0; r < num_rows; ++r) {
        const int32_t src = idx[static_cast<size_t>(r)];
        const bool valid = src >= 0 && src < c.x_rows;
        for (int64_t b = 0; b < rb; ++b) {
          miss.Bits(r * rb + b, out.At(r * rb + b), valid ? x.At(src * rb + b) : 0u);
        }
      }
      for (int64_t b = -Bytes::kGuard; b < 0; ++b) miss.Bits(b, out.At(b), 0xff);
      for (int64_t b = out.size(); b < out.size() + Bytes::kGuard; ++b) {
        miss.Bits(b, out.At(b), 0xff);
      }
    });
  }
}

// SplitQkv's strided copies: parts of each qkv row (at their column offsets) into contiguous or
// pitched rows. 16-byte words (f32 parts of 64 elements; a 4112-byte row over two blocks), 4-byte
// words (a bf16 part of 12 elements), 2-byte words (a source 2 bytes off), bytes (7 bytes wide).
// The bytes of dst between rows (dst_pitch > width) and around them stay untouched.
TEST(EmulatedElementwiseTest, Copy2DCopiesEveryRowAndNothingElse) {
  struct Case {
    int64_t rows;
    size_t width, src_pitch, dst_pitch, src_col, dst_off;
  };
  const Case cases[] = {
      {5, 256, 768, 256, 0, 0},      // f32 q of [5, 3 x 64]
      {5, 256, 768, 256, 512, 0},    // its v
      {3, 4112, 4128, 4128, 16, 0},  // 257 words: two blocks per row
      {4, 24, 80, 24, 56, 0},        // bf16 v of [4, 40]: 24 = 12 elements, 4-byte words
      {4, 24, 80, 40, 2, 0},         // 2-byte words (source 2 bytes off), pitched dst
      {3, 7, 16, 9, 3, 0},           // bytes
      {3, 64, 64, 80, 0, 4},         // dst 4 bytes off: 4-byte words
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + ", width " + std::to_string(c.width) +
                 ", pitches " + std::to_string(c.src_pitch) + "/" + std::to_string(c.dst_pitch) +
                 ", src column " + std::to_string(c.src_col) + ", dst off " +
                 std::to_string(c.dst_off));
    const int64_t w = static_cast<int64_t>(c.width);
    const int64_t sp = static_cast<int64_t>(c.src_pitch), dp = static_cast<int64_t>(c.dst_pitch);
    InBothOrders([&] {
      std::mt19937 rng(static_cast<uint32_t>(c.width + c.src_col));
      Bytes src(c.rows * sp, 0);
      Bytes dst((c.rows - 1) * dp + w, c.dst_off);
      src.Fill(rng);
      ExpectLaunched(cuda::LaunchCopy2D(dst.p(), c.dst_pitch, src.p() + c.src_col, c.src_pitch,
                                        c.width, c.rows, nullptr));
      Misses miss("dst byte");
      for (int64_t i = -Bytes::kGuard; i < dst.size() + Bytes::kGuard; ++i) {
        const int64_t r = i >= 0 ? i / dp : -1, b = i - r * dp;
        const bool in_row = i >= 0 && i < dst.size() && b < w;
        miss.Bits(i, dst.At(i),
                  in_row ? src.At(r * sp + static_cast<int64_t>(c.src_col) + b) : 0xffu);
      }
    });
  }
}

// ---- LaunchEmbeddingAdd ----

// out[t] += table[ids[t]] in f32, rounded once (bit-exact); ids out of range leave the row's bits
// as they were. hidden 37 (one block), 300 (two blocks per row).
TEST(EmulatedElementwiseTest, EmbeddingAddAddsValidRowsOnly) {
  const std::vector<int32_t> ids = {3, -1, 0, 6, 5, 3, INT32_MAX, INT32_MIN, 2};
  const int64_t tokens = static_cast<int64_t>(ids.size()), table_rows = 6;
  for (ElemType t : kTypes) {
    for (int64_t hidden : {37, 300}) {
      SCOPED_TRACE(Name(t) + ", hidden " + std::to_string(hidden));
      InBothOrders([&] {
        std::mt19937 rng(static_cast<uint32_t>(hidden));
        Array table(t, table_rows * hidden), out(t, tokens * hidden);
        table.Fill(rng, -2.0f, 2.0f);
        out.Fill(rng, -2.0f, 2.0f);
        const std::vector<uint32_t> before = out.AllBits();
        const Buffer id_buf = Int32s(ids);
        ExpectLaunched(cuda::LaunchEmbeddingAdd(static_cast<const int32_t*>(id_buf.p), tokens,
                                                table.p(), table_rows, hidden, out.p(), t,
                                                nullptr));
        Misses miss("out");
        for (int64_t r = 0; r < tokens; ++r) {
          const int32_t id = ids[static_cast<size_t>(r)];
          for (int64_t i = 0; i < hidden; ++i) {
            const int64_t k = r * hidden + i;
            const uint32_t old = before[static_cast<size_t>(k)];
            const uint32_t want =
                id >= 0 && id < table_rows
                    ? BitsIn(t, ValueOf(t, old) + static_cast<float>(table.Get(id * hidden + i)))
                    : old;
            miss.Bits(k, out.Bits(k), want);
          }
        }
        EXPECT_TRUE(out.GuardsUntouched());
      });
    }
  }
}

// ---- LaunchRmsNorm / LaunchLayerNorm ----

struct NormCase {
  int64_t rows, n;
  size_t off = 0;         // elements x, w, b and out are off their 16-byte boundary
  bool in_place = false;  // out == x
};

std::string Describe(const NormCase& c) {
  return "rows " + std::to_string(c.rows) + ", n " + std::to_string(c.n) + ", off " +
         std::to_string(c.off) + (c.in_place ? ", in place" : "");
}

// Vector path (n a multiple of 8 and aligned): 256 (32 / 64 threads), 4096 (512 / 1024 threads:
// BlockSum over 32 warps), in place; scalar path: n odd (1001: 256 threads; 5003: 1024 threads,
// five elements each), n 3 (one warp, mostly idle), n 256 with the buffers one element off. Several
// rows per case: BlockSum's shared memory is reused row after row.
const NormCase kNormCases[] = {{3, 256},    {2, 4096}, {3, 1001},         {2, 5003},
                               {4, 256, 1}, {3, 3},    {3, 256, 0, true}, {2, 1001, 0, true}};

// out = x / sqrt(mean(x^2) + eps) * w. Tolerance: rounding to the type + 2e-6 relative (f32 sums
// of up to 5003 squares in a tree of per-thread partial sums, sqrt and three products).
TEST(EmulatedElementwiseTest, RmsNormMatchesTheReference) {
  const float eps = 1e-5f;
  for (ElemType t : kTypes) {
    for (const NormCase& c : kNormCases) {
      SCOPED_TRACE(Name(t) + ", " + Describe(c));
      InBothOrders([&] {
        std::mt19937 rng(static_cast<uint32_t>(c.n * 7 + c.rows));
        const size_t off = c.off * ElemBytes(t);
        Array x(t, c.rows * c.n, off), w(t, c.n, off), out(t, c.rows * c.n, off);
        x.Fill(rng, -2.0f, 2.0f);
        w.Fill(rng, 0.5f, 1.5f);
        std::vector<double> xv(static_cast<size_t>(c.rows * c.n));
        for (int64_t i = 0; i < c.rows * c.n; ++i) xv[static_cast<size_t>(i)] = x.Get(i);
        Array& o = c.in_place ? x : out;
        ExpectLaunched(cuda::LaunchRmsNorm(x.p(), w.p(), o.p(), t, c.rows, c.n, eps, nullptr));
        Misses miss("out");
        for (int64_t r = 0; r < c.rows; ++r) {
          double ss = 0.0;
          for (int64_t i = 0; i < c.n; ++i) ss += xv[r * c.n + i] * xv[r * c.n + i];
          const double inv = 1.0 / std::sqrt(ss / static_cast<double>(c.n) + eps);
          for (int64_t i = 0; i < c.n; ++i) {
            const double want = xv[r * c.n + i] * inv * w.Get(i);
            miss.Near(r * c.n + i, o.Get(r * c.n + i), want,
                      RoundingTolerance(t, want) + 2e-6 * std::abs(want));
          }
        }
        EXPECT_TRUE(o.GuardsUntouched());
        EXPECT_TRUE(x.GuardsUntouched());
      });
    }
  }
}

// out = (x - mean) / sqrt(mean((x - mean)^2) + eps) * w + b, x with a mean far from 0 (the two
// passes matter). Tolerance: rounding to the type + 2e-6 of the terms' scale
// ((|x| + |mean|) / sigma * |w| + |b|: f32 mean and variance, then four operations).
TEST(EmulatedElementwiseTest, LayerNormMatchesTheReference) {
  const float eps = 1e-5f;
  for (ElemType t : kTypes) {
    for (const NormCase& c : kNormCases) {
      SCOPED_TRACE(Name(t) + ", " + Describe(c));
      InBothOrders([&] {
        std::mt19937 rng(static_cast<uint32_t>(c.n * 5 + c.rows));
        const size_t off = c.off * ElemBytes(t);
        Array x(t, c.rows * c.n, off), w(t, c.n, off), b(t, c.n, off), out(t, c.rows * c.n, off);
        x.Fill(rng, 1.0f, 4.0f);
        w.Fill(rng, 0.5f, 1.5f);
        b.Fill(rng, -1.0f, 1.0f);
        std::vector<double> xv(static_cast<size_t>(c.rows * c.n));
        for (int64_t i = 0; i < c.rows * c.n; ++i) xv[static_cast<size_t>(i)] = x.Get(i);
        Array& o = c.in_place ? x : out;
        ExpectLaunched(
            cuda::LaunchLayerNorm(x.p(), w.p(), b.p(), o.p(), t, c.rows, c.n, eps, nullptr));
        Misses miss("out");
        for (int64_t r = 0; r < c.rows; ++r) {
          const double* xr = xv.data() + r * c.n;
          double mean = 0.0, var = 0.0;
          for (int64_t i = 0; i < c.n; ++i) mean += xr[i];
          mean /= static_cast<double>(c.n);
          for (int64_t i = 0; i < c.n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
          const double inv = 1.0 / std::sqrt(var / static_cast<double>(c.n) + eps);
          for (int64_t i = 0; i < c.n; ++i) {
            const double want = (xr[i] - mean) * inv * w.Get(i) + b.Get(i);
            const double scale =
                (std::abs(xr[i]) + std::abs(mean)) * inv * std::abs(w.Get(i)) + std::abs(b.Get(i));
            miss.Near(r * c.n + i, o.Get(r * c.n + i), want,
                      RoundingTolerance(t, want) + 2e-6 * scale);
          }
        }
        EXPECT_TRUE(o.GuardsUntouched());
      });
    }
  }
}

// ---- LaunchAddNorm (fused residual add + norm) ----

// x += y then the norm into out, in one launch, against LaunchAdd then LaunchRmsNorm /
// LaunchLayerNorm on copies of the same inputs: bit for bit, the sum and the normed rows, on the
// norm cases (vector and scalar paths, off-boundary buffers), with out == y where the case says
// in place (the forward pass writes the normed sum over the sublayer output it added), and with
// y alone off a 16-byte boundary (the norm's inputs choose the vector width).
TEST(EmulatedElementwiseTest, AddNormGivesTheBitsOfAddThenTheNorm) {
  const float eps = 1e-5f;
  for (ElemType t : kTypes) {
    for (bool layer : {false, true}) {
      for (const NormCase& c : kNormCases) {
        for (size_t y_off : {c.off, c.off + 1}) {
          SCOPED_TRACE(Name(t) + (layer ? " LayerNorm, " : " RmsNorm, ") + Describe(c) +
                       ", y off " + std::to_string(y_off));
          InBothOrders([&] {
            std::mt19937 rng(static_cast<uint32_t>(c.n * 3 + c.rows + (layer ? 1 : 0)));
            const size_t off = c.off * ElemBytes(t);
            const int64_t total = c.rows * c.n;
            Array x(t, total, off), y(t, total, y_off * ElemBytes(t)), w(t, c.n, off);
            Array b(t, c.n, off), out(t, total, off);
            // The unfused norm's out sits where the fused one's does (on y when in place): its
            // alignment chooses the vector width of both.
            const size_t out_off = c.in_place ? y_off * ElemBytes(t) : off;
            Array x2(t, total, off), y2(t, total, y_off * ElemBytes(t)), out2(t, total, out_off);
            x.Fill(rng, 1.0f, 3.0f);
            y.Fill(rng, -1.0f, 1.0f);
            w.Fill(rng, 0.5f, 1.5f);
            b.Fill(rng, -1.0f, 1.0f);
            for (int64_t i = 0; i < total; ++i) {
              x2.SetBits(i, x.Bits(i));
              y2.SetBits(i, y.Bits(i));
            }
            // Unfused: x2 += y2, then the norm of x2 into out2.
            ExpectLaunched(cuda::LaunchAdd(x2.p(), y2.p(), t, total, nullptr));
            if (layer) {
              ExpectLaunched(cuda::LaunchLayerNorm(x2.p(), w.p(), b.p(), out2.p(), t, c.rows, c.n,
                                                   eps, nullptr));
            } else {
              ExpectLaunched(
                  cuda::LaunchRmsNorm(x2.p(), w.p(), out2.p(), t, c.rows, c.n, eps, nullptr));
            }
            Array& o = c.in_place ? y : out;
            ExpectLaunched(cuda::LaunchAddNorm(x.p(), y.p(), w.p(), layer ? b.p() : nullptr, o.p(),
                                               t, c.rows, c.n, eps, nullptr));
            Misses sum("sum"), normed("out");
            for (int64_t i = 0; i < total; ++i) {
              sum.Bits(i, x.Bits(i), x2.Bits(i));
              normed.Bits(i, o.Bits(i), out2.Bits(i));
            }
            EXPECT_TRUE(x.GuardsUntouched());
            EXPECT_TRUE(o.GuardsUntouched());
          });
        }
      }
    }
  }
}

// ---- LaunchRope ----

// Rotate-half RoPE with the backend's inv_freq (theta^(-2i/d) in double) and the contract's
// angles (cos / sin in double, rounded to f32). Vector path: head_dim 64 (all types), 24 (f32
// only: half 12 is not a multiple of 8), 512 (kMaxRopeHalf: the table takes two passes of the
// 128 threads); scalar: head_dim 12, x one element off. Tolerance: rounding to the type +
// 4e-7 (|a| + |c|) (two f32 products, possibly fused, and a sum).
TEST(EmulatedElementwiseTest, RopeRotatesEveryHead) {
  struct Case {
    int64_t tokens, heads, head_dim;
    size_t off = 0;
    double attention = 1.0;  // YaRN's factor on cos/sin (a scaled RopeTable)
  };
  const Case cases[] = {{3, 2, 64},        {2, 3, 24},    {2, 2, 12},
                        {2, 1, 512},       {3, 2, 64, 1}, {3, 2, 64, 0, 1.1386294361119891},
                        {2, 3, 24, 1, 0.7}};
  const std::vector<int32_t> all_positions = {0, 1, 5000, 123457};
  const double theta = 10000.0;
  for (ElemType t : kTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(Name(t) + ", tokens " + std::to_string(c.tokens) + ", heads " +
                   std::to_string(c.heads) + ", head_dim " + std::to_string(c.head_dim) + ", off " +
                   std::to_string(c.off) + ", attention " + std::to_string(c.attention));
      const int64_t half = c.head_dim / 2, row = c.heads * c.head_dim;
      // Exactly head_dim / 2 host values: the launcher reads no more.
      std::vector<double> inv_freq(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i) {
        inv_freq[static_cast<size_t>(i)] =
            std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
      }
      const std::vector<int32_t> positions(all_positions.end() - c.tokens, all_positions.end());
      InBothOrders([&] {
        std::mt19937 rng(static_cast<uint32_t>(c.head_dim + c.off));
        Array x(t, c.tokens * row, c.off * ElemBytes(t));
        x.Fill(rng, -2.0f, 2.0f);
        std::vector<double> xv(static_cast<size_t>(c.tokens * row));
        for (int64_t i = 0; i < c.tokens * row; ++i) xv[static_cast<size_t>(i)] = x.Get(i);
        const Buffer pos = Int32s(positions);
        ExpectLaunched(cuda::LaunchRope(x.p(), t, c.tokens, c.heads, c.head_dim,
                                        static_cast<const int32_t*>(pos.p), inv_freq.data(),
                                        c.attention, nullptr));
        Misses miss("x");
        for (int64_t tok = 0; tok < c.tokens; ++tok) {
          for (int64_t i = 0; i < half; ++i) {
            const double angle = static_cast<double>(positions[static_cast<size_t>(tok)]) *
                                 inv_freq[static_cast<size_t>(i)];
            const double co = static_cast<float>(std::cos(angle) * c.attention);
            const double si = static_cast<float>(std::sin(angle) * c.attention);
            for (int64_t h = 0; h < c.heads; ++h) {
              const int64_t lo = tok * row + h * c.head_dim + i, hi = lo + half;
              const double a = xv[static_cast<size_t>(lo)], b = xv[static_cast<size_t>(hi)];
              const double f32 = 4e-7 * (std::abs(a) + std::abs(b));
              const double want_lo = a * co - b * si, want_hi = b * co + a * si;
              miss.Near(lo, x.Get(lo), want_lo, RoundingTolerance(t, want_lo) + f32);
              miss.Near(hi, x.Get(hi), want_hi, RoundingTolerance(t, want_hi) + f32);
            }
          }
        }
        EXPECT_TRUE(x.GuardsUntouched());
      });
    }
  }
}

// ---- In-place flat ops: LaunchGeluTanh, LaunchRelu, LaunchScale, LaunchAdd ----

// Flat sizes: the vector path with a tail (1029 = 257 * 4 + 1 = 128 * 8 + 5), a tail only (3, on
// the vector path: no whole pack), and the scalar path (one element off the 16-byte boundary).
struct FlatCase {
  int64_t n;
  size_t off;  // elements
};
const FlatCase kFlatCases[] = {{1029, 0}, {3, 0}, {1029, 1}};

std::string Describe(ElemType t, const FlatCase& c) {
  return Name(t) + ", n " + std::to_string(c.n) + ", off " + std::to_string(c.off);
}

double GeluTanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// x = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Tolerance: rounding to the type +
// 1e-6 max(1, |x|) absolute (tanhf's error, 2 ulp on the GPU, is amplified relative to the
// result where 1 + tanh cancels, x well below 0).
TEST(EmulatedElementwiseTest, GeluTanhMatchesTheReference) {
  for (ElemType t : kTypes) {
    for (const FlatCase& c : kFlatCases) {
      SCOPED_TRACE(Describe(t, c));
      InBothOrders([&] {
        std::mt19937 rng(static_cast<uint32_t>(c.n + c.off));
        Array x(t, c.n, c.off * ElemBytes(t));
        x.Fill(rng, -6.0f, 6.0f);
        if (c.n > 3) {
          x.Set(1, 0.0f);
          x.Set(2, 30.0f);
          x.Set(c.n - 1, -30.0f);
        }
        std::vector<double> xv(static_cast<size_t>(c.n));
        for (int64_t i = 0; i < c.n; ++i) xv[static_cast<size_t>(i)] = x.Get(i);
        ExpectLaunched(cuda::LaunchGeluTanh(x.p(), t, c.n, nullptr));
        Misses miss("x");
        for (int64_t i = 0; i < c.n; ++i) {
          const double v = xv[static_cast<size_t>(i)], want = GeluTanh(v);
          miss.Near(i, x.Get(i), want,
                    RoundingTolerance(t, want) + 1e-6 * std::max(1.0, std::abs(v)));
        }
        EXPECT_TRUE(x.GuardsUntouched());
      });
    }
  }
}

// x = 0.5 x (1 + erf(x / sqrt(2))), GPT-NeoX's "gelu". Tolerance: rounding to the type + 1e-6
// max(1, |x|) absolute (erff's error, 2 ulp on the GPU, amplified where 1 + erf cancels).
TEST(EmulatedElementwiseTest, GeluErfMatchesTheReference) {
  for (ElemType t : kTypes) {
    for (const FlatCase& c : kFlatCases) {
      SCOPED_TRACE(Describe(t, c));
      InBothOrders([&] {
        std::mt19937 rng(static_cast<uint32_t>(c.n + c.off + 7));
        Array x(t, c.n, c.off * ElemBytes(t));
        x.Fill(rng, -6.0f, 6.0f);
        if (c.n > 3) {
          x.Set(1, 0.0f);
          x.Set(2, 30.0f);
          x.Set(c.n - 1, -30.0f);
        }
        std::vector<double> xv(static_cast<size_t>(c.n));
        for (int64_t i = 0; i < c.n; ++i) xv[static_cast<size_t>(i)] = x.Get(i);
        ExpectLaunched(cuda::LaunchGeluErf(x.p(), t, c.n, nullptr));
        Misses miss("x");
        for (int64_t i = 0; i < c.n; ++i) {
          const double v = xv[static_cast<size_t>(i)];
          const double want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
          miss.Near(i, x.Get(i), want,
                    RoundingTolerance(t, want) + 1e-6 * std::max(1.0, std::abs(v)));
        }
        EXPECT_TRUE(x.GuardsUntouched());
      });
    }
  }
}

// Partial rotary (GPT-NeoX) runs as full RoPE whose table ends in zero frequencies
// (engine/transformer/transformer.cc, RotaryDimOrder): those pairs must come back bit for bit.
TEST(EmulatedElementwiseTest, RopeLeavesZeroFrequencyPairsExact) {
  const int64_t tokens = 3, heads = 2, head_dim = 16, half = head_dim / 2, rotary_half = 2;
  std::vector<double> inv_freq(static_cast<size_t>(half), 0.0);
  for (int64_t i = 0; i < rotary_half; ++i) {
    inv_freq[static_cast<size_t>(i)] = std::pow(10000.0, -2.0 * static_cast<double>(i) / 4.0);
  }
  const std::vector<int32_t> positions = {0, 7, 2047};
  for (ElemType t : kTypes) {
    SCOPED_TRACE(Name(t));
    std::mt19937 rng(5);
    Array x(t, tokens * heads * head_dim, 0);
    x.Fill(rng, -2.0f, 2.0f);
    std::vector<double> before(static_cast<size_t>(tokens * heads * head_dim));
    for (size_t i = 0; i < before.size(); ++i) before[i] = x.Get(static_cast<int64_t>(i));
    const Buffer pos = Int32s(positions);
    ExpectLaunched(cuda::LaunchRope(x.p(), t, tokens, heads, head_dim,
                                    static_cast<const int32_t*>(pos.p), inv_freq.data(), 1.0,
                                    nullptr));
    int changed = 0;
    for (int64_t tok = 0; tok < tokens; ++tok) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t d = 0; d < head_dim; ++d) {
          const int64_t i = (tok * heads + h) * head_dim + d;
          const bool rotary = d % half < rotary_half;
          if (!rotary) {
            EXPECT_EQ(x.Get(i), before[static_cast<size_t>(i)]) << "element " << i;
          } else if (x.Get(i) != before[static_cast<size_t>(i)]) {
            ++changed;
          }
        }
      }
    }
    EXPECT_GT(changed, 0);  // the rotary pairs did turn (positions 7 and 2047)
    EXPECT_TRUE(x.GuardsUntouched());
  }
}

// x = max(x, 0) as the CPU backend's std::max(x, 0.0f): exact, and -0 and NaN pass through.
TEST(EmulatedElementwiseTest, ReluIsExact) {
  for (ElemType t : kTypes) {
    for (const FlatCase& c : kFlatCases) {
      SCOPED_TRACE(Describe(t, c));
      InBothOrders([&] {
        std::mt19937 rng(static_cast<uint32_t>(c.n + c.off + 1));
        Array x(t, c.n, c.off * ElemBytes(t));
        x.Fill(rng, -3.0f, 3.0f);
        x.Set(0, -0.0f);
        if (c.n > 3) {
          x.Set(2, 0.0f);
          x.Set(3, std::numeric_limits<float>::quiet_NaN());
        }
        std::vector<double> xv(static_cast<size_t>(c.n));
        for (int64_t i = 0; i < c.n; ++i) xv[static_cast<size_t>(i)] = x.Get(i);
        ExpectLaunched(cuda::LaunchRelu(x.p(), t, c.n, nullptr));
        EXPECT_TRUE(std::signbit(x.Get(0)) && x.Get(0) == 0.0) << "-0 stays -0";
        if (c.n > 3) {
          EXPECT_TRUE(std::isnan(x.Get(3))) << "NaN stays NaN";
        }
        Misses miss("x");
        for (int64_t i = 0; i < c.n; ++i) {
          if (i == 3 && c.n > 3) continue;
          const double v = xv[static_cast<size_t>(i)];
          miss.Near(i, x.Get(i), v < 0.0 ? 0.0 : v, 0.0);
        }
        EXPECT_TRUE(x.GuardsUntouched());
      });
    }
  }
}

// x *= factor in f32, rounded once (Gemma's embedding scale sqrt(hidden)): within the rounding
// to the type of the double product.
TEST(EmulatedElementwiseTest, ScaleMatchesTheReference) {
  const float factor = std::sqrt(48.0f);
  for (ElemType t : kTypes) {
    for (const FlatCase& c : kFlatCases) {
      SCOPED_TRACE(Describe(t, c));
      InBothOrders([&] {
        std::mt19937 rng(static_cast<uint32_t>(c.n + c.off + 11));
        Array x(t, c.n, c.off * ElemBytes(t));
        x.Fill(rng, -3.0f, 3.0f);
        std::vector<double> xv(static_cast<size_t>(c.n));
        for (int64_t i = 0; i < c.n; ++i) xv[static_cast<size_t>(i)] = x.Get(i);
        ExpectLaunched(cuda::LaunchScale(x.p(), t, c.n, factor, nullptr));
        Misses miss("x");
        for (int64_t i = 0; i < c.n; ++i) {
          const double want = xv[static_cast<size_t>(i)] * static_cast<double>(factor);
          miss.Near(i, x.Get(i), want, RoundingTolerance(t, want) + 1e-6 * std::abs(want));
        }
        EXPECT_TRUE(x.GuardsUntouched());
      });
    }
  }
}

// x += y in f32, rounded once: bit-exact. Also with only y off its alignment (the scalar path,
// though x is aligned).
TEST(EmulatedElementwiseTest, AddIsExact) {
  struct Case {
    int64_t n;
    size_t x_off, y_off;
  };
  const Case cases[] = {{1029, 0, 0}, {3, 0, 0}, {1029, 1, 1}, {1029, 0, 1}};
  for (ElemType t : kTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(Name(t) + ", n " + std::to_string(c.n) + ", offsets " + std::to_string(c.x_off) +
                   "/" + std::to_string(c.y_off));
      InBothOrders([&] {
        std::mt19937 rng(static_cast<uint32_t>(c.n + c.x_off * 2 + c.y_off));
        Array x(t, c.n, c.x_off * ElemBytes(t)), y(t, c.n, c.y_off * ElemBytes(t));
        x.Fill(rng, -4.0f, 4.0f);
        y.Fill(rng, -4.0f, 4.0f);
        const std::vector<uint32_t> before = x.AllBits();
        ExpectLaunched(cuda::LaunchAdd(x.p(), y.p(), t, c.n, nullptr));
        Misses miss("x");
        for (int64_t i = 0; i < c.n; ++i) {
          const float sum =
              ValueOf(t, before[static_cast<size_t>(i)]) + static_cast<float>(y.Get(i));
          miss.Bits(i, x.Bits(i), BitsIn(t, sum));
        }
        EXPECT_TRUE(x.GuardsUntouched());
      });
    }
  }
}

// ---- LaunchSwiGlu / LaunchGeGlu ----

struct GluCase {
  int64_t rows, inter;
  size_t off;  // elements
};

// Vector path: inter 64 (every type), 1032 (f32: 258 packs, two blocks per row; 16-bit: 129
// packs); scalar path: inter 37, and 64 with the buffers one element off.
const GluCase kGluCases[] = {{3, 64, 0}, {2, 1032, 0}, {3, 37, 0}, {2, 64, 1}};

template <typename Launcher, typename Act>
void CheckGlu(Launcher launch, Act act, double f32_tol, const char* what) {
  for (ElemType t : kTypes) {
    for (const GluCase& c : kGluCases) {
      SCOPED_TRACE(std::string(what) + ", " + Name(t) + ", rows " + std::to_string(c.rows) +
                   ", inter " + std::to_string(c.inter) + ", off " + std::to_string(c.off));
      InBothOrders([&] {
        std::mt19937 rng(static_cast<uint32_t>(c.inter + c.off));
        Array gate_up(t, c.rows * 2 * c.inter, c.off * ElemBytes(t));
        Array out(t, c.rows * c.inter, c.off * ElemBytes(t));
        gate_up.Fill(rng, -6.0f, 6.0f);
        ExpectLaunched(launch(gate_up.p(), out.p(), t, c.rows, c.inter, nullptr));
        Misses miss("out");
        for (int64_t r = 0; r < c.rows; ++r) {
          for (int64_t i = 0; i < c.inter; ++i) {
            const double g = gate_up.Get(r * 2 * c.inter + i);
            const double u = gate_up.Get(r * 2 * c.inter + c.inter + i);
            const double want = act(g) * u;
            miss.Near(
                r * c.inter + i, out.Get(r * c.inter + i), want,
                RoundingTolerance(t, want) + f32_tol * std::max(1.0, std::abs(g)) * std::abs(u));
          }
        }
        EXPECT_TRUE(out.GuardsUntouched());
      });
    }
  }
}

// out = silu(gate) * up. Tolerance: rounding to the type + 1e-6 |gate| |up| (expf, a quotient
// and a product in f32).
TEST(EmulatedElementwiseTest, SwiGluMatchesTheReference) {
  CheckGlu(
      cuda::LaunchSwiGlu, [](double g) { return g / (1.0 + std::exp(-g)); }, 1e-6, "SwiGlu");
}

// out = gelu_tanh(gate) * up. Tolerance: as GeluTanh's, times |up|.
TEST(EmulatedElementwiseTest, GeGluMatchesTheReference) {
  CheckGlu(cuda::LaunchGeGlu, GeluTanh, 1e-6, "GeGlu");
}

// ---- LaunchAddBias ----

// out [rows, cols] += bias [cols] in f32, rounded once: bit-exact, for every out / bias type
// pair; cols 37 (one block) and 300 (two blocks per row).
TEST(EmulatedElementwiseTest, AddBiasIsExactOnEveryTypePair) {
  const int64_t rows = 5;
  for (ElemType ot : kTypes) {
    for (ElemType bt : kTypes) {
      for (int64_t cols : {37, 300}) {
        SCOPED_TRACE("out " + Name(ot) + ", bias " + Name(bt) + ", cols " + std::to_string(cols));
        InBothOrders([&] {
          std::mt19937 rng(static_cast<uint32_t>(cols));
          Array out(ot, rows * cols), bias(bt, cols);
          out.Fill(rng, -8.0f, 8.0f);
          bias.Fill(rng, -1.0f, 1.0f);
          const std::vector<uint32_t> before = out.AllBits();
          ExpectLaunched(cuda::LaunchAddBias(out.p(), ot, bias.p(), bt, rows, cols, nullptr));
          Misses miss("out");
          for (int64_t i = 0; i < rows * cols; ++i) {
            const float sum = ValueOf(ot, before[static_cast<size_t>(i)]) +
                              static_cast<float>(bias.Get(i % cols));
            miss.Bits(i, out.Bits(i), BitsIn(ot, sum));
          }
          EXPECT_TRUE(out.GuardsUntouched());
        });
      }
    }
  }
}

// ---- LaunchMergeStates ----

// Merging two attention states per (token, head). The pairs' lse cycle through: both finite,
// only b's, only a's (-inf on the other side), neither (a stays as it was, bit for bit), equal.
// Shapes: head_dim 64 (vector path: 16 x 16 or 8 x 32 threads per block), 36 (vector for f32
// only), 300 (f32 vector with 75 x 3 threads; 16-bit scalar: 256 x 1 threads, two passes),
// 40 x 4 pairs (5 or 10 blocks), the buffers one element off (scalar), head_dim 0 (only lse
// merges), and a b weight of -inf (b counts for nothing). Tolerances: o, rounding to the type +
// 2e-6 max(|o_a|, |o_b|); lse, 1e-6 max(1, |lse|) (expf, logf and a few f32 operations).
TEST(EmulatedElementwiseTest, MergeStatesMatchesTheReference) {
  struct Case {
    int64_t tokens, heads, head_dim;
    size_t off;
    float b_log_weight;
  };
  const Case cases[] = {{3, 4, 64, 0, 0.0f},   {2, 3, 36, 0, -0.7f}, {2, 2, 300, 0, 1.3f},
                        {40, 4, 64, 0, 0.25f}, {3, 2, 64, 1, -1.5f}, {3, 4, 0, 0, 0.5f},
                        {2, 3, 64, 0, -kInfF}};
  const float kNegInf = -kInfF;
  for (ElemType t : kTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(Name(t) + ", tokens " + std::to_string(c.tokens) + ", heads " +
                   std::to_string(c.heads) + ", head_dim " + std::to_string(c.head_dim) + ", off " +
                   std::to_string(c.off) + ", b_log_weight " + std::to_string(c.b_log_weight));
      const int64_t pairs = c.tokens * c.heads, d = c.head_dim;
      InBothOrders([&] {
        std::mt19937 rng(static_cast<uint32_t>(pairs + d));
        std::uniform_real_distribution<float> u(-5.0f, 5.0f);
        Array oa(t, pairs * d, c.off * ElemBytes(t)), ob(t, pairs * d, c.off * ElemBytes(t));
        Array la(kF32, pairs), lb(kF32, pairs);
        oa.Fill(rng, -1.0f, 1.0f);
        ob.Fill(rng, -1.0f, 1.0f);
        for (int64_t p = 0; p < pairs; ++p) {
          const float a = u(rng), b = u(rng);
          switch (p % 5) {
            case 0:
              la.Set(p, a);
              lb.Set(p, b);
              break;
            case 1:
              la.Set(p, kNegInf);
              lb.Set(p, b);
              for (int64_t i = 0; i < d; ++i) oa.Set(p * d + i, 0.0f);  // a saw nothing
              break;
            case 2:
              la.Set(p, a);
              lb.Set(p, kNegInf);
              for (int64_t i = 0; i < d; ++i) ob.Set(p * d + i, 0.0f);
              break;
            case 3:
              la.Set(p, kNegInf);
              lb.Set(p, kNegInf);
              break;
            default:  // the same lse on both sides, b's weight included
              la.Set(p, a);
              lb.Set(p, std::isinf(c.b_log_weight) ? b : a - c.b_log_weight);
              break;
          }
        }
        const std::vector<uint32_t> oa_before = oa.AllBits(), la_before = la.AllBits();
        const std::vector<uint32_t> ob_before = ob.AllBits(), lb_before = lb.AllBits();
        ExpectLaunched(cuda::LaunchMergeStates(oa.p(), static_cast<float*>(la.p()), ob.p(),
                                               static_cast<const float*>(lb.p()), t, c.tokens,
                                               c.heads, d, c.b_log_weight, nullptr));
        Misses miss_o("o_a"), miss_lse("lse_a");
        for (int64_t p = 0; p < pairs; ++p) {
          const double a = ValueOf(kF32, la_before[static_cast<size_t>(p)]);
          const double b = ValueOf(kF32, lb_before[static_cast<size_t>(p)]) + c.b_log_weight;
          const double m = std::max(a, b);
          if (m == -std::numeric_limits<double>::infinity()) {
            for (int64_t i = 0; i < d; ++i) {
              miss_o.Bits(p * d + i, oa.Bits(p * d + i), oa_before[static_cast<size_t>(p * d + i)]);
            }
            miss_lse.Bits(p, la.Bits(p), la_before[static_cast<size_t>(p)]);
            continue;
          }
          const double wa = std::exp(a - m), wb = std::exp(b - m);
          for (int64_t i = 0; i < d; ++i) {
            const double x = ValueOf(t, oa_before[static_cast<size_t>(p * d + i)]);
            const double y = ValueOf(t, ob_before[static_cast<size_t>(p * d + i)]);
            const double want = (wa * x + wb * y) / (wa + wb);
            miss_o.Near(p * d + i, oa.Get(p * d + i), want,
                        RoundingTolerance(t, want) + 2e-6 * std::max(std::abs(x), std::abs(y)));
          }
          const double want_lse = m + std::log(wa + wb);
          miss_lse.Near(p, la.Get(p), want_lse, 1e-6 * std::max(1.0, std::abs(want_lse)));
        }
        EXPECT_EQ(ob.AllBits(), ob_before);
        EXPECT_EQ(lb.AllBits(), lb_before);
        EXPECT_TRUE(oa.GuardsUntouched());
        EXPECT_TRUE(la.GuardsUntouched());
      });
    }
  }
}

// ---- LaunchFill / LaunchFillRandom ----

// p[i] = value rounded to the type, bit for bit (a third rounds; -inf as the backend's empty lse;
// 70000 overflows f16 to inf), at any alignment; nothing past n.
TEST(EmulatedElementwiseTest, FillWritesTheRoundedValue) {
  for (ElemType t : kTypes) {
    for (float value : {1.0f / 3.0f, -kInfF, 70000.0f, -0.0f}) {
      for (const FlatCase& c : kFlatCases) {
        SCOPED_TRACE(Describe(t, c) + ", value " + std::to_string(value));
        InBothOrders([&] {
          Array p(t, c.n, c.off * ElemBytes(t));
          ExpectLaunched(cuda::LaunchFill(p.p(), t, c.n, value, nullptr));
          Misses miss("p");
          for (int64_t i = 0; i < c.n; ++i) miss.Bits(i, p.Bits(i), BitsIn(t, value));
          EXPECT_TRUE(p.GuardsUntouched());
        });
      }
    }
  }
}

// Deterministic values of (seed, i): the same on every launch and schedule, magnitude in
// [0.25, 1], never zero, both signs, other values for another seed, and the 16-bit types hold the
// f32 values rounded (every kernel computes in f32 and rounds when it stores).
TEST(EmulatedElementwiseTest, FillRandomIsDeterministicAndInRange) {
  const int64_t n = 1029;
  InBothOrders([&] {
    Array f32(kF32, n);
    ExpectLaunched(cuda::LaunchFillRandom(f32.p(), kF32, n, 7u, nullptr));
    EXPECT_TRUE(f32.GuardsUntouched());
    int64_t negative = 0;
    Misses range("f32 value");
    for (int64_t i = 0; i < n; ++i) {
      const double v = f32.Get(i);
      range.True(i, std::abs(v) >= 0.25 && std::abs(v) <= 1.0, std::to_string(v));
      negative += v < 0.0;
    }
    EXPECT_GT(negative, n / 4);
    EXPECT_LT(negative, 3 * n / 4);

    Array again(kF32, n), other(kF32, n);
    ExpectLaunched(cuda::LaunchFillRandom(again.p(), kF32, n, 7u, nullptr));
    ExpectLaunched(cuda::LaunchFillRandom(other.p(), kF32, n, 8u, nullptr));
    EXPECT_EQ(again.AllBits(), f32.AllBits());
    int64_t same = 0;
    for (int64_t i = 0; i < n; ++i) same += other.Bits(i) == f32.Bits(i);
    EXPECT_LT(same, n / 100);

    for (ElemType t : {kF16, kBF16}) {
      SCOPED_TRACE(Name(t));
      Array p(t, n, 2);  // any alignment
      ExpectLaunched(cuda::LaunchFillRandom(p.p(), t, n, 7u, nullptr));
      Misses miss("value");
      for (int64_t i = 0; i < n; ++i) {
        miss.Bits(i, p.Bits(i), BitsIn(t, static_cast<float>(f32.Get(i))));
      }
      EXPECT_TRUE(p.GuardsUntouched());
    }
  });
}

// ---- Arguments and launches ----

// An empty problem launches nothing and succeeds; a negative size (or an impossible RoPE head
// size) is cudaErrorInvalidValue, also without a launch.
TEST(EmulatedElementwiseTest, EmptyAndInvalidProblemsLaunchNothing) {
  Array x(kF32, 8), y(kF32, 8);
  const Buffer idx = Int32s({0, 0, 0, 0});
  const auto* ids = static_cast<const int32_t*>(idx.p);
  const double inv_freq[cuda::kMaxRopeHalf + 1] = {};
  const int64_t launches = simt::Count().launches;
  const cudaError_t kOk = cudaSuccess, kBad = cudaErrorInvalidValue;
  void* p = x.p();
  const void* q = y.p();
  EXPECT_EQ(cuda::LaunchConvert(q, kF32, p, kF16, 0, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchConvert(q, kF32, p, kF16, -1, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchGatherRows(q, 2, ids, 0, 16, p, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchGatherRows(q, 2, ids, 2, 0, p, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchGatherRows(q, 2, ids, -1, 16, p, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchGatherRows(q, -1, ids, 2, 16, p, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchCopy2D(p, 16, q, 16, 16, 0, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchCopy2D(p, 16, q, 16, 0, 2, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchCopy2D(p, 16, q, 16, 16, -1, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchEmbeddingAdd(ids, 0, q, 2, 4, p, kF32, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchEmbeddingAdd(ids, 2, q, 2, 0, p, kF32, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchEmbeddingAdd(ids, -1, q, 2, 4, p, kF32, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchEmbeddingAdd(ids, 2, q, -1, 4, p, kF32, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchRmsNorm(q, q, p, kF32, 0, 4, 1e-5f, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchRmsNorm(q, q, p, kF32, 2, 0, 1e-5f, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchRmsNorm(q, q, p, kF32, -1, 4, 1e-5f, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchLayerNorm(q, q, q, p, kF32, 0, 4, 1e-5f, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchLayerNorm(q, q, q, p, kF32, 2, -4, 1e-5f, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchRope(p, kF32, 0, 1, 4, ids, inv_freq, 1.0, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchRope(p, kF32, 1, 0, 4, ids, inv_freq, 1.0, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchRope(p, kF32, 1, 1, 3, ids, inv_freq, 1.0, nullptr), kBad);  // odd
  EXPECT_EQ(
      cuda::LaunchRope(p, kF32, 1, 1, 2 * cuda::kMaxRopeHalf + 2, ids, inv_freq, 1.0, nullptr),
      kBad);
  EXPECT_EQ(cuda::LaunchRope(p, kF32, -1, 1, 4, ids, inv_freq, 1.0, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchGeluTanh(p, kF32, 0, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchGeluTanh(p, kF32, -1, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchGeluErf(p, kF32, 0, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchGeluErf(p, kF32, -1, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchSwiGlu(q, p, kF32, 0, 4, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchSwiGlu(q, p, kF32, 2, -4, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchGeGlu(q, p, kF32, 2, 0, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchGeGlu(q, p, kF32, -2, 4, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchRelu(p, kF32, 0, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchRelu(p, kF32, -1, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchAdd(p, q, kF32, 0, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchAdd(p, q, kF32, -1, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchAddBias(p, kF32, q, kF32, 0, 4, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchAddBias(p, kF32, q, kF32, 2, -1, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchMergeStates(p, static_cast<float*>(p), q, static_cast<const float*>(q),
                                    kF32, 0, 2, 4, 0.0f, nullptr),
            kOk);
  EXPECT_EQ(cuda::LaunchMergeStates(p, static_cast<float*>(p), q, static_cast<const float*>(q),
                                    kF32, 2, -1, 4, 0.0f, nullptr),
            kBad);
  EXPECT_EQ(cuda::LaunchFill(p, kF32, 0, 1.0f, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchFill(p, kF32, -1, 1.0f, nullptr), kBad);
  EXPECT_EQ(cuda::LaunchFillRandom(p, kF32, 0, 1u, nullptr), kOk);
  EXPECT_EQ(cuda::LaunchFillRandom(p, kF32, -1, 1u, nullptr), kBad);
  EXPECT_EQ(simt::Count().launches, launches);
  for (int64_t i = 0; i < 8; ++i) EXPECT_TRUE(x.Untouched(i)) << i;
  EXPECT_TRUE(x.GuardsUntouched());
}

// A refused launch (RoPE's 2 KiB of parameters over a lowered limit) is reported by its own call
// (launch.cuh's Launch and LaunchResult), touches nothing, and is not reported again by the next.
TEST(EmulatedElementwiseTest, AFailedLaunchIsReportedOnceByItsCaller) {
  Array x(kF32, 2 * 8);
  const Buffer pos = Int32s({3, 4});
  const double inv_freq[4] = {1.0, 0.5, 0.25, 0.125};
  const size_t saved = simt::Props().max_param_bytes;
  simt::Props().max_param_bytes = 1024;
  const cudaError_t refused = cuda::LaunchRope(
      x.p(), kF32, 2, 1, 8, static_cast<const int32_t*>(pos.p), inv_freq, 1.0, nullptr);
  simt::Props().max_param_bytes = saved;
  EXPECT_EQ(refused, cudaErrorInvalidValue);
  for (int64_t i = 0; i < 16; ++i) EXPECT_TRUE(x.Untouched(i)) << i;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ExpectLaunched(cuda::LaunchFill(x.p(), kF32, 16, 2.0f, nullptr));
  EXPECT_EQ(x.Get(15), 2.0);
}

// Rows beyond gridDim.y's limit (65535), so that some blocks take a second row: GatherRows' row
// loop (Copy2D, EmbeddingAdd, the Glu kernels and AddBias loop the same way). One warp per block
// and no barriers keep this to about a second per schedule; the norms' and RoPE's row loops over
// 65536 blocks of barriers and shuffles would take half a minute here, so they are not covered.
TEST(EmulatedElementwiseTest, RowsBeyondTheGridYLimitAreStrided) {
  InBothOrders([&] {
    const int64_t rows = 65535 + 5;
    std::vector<int32_t> idx(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) idx[static_cast<size_t>(r)] = static_cast<int32_t>(r % 7);
    Array x(kF32, 7), out(kF32, rows);
    for (int64_t i = 0; i < 7; ++i) x.Set(i, static_cast<float>(i + 1));
    const Buffer idx_buf = Int32s(idx);
    ExpectLaunched(cuda::LaunchGatherRows(x.p(), 7, static_cast<const int32_t*>(idx_buf.p), rows, 4,
                                          out.p(), nullptr));
    Misses miss("gathered");
    for (int64_t r = 0; r < rows; ++r)
      miss.Near(r, out.Get(r), static_cast<double>(r % 7 + 1), 0.0);
    EXPECT_TRUE(out.GuardsUntouched());
  });
}

}  // namespace
