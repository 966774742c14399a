// The backend seam, checked without a GPU: the checked fronts (a mismatch is an error, never memory
// corruption), the per-thread sticky error, allocation failures as statuses, the factory and its
// reasons, and the KV-dtype plumbing of the transformer and the context encoder on the CPU.
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/backends/backend_factory.h"
#include "engine/prompting/context_encoder.h"
#include "tests/engine/backend/backend_test_util.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

TEST(BackendSeamTest, AShapeMismatchIsAnErrorNamingTheOpAndLaterOpsDoNothing) {
  CpuBackend backend(1);
  std::mt19937 rng(1);
  Tensor x = Upload(backend, RandomValues(rng, 4 * 8), DType::kF32, {4, 8});
  Tensor w = Upload(backend, RandomValues(rng, 5 * 9), DType::kF32, {5, 9});  // in 9 != 8
  Tensor out = Upload(backend, std::vector<float>(4 * 5, 42.0f), DType::kF32, {4, 5});
  Tensor y = Upload(backend, std::vector<float>(4 * 8, 1.0f), DType::kF32, {4, 8});
  backend.Linear(x, w, WeightLayout::kOutIn, Tensor(), out);
  backend.Add(y, x);  // valid, but after an error: must not run
  absl::Status status = backend.Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("Linear"), std::string::npos) << status;
  EXPECT_NE(status.message().find("[5, 9]"), std::string::npos) << status;
  EXPECT_EQ(Download(backend, out), std::vector<float>(4 * 5, 42.0f));  // untouched
  EXPECT_EQ(Download(backend, y), std::vector<float>(4 * 8, 1.0f));     // skipped
  // Collected once: the next sequence of ops starts clean.
  EXPECT_TRUE(backend.Synchronize().ok());
  backend.Add(y, x);
  EXPECT_TRUE(backend.Synchronize().ok());
}

TEST(BackendSeamTest, EveryFrontChecksDtypesDevicesAndIndexTensors) {
  CpuBackend backend(1);
  std::mt19937 rng(2);
  Tensor f = Upload(backend, RandomValues(rng, 6 * 4), DType::kF32, {6, 4});
  Tensor h = Upload(backend, RandomValues(rng, 6 * 4), DType::kBF16, {6, 4});
  Tensor ids_f32 = Upload(backend, {0, 1}, DType::kF32, {2});
  Tensor out = Upload(backend, std::vector<float>(2 * 4), DType::kF32, {2, 4});
  struct Case {
    const char* op;
    std::function<void()> run;
  };
  std::vector<Case> cases = {
      {"Embedding", [&] { backend.Embedding(ids_f32, f, out, false); }},  // ids must be i32
      {"GatherRows", [&] { backend.GatherRows(f, ids_f32, out); }},
      {"Add", [&] { backend.Add(f, h); }},                           // dtypes differ
      {"Copy", [&] { backend.Copy(f, out); }},                       // sizes differ
      {"RmsNorm", [&] { backend.RmsNorm(f, Tensor(), 1e-5f, f); }},  // undefined weight
      {"Rope",
       [&] {
         backend.Rope(f, UploadInts(backend, {0, 1}), DefaultRopeTable(1e4, 4));
       }},  // rank 2
      {"RoPE table has 3 frequencies",
       [&] {
         backend.Rope(f.Reshape({6, 1, 4}), UploadInts(backend, {0, 1, 2, 3, 4, 5}),
                      DefaultRopeTable(1e4, 6));
       }},                                                  // head_dim 4 needs 2
      {"SwiGlu", [&] { backend.SwiGlu(f, f); }},            // [T, 2I] vs [T, I]
      {"Convert", [&] { backend.Convert(ids_f32, out); }},  // element counts differ
      {"Linear", [&] { backend.Linear(f, h, WeightLayout::kOutIn, Tensor(), out); }},
  };
  for (const Case& c : cases) {
    c.run();
    absl::Status status = backend.Synchronize();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.op << ": " << status;
    EXPECT_NE(status.message().find(c.op), std::string::npos) << status;
  }
  // The CPU computes in f32 only: a 16-bit activation is UNIMPLEMENTED, not garbage.
  backend.Add(h, h);
  EXPECT_EQ(backend.Synchronize().code(), absl::StatusCode::kUnimplemented);
}

TEST(BackendSeamTest, AttentionFrontsCheckSequencesAgainstTheirTensors) {
  CpuBackend backend(1);
  std::mt19937 rng(3);
  Tensor q = Upload(backend, RandomValues(rng, 4 * 2 * 8), DType::kF32, {4, 2, 8});
  Tensor k = Upload(backend, RandomValues(rng, 3 * 1 * 8), DType::kF32, {3, 1, 8});
  AttentionState out{*backend.Allocate(DType::kF32, {4, 2, 8}),
                     *backend.Allocate(DType::kF32, {4, 2})};
  AttentionSequence s;
  s.q_begin = 0;
  s.q_len = 4;
  s.k = &k;
  s.v = &k;
  s.kv_len = 4;  // k has 3 rows
  backend.AttendOwn(q, {&s, 1}, 1.0f, out);
  absl::Status status = backend.Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("4 keys but k has 3 rows"), std::string::npos) << status;
  s.kv_len = 3;  // q_len 4 > kv_len 3
  backend.AttendOwn(q, {&s, 1}, 1.0f, out);
  EXPECT_EQ(backend.Synchronize().code(), absl::StatusCode::kInvalidArgument);
  s.q_len = 2;
  s.q_begin = 3;  // rows [3, 5) of 4
  backend.AttendOwn(q, {&s, 1}, 1.0f, out);
  EXPECT_EQ(backend.Synchronize().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BackendSeamTest, ErrorsBelongToTheThreadThatMadeThem) {
  CpuBackend backend(1);
  std::mt19937 rng(4);
  Tensor a = Upload(backend, RandomValues(rng, 8), DType::kF32, {8});
  Tensor b = Upload(backend, RandomValues(rng, 9), DType::kF32, {9});
  backend.Add(a, b);  // this thread's error
  absl::Status other;
  std::thread t([&] {
    Tensor c = *backend.Allocate(DType::kF32, {8});
    backend.Copy(a, c);
    other = backend.Synchronize();
  });
  t.join();
  EXPECT_TRUE(other.ok()) << other;
  EXPECT_EQ(backend.Synchronize().code(), absl::StatusCode::kInvalidArgument);
}

// A thread that ends with an error nobody took must not hand it to a later thread (the C library
// reuses thread ids: a job thread that failed half-way would fail the next job that got its id).
TEST(BackendSeamTest, AnErrorLeftByAThreadThatEndedIsNotInherited) {
  CpuBackend backend(1);
  std::mt19937 rng(5);
  Tensor a = Upload(backend, RandomValues(rng, 8), DType::kF32, {8});
  Tensor b = Upload(backend, RandomValues(rng, 9), DType::kF32, {9});
  for (int i = 0; i < 8; ++i) {
    std::thread failing([&] { backend.Add(a, b); });  // ends without Synchronize()
    failing.join();
    EXPECT_EQ(backend.ThreadsWithPendingErrors(), 0u) << "round " << i;  // dropped at its end
    absl::Status next;
    std::thread fresh([&] {
      Tensor c = *backend.Allocate(DType::kF32, {8});
      backend.Copy(a, c);
      next = backend.Synchronize();
    });
    fresh.join();
    EXPECT_TRUE(next.ok()) << "round " << i << ": " << next;
  }
}

// An error is kept while its thread lives (its next Synchronize() returns it) and dropped when the
// thread ends, also when the backend went first.
TEST(BackendSeamTest, AnUntakenErrorIsKeptWhileItsThreadLivesAndDroppedWhenItEnds) {
  auto backend = std::make_unique<CpuBackend>(1);
  std::mt19937 rng(6);
  Tensor a = Upload(*backend, RandomValues(rng, 8), DType::kF32, {8});
  Tensor b = Upload(*backend, RandomValues(rng, 9), DType::kF32, {9});
  backend->Add(a, b);  // this thread's, kept until it synchronizes
  std::mutex mutex;
  std::condition_variable changed;
  int stage = 0;  // 1: the worker recorded its error; 2: the test checked; 3: the backend is gone
  auto wait_for = [&](int s) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return stage >= s; });
  };
  auto go_to = [&](int s) {
    std::lock_guard<std::mutex> lock(mutex);
    stage = s;
    changed.notify_all();
  };
  absl::Status taken;
  std::thread worker([&] {
    backend->Add(a, b);
    backend->Add(a, b);  // a second error of the same thread keeps the first, one entry
    go_to(1);
    wait_for(2);
    taken = backend->Synchronize();
    backend->Add(a, b);  // left untaken
    go_to(3);
  });
  wait_for(1);
  EXPECT_EQ(backend->ThreadsWithPendingErrors(), 2u);
  go_to(2);
  wait_for(3);
  EXPECT_EQ(taken.code(), absl::StatusCode::kInvalidArgument) << taken;
  worker.join();
  EXPECT_EQ(backend->ThreadsWithPendingErrors(), 1u);  // only this thread's
  EXPECT_EQ(backend->Synchronize().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->ThreadsWithPendingErrors(), 0u);

  // A thread that outlives the backend it failed on ends cleanly.
  std::atomic<bool> backend_gone{false};
  std::thread outliving([&] {
    backend->Add(a, b);
    go_to(4);
    while (!backend_gone.load()) std::this_thread::yield();
  });
  wait_for(4);
  a = Tensor();
  b = Tensor();
  backend.reset();
  backend_gone = true;
  outliving.join();
}

TEST(BackendSeamTest, AllocationFailureIsAStatus) {
  CpuBackend backend(1);
  auto huge = backend.Allocate(DType::kF32, {int64_t{1} << 50});  // 4 PiB
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_EQ(backend.Allocate(DType::kF32, {-1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

#if MANYSHOT_CUDA_ENABLED
// A plugin built from other engine headers than the program (its ABI hash differs) is refused with
// the reason, before anything of it is called. In a child process: the factory loads its plugin
// once per process.
TEST(BackendFactoryDeathTest, APluginBuiltFromOtherHeadersIsRefusedWithTheReason) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("MANYSHOT_CUDA_PLUGIN", MANYSHOT_MISMATCHED_CUDA_PLUGIN, 1);
        const absl::StatusOr<int> devices = CudaDevicesAvailable();
        std::fprintf(stderr, "%s\n", devices.status().ToString().c_str());
        std::exit(devices.status().code() == absl::StatusCode::kFailedPrecondition ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "built from other engine headers than this program \\(plugin ABI 0000000000000000, "
      "program [0-9a-f]+\\)");
}
#endif

TEST(BackendFactoryTest, KindsReasonsAndTheDefault) {
  EXPECT_EQ(*ParseBackendKind("cpu"), BackendKind::kCpu);
  EXPECT_EQ(*ParseBackendKind("cuda"), BackendKind::kCuda);
  EXPECT_EQ(ParseBackendKind("tpu").status().code(), absl::StatusCode::kInvalidArgument);
  auto cpu = CreateBackend(BackendKind::kCpu, 0, 2);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->name(), "cpu");
  EXPECT_EQ((*cpu)->threads(), 2);
  EXPECT_EQ(CreateBackend(BackendKind::kCpu, 1, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string why;
  const BackendKind chosen = DefaultBackendKind(&why);
  auto gpus = CudaDevicesAvailable();
  if (gpus.ok() && *gpus > 0) {
    EXPECT_EQ(chosen, BackendKind::kCuda) << why;
  } else {
    // No GPU here: the default is the CPU, the reason is the probe's, and asking for CUDA is a
    // FAILED_PRECONDITION that carries it (on these machines: "CUDA driver version is
    // insufficient for CUDA runtime version", or "not built").
    EXPECT_EQ(chosen, BackendKind::kCpu);
    EXPECT_NE(why.find("no usable GPU"), std::string::npos) << why;
    auto cuda = CreateBackend(BackendKind::kCuda, 0, 0);
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(std::string(cuda.status().message()).find(std::string(gpus.status().message())),
              std::string::npos)
        << cuda.status();
    EXPECT_EQ(CudaBuilt(), MANYSHOT_CUDA_ENABLED != 0);
  }
}

TEST(TransformerDtypeTest, TheCpuRefusesA16BitComputeDtype) {
  TransformerOptions options;
  options.compute = DType::kBF16;
  auto model = Transformer::Load(GoldenModelDir("llama"), TestBackend(), options);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(model.status().message()).find("cannot compute in bf16"), std::string::npos)
      << model.status();
}

TEST(TransformerDtypeTest, SixteenBitKvThroughTheForwardPassAndTheEncoder) {
  // f32 compute, bf16 own K/V and encoded context: logits stay close to all-f32, and the encoder
  // hands back a context in the KV dtype.
  for (const char* name : {"gpt2", "llama_gqa_tied"}) {
    TransformerOptions options;
    options.kv = DType::kBF16;
    auto model = Transformer::Load(GoldenModelDir(name), TestBackend(), options);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->kv_dtype(), DType::kBF16);
    EXPECT_EQ((*model)->compute_dtype(), DType::kF32);
    const Transformer& ref = GoldenModel(name);
    std::vector<int32_t> tokens = {5, 9, 33, 7, 81, 12, 4, 19}, positions(8);
    std::vector<int64_t> rows = {0, 3, 7};
    for (int i = 0; i < 8; ++i) positions[i] = i;
    KvCache cache = (*model)->NewCache(2), ref_cache = ref.NewCache(2);
    ForwardSequence seq{tokens, positions, &cache, rows};
    ForwardSequence ref_seq{tokens, positions, &ref_cache, rows};
    auto got = (*model)->Forward({&seq, 1});
    auto want = ref.Forward({&ref_seq, 1});
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(cache.dtype(), DType::kBF16);
    const double err = RelativeError(got->logits, want->logits);
    EXPECT_GT(err, 0.0) << "bf16 K/V should round something";
    EXPECT_LT(err, 2e-2) << name;

    GroupLayout layout;
    layout.group_length = 4;
    layout.slots = {{10, 11, 12, 13}, {20, 21, kMaskedSlot, 22}};
    layout.context_tokens = 7;
    auto context = EncodeGroups(**model, layout, 1);
    ASSERT_TRUE(context.ok()) << context.status();
    EXPECT_EQ(context->kv.k.front().dtype(), DType::kBF16);
    EXPECT_EQ(context->bytes(), 2 * (*model)->config().num_layers * 7 *
                                    (*model)->config().num_kv_heads * (*model)->config().head_dim *
                                    2u);
  }
}

}  // namespace
}  // namespace manyshot::testing
