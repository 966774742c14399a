// Every backend op against the CPU backend (the reference), on fresh random data, outputs poisoned
// with NaN first so an unwritten element fails. The backend under test computes in its dtype from
// inputs rounded to that dtype; the CPU computes in f32 from the same rounded values, so the
// difference is the backend's own arithmetic. Tolerances (relative L2 error, stated per dtype):
//   f32  2e-5  (accumulation order only: cuBLASLt without TF32, our kernels in f32)
//   f16  4e-3  (outputs and attention probabilities rounded to 11-bit mantissas)
//   bf16 2e-2  (8-bit mantissas)
// The same tolerances hold for AttendBiased and ALiBi attention: the bias (and the ALiBi slopes
// and positions) are f32 on both sides, so they add no error of their own. 16-bit K/V that the
// CUDA tensor-core kernel reads take the K/V type's tolerance when it is the coarser (q and the
// probabilities are rounded to it).
// Instantiated as Cuda/... (ctest label gpu; SKIPPED with the driver's reason without a GPU).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "engine/backends/backend_factory.h"
#include "engine/model/arch_traits.h"
#include "engine/model/rope_scaling.h"
#include "testing/simt/simt.h"  // the emulator's knobs (simt-cuda)
#include "tests/engine/backend/backend_test_util.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

struct ParityCase {
  std::string backend;
  DType dtype;
};

void PrintTo(const ParityCase& c, std::ostream* os) {
  *os << c.backend << "/" << DTypeName(c.dtype);
}

double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return 2e-2;
    case DType::kF16:
      return 4e-3;
    default:
      return 2e-5;
  }
}

class BackendParityTest : public ::testing::TestWithParam<ParityCase> {
 protected:
  void SetUp() override {
    const std::string why = BackendUnavailable(GetParam().backend);
    if (!why.empty()) GTEST_SKIP() << why;
    backend_ = NamedTestBackend(GetParam().backend, nullptr);
  }
  Backend& b() { return *backend_; }
  Backend& cpu() { return TestBackend(); }
  DType dt() const { return GetParam().dtype; }
  double tol() const { return Tolerance(GetParam().dtype); }
  // The CUDA code on the SIMT emulator, which runs every CUDA thread as a fiber: the long shapes
  // are cut (the kernels' tile, split and pipeline paths are all still reached).
  bool emulated() const { return GetParam().backend == "simt-cuda"; }
  // Host values rounded to the dtype under test (what both sides compute from).
  std::vector<float> Values(int64_t n, float scale = 1.0f) {
    return RoundedTo(RandomValues(rng_, n, scale), dt());
  }
  // Context K/V [len, kv_heads, D] of random values rounded to `dtype` (K scaled by k_scale), the
  // same values uploaded to the backend under test (kb, vb) and to the CPU (kc, vc).
  struct ContextKv {
    Tensor kb, vb, kc, vc;
  };
  ContextKv RandomContextKv(DType dtype, int64_t len, int64_t kv_heads, int64_t D, float k_scale) {
    const auto ck = RoundedTo(RandomValues(rng_, len * kv_heads * D, k_scale), dtype);
    const auto cv = RoundedTo(RandomValues(rng_, len * kv_heads * D), dtype);
    return {Upload(b(), ck, dtype, {len, kv_heads, D}), Upload(b(), cv, dtype, {len, kv_heads, D}),
            Upload(cpu(), ck, dtype, {len, kv_heads, D}),
            Upload(cpu(), cv, dtype, {len, kv_heads, D})};
  }
  void ExpectClose(const Tensor& got, const Tensor& want, const std::string& what,
                   double tolerance = -1) {
    const double err = RelativeError(Download(b(), got), Download(cpu(), want));
    EXPECT_LE(err, tolerance < 0 ? tol() : tolerance) << what;
    RecordProperty("rel_err_" + what, std::to_string(err));
  }

  std::mt19937 rng_{20261124};

 private:
  Backend* backend_ = nullptr;
};

TEST_P(BackendParityTest, ConvertRoundsToNearestEvenBothWays) {
  const std::vector<float> v = RandomValues(rng_, 4099, 70000.0f);  // f16 overflows past 65504
  for (DType from : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType to : {DType::kF32, DType::kBF16, DType::kF16}) {
      const std::vector<float> src = RoundedTo(v, from);
      Tensor s = Upload(b(), src, from, {4099});
      Tensor d = Poisoned(b(), to, {4099});
      b().Convert(s, d);
      const std::vector<float> got = Download(b(), d);
      const std::vector<float> want = RoundedTo(src, to);
      int mismatches = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        if (!(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))) ++mismatches;
      }
      EXPECT_EQ(mismatches, 0) << DTypeName(from) << " -> " << DTypeName(to);
    }
  }
}

TEST_P(BackendParityTest, EmbeddingAndGatherRows) {
  const int64_t V = 300, H = 96, T = 37;
  const auto table = Values(V * H);
  std::vector<int32_t> ids(T);
  std::uniform_int_distribution<int32_t> id(0, V - 1);
  for (auto& i : ids) i = id(rng_);
  for (bool accumulate : {false, true}) {
    const auto base = Values(T * H);
    Tensor out = Upload(b(), base, dt(), {T, H});
    Tensor ref = Upload(cpu(), base, DType::kF32, {T, H});
    if (!accumulate) out = Poisoned(b(), dt(), {T, H});
    b().Embedding(UploadInts(b(), ids), Upload(b(), table, dt(), {V, H}), out, accumulate);
    cpu().Embedding(UploadInts(cpu(), ids), Upload(cpu(), table, DType::kF32, {V, H}), ref,
                    accumulate);
    ExpectClose(out, ref, accumulate ? "embedding_accumulate" : "embedding");
  }
  const std::vector<int32_t> rows = {5, 0, 36, 5, 17};
  const auto x = Values(T * H);
  Tensor g = Poisoned(b(), dt(), {5, H});
  Tensor gr = Poisoned(cpu(), DType::kF32, {5, H});
  b().GatherRows(Upload(b(), x, dt(), {T, H}), UploadInts(b(), rows), g);
  cpu().GatherRows(Upload(cpu(), x, DType::kF32, {T, H}), UploadInts(cpu(), rows), gr);
  ExpectClose(g, gr, "gather_rows", 0.0);
}

TEST_P(BackendParityTest, Norms) {
  for (int64_t H : {64, 768, 2049}) {
    const int64_t T = 19;
    const auto x = Values(T * H, 3.0f), w = Values(H), bias = Values(H);
    Tensor out = Poisoned(b(), dt(), {T, H}), ref = Poisoned(cpu(), DType::kF32, {T, H});
    b().RmsNorm(Upload(b(), x, dt(), {T, H}), Upload(b(), w, dt(), {H}), 1e-5f, out);
    cpu().RmsNorm(Upload(cpu(), x, DType::kF32, {T, H}), Upload(cpu(), w, DType::kF32, {H}), 1e-5f,
                  ref);
    ExpectClose(out, ref, "rms_norm_" + std::to_string(H));
    out = Poisoned(b(), dt(), {T, H});
    ref = Poisoned(cpu(), DType::kF32, {T, H});
    b().LayerNorm(Upload(b(), x, dt(), {T, H}), Upload(b(), w, dt(), {H}),
                  Upload(b(), bias, dt(), {H}), 1e-5f, out);
    cpu().LayerNorm(Upload(cpu(), x, DType::kF32, {T, H}), Upload(cpu(), w, DType::kF32, {H}),
                    Upload(cpu(), bias, DType::kF32, {H}), 1e-5f, ref);
    ExpectClose(out, ref, "layer_norm_" + std::to_string(H));
  }
}

TEST_P(BackendParityTest, LinearBothLayoutsWithAndWithoutBiasAndF32Out) {
  for (int64_t T : {1, 7, 130}) {
    for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
      for (bool with_bias : {false, true}) {
        for (DType out_dtype : {dt(), DType::kF32}) {
          const int64_t in = 96, outf = 200;
          const auto x = Values(T * in), w = Values(in * outf, 0.2f), bias = Values(outf);
          std::vector<int64_t> wshape = layout == WeightLayout::kOutIn
                                            ? std::vector<int64_t>{outf, in}
                                            : std::vector<int64_t>{in, outf};
          Tensor out = Poisoned(b(), out_dtype, {T, outf});
          Tensor ref = Poisoned(cpu(), DType::kF32, {T, outf});
          b().Linear(Upload(b(), x, dt(), {T, in}), Upload(b(), w, dt(), wshape), layout,
                     with_bias ? Upload(b(), bias, dt(), {outf}) : Tensor(), out);
          cpu().Linear(Upload(cpu(), x, DType::kF32, {T, in}),
                       Upload(cpu(), w, DType::kF32, wshape), layout,
                       with_bias ? Upload(cpu(), bias, DType::kF32, {outf}) : Tensor(), ref);
          ExpectClose(out, ref,
                      "linear_T" + std::to_string(T) +
                          (layout == WeightLayout::kOutIn ? "_outin" : "_inout") +
                          (with_bias ? "_bias" : "") + "_out" + std::string(DTypeName(out_dtype)));
        }
      }
    }
  }
}

// LinearActivation against the CPU's Linear then GeluTanh / Relu. On CUDA the activation runs in
// cuBLASLt's epilogue before the one rounding of the output; at f32 this tolerance (2e-5) also
// tells the tanh GELU from the erf one (about 2e-4 apart, relative L2, on outputs of this size).
TEST_P(BackendParityTest, LinearActivationIsLinearThenTheActivation) {
  for (GemmActivation act : {GemmActivation::kGeluTanh, GemmActivation::kRelu}) {
    for (int64_t T : {1, 13}) {
      for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
        for (bool with_bias : {false, true}) {
          for (DType out_dtype : {dt(), DType::kF32}) {
            const int64_t in = 96, outf = 136;
            const auto x = Values(T * in, 2.0f), w = Values(in * outf, 0.2f), bias = Values(outf);
            std::vector<int64_t> wshape = layout == WeightLayout::kOutIn
                                              ? std::vector<int64_t>{outf, in}
                                              : std::vector<int64_t>{in, outf};
            Tensor out = Poisoned(b(), out_dtype, {T, outf});
            Tensor ref = Poisoned(cpu(), DType::kF32, {T, outf});
            b().LinearActivation(Upload(b(), x, dt(), {T, in}), Upload(b(), w, dt(), wshape),
                                 layout, with_bias ? Upload(b(), bias, dt(), {outf}) : Tensor(),
                                 act, out);
            cpu().Linear(Upload(cpu(), x, DType::kF32, {T, in}),
                         Upload(cpu(), w, DType::kF32, wshape), layout,
                         with_bias ? Upload(cpu(), bias, DType::kF32, {outf}) : Tensor(), ref);
            if (act == GemmActivation::kRelu) {
              cpu().Relu(ref);
            } else {
              cpu().GeluTanh(ref);
            }
            ExpectClose(
                out, ref,
                std::string(act == GemmActivation::kRelu ? "linear_relu" : "linear_gelu") + "_T" +
                    std::to_string(T) + (layout == WeightLayout::kOutIn ? "_outin" : "_inout") +
                    (with_bias ? "_bias" : "") + "_out" + std::string(DTypeName(out_dtype)));
          }
        }
      }
    }
  }
}

// Where cuBLASLt has no kernel with the bias epilogue for a GEMM, Linear adds the bias in a
// separate pass: on the emulator, whose heuristic can be told to find none (a GPU's library
// decides for itself, so there the test has nothing to force).
TEST_P(BackendParityTest, LinearAddsTheBiasApartWhenNoEpilogueKernelExists) {
  if (!emulated()) GTEST_SKIP() << "only the emulated cuBLASLt can be made to find no kernel";
  simt::Props().no_bias_epilogue_algorithm = true;
  const int64_t T = 5, in = 72, outf = 88;  // a shape no other test plans, so a fresh plan
  const auto x = Values(T * in), w = Values(in * outf, 0.2f), bias = Values(outf);
  Tensor out = Poisoned(b(), dt(), {T, outf});
  Tensor ref = Poisoned(cpu(), DType::kF32, {T, outf});
  b().Linear(Upload(b(), x, dt(), {T, in}), Upload(b(), w, dt(), {outf, in}), WeightLayout::kOutIn,
             Upload(b(), bias, dt(), {outf}), out);
  cpu().Linear(Upload(cpu(), x, DType::kF32, {T, in}), Upload(cpu(), w, DType::kF32, {outf, in}),
               WeightLayout::kOutIn, Upload(cpu(), bias, DType::kF32, {outf}), ref);
  simt::Props().no_bias_epilogue_algorithm = false;
  // A 16-bit output is rounded twice on this path (GEMM, then + bias): twice the tolerance.
  ExpectClose(out, ref, "linear_bias_apart", 2 * tol());
}

// A GEMM cuBLASLt has no algorithm for is the op's error, naming the shape; nothing is written,
// and the failure is not remembered: the same shape is planned again once the library finds one.
TEST_P(BackendParityTest, ALinearWithNoCublasLtAlgorithmIsAnErrorNamingTheShape) {
  if (!emulated()) GTEST_SKIP() << "only the emulated cuBLASLt can be made to find no kernel";
  const int64_t T = 3, in = 40, outf = 24;  // a shape no other test plans, so a fresh plan
  const auto x = Values(T * in), w = Values(in * outf, 0.2f);
  const Tensor xt = Upload(b(), x, dt(), {T, in}), wt = Upload(b(), w, dt(), {outf, in});
  Tensor out = Poisoned(b(), dt(), {T, outf});
  simt::Props().no_gemm_algorithm = true;
  b().Linear(xt, wt, WeightLayout::kOutIn, Tensor(), out);
  const absl::Status status = b().Synchronize();
  simt::Props().no_gemm_algorithm = false;
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_NE(status.message().find("no algorithm"), std::string::npos) << status;
  EXPECT_NE(status.message().find("y[3,24]"), std::string::npos) << status;
  for (float v : Download(b(), out)) EXPECT_TRUE(std::isnan(v));  // untouched (poison)
  b().Linear(xt, wt, WeightLayout::kOutIn, Tensor(), out);
  Tensor ref = Poisoned(cpu(), DType::kF32, {T, outf});
  cpu().Linear(Upload(cpu(), x, DType::kF32, {T, in}), Upload(cpu(), w, DType::kF32, {outf, in}),
               WeightLayout::kOutIn, Tensor(), ref);
  ExpectClose(out, ref, "linear_planned_again", tol());
}

TEST_P(BackendParityTest, RopeAndActivations) {
  const int64_t T = 23, heads = 3, D = 64;
  const auto x = Values(T * heads * D);
  std::vector<int32_t> pos(T);
  std::uniform_int_distribution<int32_t> p(0, 8000);
  for (auto& v : pos) v = p(rng_);
  Tensor xb = Upload(b(), x, dt(), {T, heads, D});
  Tensor xc = Upload(cpu(), x, DType::kF32, {T, heads, D});
  b().Rope(xb, UploadInts(b(), pos), DefaultRopeTable(10000.0, D));
  cpu().Rope(xc, UploadInts(cpu(), pos), DefaultRopeTable(10000.0, D));
  ExpectClose(xb, xc, "rope");
  // A scaled table (YaRN: interpolated frequencies and an attention factor on cos/sin).
  RopeScaling yarn;
  yarn.type = RopeType::kYarn;
  yarn.factor = 4.0;
  yarn.original_max_position_embeddings = 2048;
  const RopeTable scaled = ComputeRopeTable(yarn, 10000.0, D, 8192);
  ASSERT_NE(scaled.attention_factor, 1.0);
  Tensor sxb = Upload(b(), x, dt(), {T, heads, D});
  Tensor sxc = Upload(cpu(), x, DType::kF32, {T, heads, D});
  b().Rope(sxb, UploadInts(b(), pos), scaled);
  cpu().Rope(sxc, UploadInts(cpu(), pos), scaled);
  ExpectClose(sxb, sxc, "rope_yarn");

  const int64_t I = 300;
  const auto gu = Values(T * 2 * I, 4.0f);
  Tensor sb = Poisoned(b(), dt(), {T, I}), sc = Poisoned(cpu(), DType::kF32, {T, I});
  b().SwiGlu(Upload(b(), gu, dt(), {T, 2 * I}), sb);
  cpu().SwiGlu(Upload(cpu(), gu, DType::kF32, {T, 2 * I}), sc);
  ExpectClose(sb, sc, "swiglu");

  Tensor gb = Upload(b(), gu, dt(), {T, 2 * I}), gc = Upload(cpu(), gu, DType::kF32, {T, 2 * I});
  b().GeluTanh(gb);
  cpu().GeluTanh(gc);
  ExpectClose(gb, gc, "gelu_tanh");

  // GPT-NeoX's erf GELU: the CPU's vectorised erf against the device's erff.
  Tensor eb = Upload(b(), gu, dt(), {T, 2 * I}), ec = Upload(cpu(), gu, DType::kF32, {T, 2 * I});
  b().GeluErf(eb);
  cpu().GeluErf(ec);
  ExpectClose(eb, ec, "gelu_erf");

  const auto y = Values(T * 2 * I);
  b().Add(gb, Upload(b(), y, dt(), {T, 2 * I}));
  cpu().Add(gc, Upload(cpu(), y, DType::kF32, {T, 2 * I}));
  ExpectClose(gb, gc, "add");

  const int64_t nq = 4 * 16, nk = 2 * 16;
  const auto qkv = Values(T * (nq + 2 * nk));
  Tensor q = Poisoned(b(), dt(), {T, 4, 16}), k = Poisoned(b(), dt(), {T, 2, 16}),
         v = Poisoned(b(), dt(), {T, 2, 16});
  Tensor qc = Poisoned(cpu(), DType::kF32, {T, 4, 16}),
         kc = Poisoned(cpu(), DType::kF32, {T, 2, 16}),
         vc = Poisoned(cpu(), DType::kF32, {T, 2, 16});
  b().SplitQkv(Upload(b(), qkv, dt(), {T, nq + 2 * nk}), q, k, v);
  cpu().SplitQkv(Upload(cpu(), qkv, DType::kF32, {T, nq + 2 * nk}), qc, kc, vc);
  ExpectClose(q, qc, "split_q", 0.0);
  ExpectClose(k, kc, "split_k", 0.0);
  ExpectClose(v, vc, "split_v", 0.0);
}

// A batch for attention tests: sequences of the given (q_len, kv_len), own K/V per sequence.
struct AttnBatch {
  std::vector<AttentionSequence> seqs;
  std::vector<Tensor> k, v;  // kept alive
  int64_t tokens = 0;
};

AttnBatch MakeBatch(Backend& backend, std::mt19937& rng, DType kv_dtype,
                    const std::vector<std::pair<int64_t, int64_t>>& shapes, int64_t kv_heads,
                    int64_t D, uint32_t seed) {
  AttnBatch batch;
  std::mt19937 local(seed);
  batch.k.reserve(shapes.size());
  batch.v.reserve(shapes.size());
  for (auto [q_len, kv_len] : shapes) {
    const int64_t cap = kv_len + 3;
    batch.k.push_back(Upload(backend, RoundedTo(RandomValues(local, cap * kv_heads * D), kv_dtype),
                             kv_dtype, {cap, kv_heads, D}));
    batch.v.push_back(Upload(backend, RoundedTo(RandomValues(local, cap * kv_heads * D), kv_dtype),
                             kv_dtype, {cap, kv_heads, D}));
    AttentionSequence s;
    s.q_begin = batch.tokens;
    s.q_len = q_len;
    s.kv_len = kv_len;
    s.own_log_weight = std::log(3.0f);
    s.weighted_from = 1;
    s.context_from = std::min<int64_t>(1, kv_len);  // own index 0 (bos) does not see the context
    batch.tokens += q_len;
    batch.seqs.push_back(s);
  }
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    batch.seqs[i].k = &batch.k[i];
    batch.seqs[i].v = &batch.v[i];
  }
  (void)rng;
  return batch;
}

struct AttnShape {
  int64_t heads, kv_heads, D;
};

TEST_P(BackendParityTest, AttendOwnPrefillDecodeGqaAndLogWeights) {
  for (AttnShape s :
       {AttnShape{4, 4, 32}, AttnShape{8, 2, 64}, AttnShape{6, 2, 80}, AttnShape{4, 1, 128}}) {
    // Prefill of a whole sequence, a continuation, decode rows and a long prefill.
    const int64_t long_prefill = emulated() ? 80 : 300;
    const std::vector<std::pair<int64_t, int64_t>> shapes = {
        {9, 9}, {4, 20}, {1, 1}, {1, 33}, {long_prefill, long_prefill}};
    AttnBatch on_b = MakeBatch(b(), rng_, dt(), shapes, s.kv_heads, s.D, 7);
    AttnBatch on_c = MakeBatch(cpu(), rng_, dt(), shapes, s.kv_heads, s.D, 7);
    const auto q = Values(on_b.tokens * s.heads * s.D);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    AttentionState out{Poisoned(b(), dt(), {on_b.tokens, s.heads, s.D}),
                       Poisoned(b(), DType::kF32, {on_b.tokens, s.heads})};
    AttentionState ref{Poisoned(cpu(), DType::kF32, {on_c.tokens, s.heads, s.D}),
                       Poisoned(cpu(), DType::kF32, {on_c.tokens, s.heads})};
    b().AttendOwn(Upload(b(), q, dt(), {on_b.tokens, s.heads, s.D}), on_b.seqs, scale, out);
    cpu().AttendOwn(Upload(cpu(), q, DType::kF32, {on_c.tokens, s.heads, s.D}), on_c.seqs, scale,
                    ref);
    const std::string name = "own_h" + std::to_string(s.heads) + "_kv" +
                             std::to_string(s.kv_heads) + "_d" + std::to_string(s.D);
    ExpectClose(out.o, ref.o, name + "_o");
    ExpectClose(out.lse, ref.lse, name + "_lse", 1e-5 + tol() / 10);
  }
}

TEST_P(BackendParityTest, AttendContextEveryContextDtypeBatchOneAndBatched) {
  for (AttnShape s : {AttnShape{4, 4, 32}, AttnShape{12, 12, 64}, AttnShape{8, 2, 64},
                      AttnShape{6, 2, 80}, AttnShape{8, 2, 128}}) {
    for (DType ctx_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t len : {int64_t{700}, int64_t{emulated() ? 1500 : 9000}}) {
        // Batch 1 (a query's rows and a decode row) and a batch of 24 queries of 5 rows.
        for (int batched = 0; batched < 2; ++batched) {
          std::vector<std::pair<int64_t, int64_t>> shapes;
          if (batched) {
            for (int i = 0; i < (emulated() ? 14 : 24); ++i) shapes.push_back({5, 5});
          } else {
            shapes = {{6, 6}, {1, 9}};
          }
          AttnBatch on_b = MakeBatch(b(), rng_, dt(), shapes, s.kv_heads, s.D, 11);
          AttnBatch on_c = MakeBatch(cpu(), rng_, dt(), shapes, s.kv_heads, s.D, 11);
          auto [kb, vb, kc, vc] = RandomContextKv(ctx_dtype, len, s.kv_heads, s.D, 2.0f);
          const auto q = Values(on_b.tokens * s.heads * s.D);
          const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
          AttentionState out{Poisoned(b(), dt(), {on_b.tokens, s.heads, s.D}),
                             Poisoned(b(), DType::kF32, {on_b.tokens, s.heads})};
          AttentionState ref{Poisoned(cpu(), DType::kF32, {on_c.tokens, s.heads, s.D}),
                             Poisoned(cpu(), DType::kF32, {on_c.tokens, s.heads})};
          b().AttendContext(Upload(b(), q, dt(), {on_b.tokens, s.heads, s.D}), on_b.seqs,
                            AttentionContext{&kb, &vb, len, 0.0f}, scale, out);
          cpu().AttendContext(Upload(cpu(), q, DType::kF32, {on_c.tokens, s.heads, s.D}), on_c.seqs,
                              AttentionContext{&kc, &vc, len, 0.0f}, scale, ref);
          const std::string name = "ctx_h" + std::to_string(s.heads) + "_kv" +
                                   std::to_string(s.kv_heads) + "_d" + std::to_string(s.D) + "_" +
                                   std::string(DTypeName(ctx_dtype)) + "_len" +
                                   std::to_string(len) + (batched ? "_batched" : "_batch1");
          // 16-bit context K/V go through the tensor-core kernel, which rounds q and the
          // probabilities to the K/V type: that type's tolerance when it is the coarser.
          const double t = std::max(tol(), Tolerance(ctx_dtype));
          ExpectClose(out.o, ref.o, name + "_o", t);
          ExpectClose(out.lse, ref.lse, name + "_lse", 1e-5 + t / 10);
        }
      }
    }
  }
}

// An empty context gives o = 0 and lse = -inf to every row, and a call with no rows at all (a
// batch whose queries are all empty) is a valid no-op, on every backend.
TEST_P(BackendParityTest, AttendContextWithNoKeysOrNoRows) {
  const int64_t heads = 4, kv_heads = 2, D = 64;
  auto [kb, vb, kc, vc] = RandomContextKv(dt(), 0, kv_heads, D, 1.0f);
  for (int64_t tokens : {int64_t{0}, int64_t{3}}) {
    std::vector<AttentionSequence> seqs;
    if (tokens > 0) seqs.push_back(AttentionSequence{0, tokens, nullptr, nullptr, tokens});
    const Tensor q = Upload(b(), Values(tokens * heads * D), dt(), {tokens, heads, D});
    AttentionState out{Poisoned(b(), dt(), {tokens, heads, D}),
                       Poisoned(b(), DType::kF32, {tokens, heads})};
    b().AttendContext(q, seqs, AttentionContext{&kb, &vb, 0, 0.0f}, 0.125f, out);
    const absl::Status s = b().Synchronize();
    ASSERT_TRUE(s.ok()) << tokens << " rows: " << s;
    for (float x : Download(b(), out.o)) EXPECT_EQ(x, 0.0f);
    for (float x : Download(b(), out.lse)) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
  }
}

TEST_P(BackendParityTest, MergeStatesAndTheComposedAttention) {
  const int64_t T = 21, heads = 4, D = 64;
  const auto oa = Values(T * heads * D), ob = Values(T * heads * D);
  std::vector<float> la = RandomValues(rng_, T * heads, 5.0f),
                     lb = RandomValues(rng_, T * heads, 5.0f);
  la[3] = -INFINITY;  // one side saw nothing
  lb[4] = -INFINITY;
  la[5] = lb[5] = -INFINITY;  // neither side: the row stays as it was
  AttentionState into{Upload(b(), oa, dt(), {T, heads, D}),
                      Upload(b(), la, DType::kF32, {T, heads})};
  AttentionState ref{Upload(cpu(), oa, DType::kF32, {T, heads, D}),
                     Upload(cpu(), la, DType::kF32, {T, heads})};
  b().MergeStates(
      into, {Upload(b(), ob, dt(), {T, heads, D}), Upload(b(), lb, DType::kF32, {T, heads})}, 0.7f);
  cpu().MergeStates(
      ref,
      {Upload(cpu(), ob, DType::kF32, {T, heads, D}), Upload(cpu(), lb, DType::kF32, {T, heads})},
      0.7f);
  ExpectClose(into.o, ref.o, "merge_o");
  ExpectClose(into.lse, ref.lse, "merge_lse", 1e-6);

  // Attention = own + context merged with the context's log-weight.
  AttnBatch on_b = MakeBatch(b(), rng_, dt(), {{7, 7}, {1, 12}}, 2, D, 5);
  AttnBatch on_c = MakeBatch(cpu(), rng_, dt(), {{7, 7}, {1, 12}}, 2, D, 5);
  const int64_t len = 1500;
  auto [kb, vb, kc, vc] = RandomContextKv(dt(), len, 2, D, 1.0f);
  const auto q = Values(on_b.tokens * heads * D);
  Tensor out = Poisoned(b(), dt(), {on_b.tokens, heads, D});
  Tensor want = Poisoned(cpu(), DType::kF32, {on_c.tokens, heads, D});
  AttentionContext cb{&kb, &vb, len, -std::log(9.0f)}, cc{&kc, &vc, len, -std::log(9.0f)};
  b().Attention(Upload(b(), q, dt(), {on_b.tokens, heads, D}), on_b.seqs, &cb, 0.125f, out,
                Tensor());
  cpu().Attention(Upload(cpu(), q, DType::kF32, {on_c.tokens, heads, D}), on_c.seqs, &cc, 0.125f,
                  want, Tensor());
  ExpectClose(out, want, "attention");
}

TEST_P(BackendParityTest, GoldenModelsAgreeWithTheCpu) {
  // Whole forward passes in the dtype under test against the f32 CPU: logits of a batch.
  for (const char* name : kGoldenModels) {
    const Transformer& ref = GoldenModel(name);
    TransformerOptions options;
    options.compute = dt();
    options.kv = dt();
    auto model = Transformer::Load(GoldenModelDir(name), b(), options);
    ASSERT_TRUE(model.ok()) << model.status();
    std::uniform_int_distribution<int32_t> token(3, 250);
    std::vector<std::vector<int32_t>> tokens(3), positions(3);
    std::vector<std::vector<int64_t>> rows(3);
    for (int s = 0; s < 3; ++s) {
      for (int i = 0; i < 5 + 7 * s; ++i) {
        tokens[s].push_back(token(rng_));
        positions[s].push_back(i);
        rows[s].push_back(i);
      }
    }
    std::vector<KvCache> caches_b, caches_c;
    std::vector<ForwardSequence> batch_b, batch_c;
    for (int s = 0; s < 3; ++s) {
      caches_b.push_back((*model)->NewCache(4));
      caches_c.push_back(ref.NewCache(4));
    }
    for (int s = 0; s < 3; ++s) {
      batch_b.push_back({tokens[s], positions[s], &caches_b[s], rows[s]});
      batch_c.push_back({tokens[s], positions[s], &caches_c[s], rows[s]});
    }
    auto got = (*model)->Forward(batch_b);
    auto want = ref.Forward(batch_c);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    const double err = RelativeError(got->logits, want->logits);
    EXPECT_LE(err, 2 * tol() + 1e-5) << name;
    RecordProperty(std::string("logits_rel_err_") + name, std::to_string(err));
  }
}

// AttendBiased: a dense bias with -inf entries (a band, and one head's row masked entirely), the
// diagonal form with T5's causal mask and a masked diagonal, no bias with fewer keys than rows
// (cross-attention), a sequence without keys and a decode row; GQA and every K/V dtype, odd
// head_dim too.
TEST_P(BackendParityTest, AttendBiasedDenseRelativeNoneMaskedGqaEveryKvDtype) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  enum Kind { kDense, kRelative, kNone };
  struct Seq {
    int64_t q_len, kv_len;
    Kind kind;
  };
  const std::vector<Seq> shapes = {
      {9, 13, kDense}, {70, 90, kRelative}, {40, 7, kNone}, {3, 0, kNone}, {1, 300, kRelative}};
  for (AttnShape s : {AttnShape{4, 4, 32}, AttnShape{8, 2, 64}, AttnShape{6, 3, 80},
                      AttnShape{4, 1, 20}, AttnShape{4, 2, 128}}) {
    for (DType kv_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      std::vector<Tensor> keep_b, keep_c;  // K/V and biases, alive through the calls
      keep_b.reserve(4 * shapes.size());
      keep_c.reserve(4 * shapes.size());
      std::vector<BiasedAttentionSequence> seqs_b, seqs_c;
      int64_t tokens = 0;
      for (const Seq& sh : shapes) {
        const int64_t cap = sh.kv_len + 3;
        const auto k = RoundedTo(RandomValues(rng_, cap * s.kv_heads * s.D), kv_dtype);
        const auto v = RoundedTo(RandomValues(rng_, cap * s.kv_heads * s.D), kv_dtype);
        std::vector<float> bias;
        std::vector<int64_t> bias_shape;
        if (sh.kind == kDense) {
          bias = RandomValues(rng_, s.heads * sh.q_len * sh.kv_len, 2.0f);
          for (int64_t h = 0; h < s.heads; ++h) {
            for (int64_t r = 0; r < sh.q_len; ++r) {
              for (int64_t j = 0; j < sh.kv_len; ++j) {
                if (j > r + 4 || (h == 1 && r == 2))
                  bias[(h * sh.q_len + r) * sh.kv_len + j] = kNegInf;
              }
            }
          }
          bias_shape = {s.heads, sh.q_len, sh.kv_len};
        } else if (sh.kind == kRelative) {
          // Diagonal d = j - r + q_len - 1; the rows are the last q_len keys, so d >= kv_len is a
          // key after its query (T5's causal mask).
          const int64_t diagonals = sh.q_len + sh.kv_len - 1;
          bias = RandomValues(rng_, s.heads * diagonals, 2.0f);
          for (int64_t h = 0; h < s.heads; ++h) {
            for (int64_t d = sh.kv_len; d < diagonals; ++d) bias[h * diagonals + d] = kNegInf;
          }
          bias[5] = kNegInf;
          bias_shape = {s.heads, diagonals};
        }
        for (int side = 0; side < 2; ++side) {
          Backend& be = side == 0 ? b() : cpu();
          std::vector<Tensor>& keep = side == 0 ? keep_b : keep_c;
          keep.push_back(Upload(be, k, kv_dtype, {cap, s.kv_heads, s.D}));
          keep.push_back(Upload(be, v, kv_dtype, {cap, s.kv_heads, s.D}));
          BiasedAttentionSequence seq{tokens, sh.q_len, &keep[keep.size() - 2], &keep.back(),
                                      sh.kv_len};
          if (sh.kind != kNone) {
            keep.push_back(Upload(be, bias, DType::kF32, bias_shape));
            (sh.kind == kDense ? seq.bias : seq.relative_bias) = &keep.back();
          }
          (side == 0 ? seqs_b : seqs_c).push_back(seq);
        }
        tokens += sh.q_len;
      }
      const auto q = Values(tokens * s.heads * s.D);
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
      AttentionState out{Poisoned(b(), dt(), {tokens, s.heads, s.D}),
                         Poisoned(b(), DType::kF32, {tokens, s.heads})};
      AttentionState ref{Poisoned(cpu(), DType::kF32, {tokens, s.heads, s.D}),
                         Poisoned(cpu(), DType::kF32, {tokens, s.heads})};
      b().AttendBiased(Upload(b(), q, dt(), {tokens, s.heads, s.D}), seqs_b, scale, out);
      cpu().AttendBiased(Upload(cpu(), q, DType::kF32, {tokens, s.heads, s.D}), seqs_c, scale, ref);
      const std::string name = "biased_h" + std::to_string(s.heads) + "_kv" +
                               std::to_string(s.kv_heads) + "_d" + std::to_string(s.D) + "_" +
                               std::string(DTypeName(kv_dtype));
      // 16-bit K/V of head_dim 64/80/128 go through the tensor-core kernel (the bias as its
      // variant), which rounds q and the probabilities to the K/V type: that type's tolerance
      // when it is the coarser.
      const double t = std::max(tol(), Tolerance(kv_dtype));
      ExpectClose(out.o, ref.o, name + "_o", t);
      ExpectClose(out.lse, ref.lse, name + "_lse", 1e-5 + t / 10);
    }
  }
}

// ALiBi (BLOOM): own keys (causal, ln(weight) on keys >= weighted_from) and context keys, with
// structured-prompting position ids (bos at 0, the query's tokens from L on, the context's keys
// right-aligned below L), BLOOM's slopes for power-of-2 and other head counts, GQA, every context
// dtype; each part and the composed Attention.
TEST_P(BackendParityTest, AlibiOwnAndContextMatchTheCpu) {
  const int64_t L = 64, group_len = 48, len = emulated() ? 200 : 1000;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{6, 6}, {1, 9}, {4, 20}, {40, 40}};
  for (AttnShape s :
       {AttnShape{4, 4, 32}, AttnShape{6, 6, 64}, AttnShape{12, 4, 80}, AttnShape{8, 2, 128}}) {
    const std::vector<float> slopes = AlibiSlopes(s.heads);
    for (DType ctx_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      AttnBatch on_b = MakeBatch(b(), rng_, dt(), shapes, s.kv_heads, s.D, 13);
      AttnBatch on_c = MakeBatch(cpu(), rng_, dt(), shapes, s.kv_heads, s.D, 13);
      std::vector<Tensor> pos_b, pos_c;
      pos_b.reserve(shapes.size());
      pos_c.reserve(shapes.size());
      for (auto [q_len, kv_len] : shapes) {
        std::vector<int32_t> pos(static_cast<size_t>(kv_len + 3));
        for (int64_t i = 1; i <= kv_len + 2; ++i) pos[i] = static_cast<int32_t>(L + i - 1);
        pos_b.push_back(UploadInts(b(), pos));
        pos_c.push_back(UploadInts(cpu(), pos));
      }
      Tensor slopes_b = Upload(b(), slopes, DType::kF32, {s.heads});
      Tensor slopes_c = Upload(cpu(), slopes, DType::kF32, {s.heads});
      for (size_t i = 0; i < shapes.size(); ++i) {
        on_b.seqs[i].alibi_slopes = &slopes_b;
        on_b.seqs[i].positions = &pos_b[i];
        on_c.seqs[i].alibi_slopes = &slopes_c;
        on_c.seqs[i].positions = &pos_c[i];
      }
      std::vector<int32_t> ctx_pos(static_cast<size_t>(len));
      for (int64_t j = 0; j < len; ++j)
        ctx_pos[j] = static_cast<int32_t>(L - group_len + j % group_len);
      auto [kb, vb, kc, vc] = RandomContextKv(ctx_dtype, len, s.kv_heads, s.D, 2.0f);
      Tensor pb = UploadInts(b(), ctx_pos), pc = UploadInts(cpu(), ctx_pos);
      const AttentionContext ctx_b{&kb, &vb, len, -std::log(4.0f), &pb};
      const AttentionContext ctx_c{&kc, &vc, len, -std::log(4.0f), &pc};
      const auto q = Values(on_b.tokens * s.heads * s.D);
      Tensor qb = Upload(b(), q, dt(), {on_b.tokens, s.heads, s.D});
      Tensor qc = Upload(cpu(), q, DType::kF32, {on_c.tokens, s.heads, s.D});
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
      const std::string name = "alibi_h" + std::to_string(s.heads) + "_kv" +
                               std::to_string(s.kv_heads) + "_d" + std::to_string(s.D) + "_ctx" +
                               std::string(DTypeName(ctx_dtype));
      for (int part = 0; part < 2; ++part) {  // own, context
        AttentionState out{Poisoned(b(), dt(), {on_b.tokens, s.heads, s.D}),
                           Poisoned(b(), DType::kF32, {on_b.tokens, s.heads})};
        AttentionState ref{Poisoned(cpu(), DType::kF32, {on_c.tokens, s.heads, s.D}),
                           Poisoned(cpu(), DType::kF32, {on_c.tokens, s.heads})};
        if (part == 0) {
          b().AttendOwn(qb, on_b.seqs, scale, out);
          cpu().AttendOwn(qc, on_c.seqs, scale, ref);
        } else {
          b().AttendContext(qb, on_b.seqs, ctx_b, scale, out);
          cpu().AttendContext(qc, on_c.seqs, ctx_c, scale, ref);
        }
        const std::string what = name + (part == 0 ? "_own" : "_context");
        // 16-bit context K/V go through the tensor-core kernel (ALiBi as its variant), which
        // rounds q and the probabilities to the K/V type: that type's tolerance when coarser.
        const double t = part == 0 ? tol() : std::max(tol(), Tolerance(ctx_dtype));
        ExpectClose(out.o, ref.o, what + "_o", t);
        ExpectClose(out.lse, ref.lse, what + "_lse", 1e-5 + t / 10);
      }
      Tensor out = Poisoned(b(), dt(), {on_b.tokens, s.heads, s.D});
      Tensor want = Poisoned(cpu(), DType::kF32, {on_c.tokens, s.heads, s.D});
      b().Attention(qb, on_b.seqs, &ctx_b, scale, out, Tensor());
      cpu().Attention(qc, on_c.seqs, &ctx_c, scale, want, Tensor());
      ExpectClose(out, want, name + "_attention", std::max(tol(), Tolerance(ctx_dtype)));
    }
  }
}

// The same CUDA backend code on the SIMT emulator (testing/simt), on every machine.
INSTANTIATE_TEST_SUITE_P(SimtCuda, BackendParityTest,
                         ::testing::Values(ParityCase{"simt-cuda", DType::kF32},
                                           ParityCase{"simt-cuda", DType::kBF16},
                                           ParityCase{"simt-cuda", DType::kF16}),
                         [](const ::testing::TestParamInfo<ParityCase>& param) {
                           return std::string(DTypeName(param.param.dtype));
                         });

INSTANTIATE_TEST_SUITE_P(Cuda, BackendParityTest,
                         ::testing::Values(ParityCase{"cuda", DType::kF32},
                                           ParityCase{"cuda", DType::kBF16},
                                           ParityCase{"cuda", DType::kF16}),
                         [](const ::testing::TestParamInfo<ParityCase>& param) {
                           return std::string(DTypeName(param.param.dtype));
                         });

}  // namespace
}  // namespace manyshot::testing
