#include "tests/cache/support/cache_test_support.h"

#include <rocksdb/metadata.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cache/kv_convert.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::vector<std::byte> HostBytes(const Tensor& t, int64_t rows, Backend& backend) {
  const Tensor view = t.Rows(0, rows);
  std::vector<std::byte> out(view.bytes());
  if (!out.empty()) {
    const absl::Status status = backend.CopyToHost(view, out.data());
    EXPECT_TRUE(status.ok()) << status;
  }
  return out;
}

}  // namespace

std::unique_ptr<IclTask> Sst2Task(uint64_t shuffle_seed) {
  std::vector<Example> demos = Sst2Demonstrations();
  TaskOptions o;
  o.input_template = "Sentence: {text}\nLabel:";
  o.labels = {"negative", "positive"};
  o.group_length = 48;
  o.max_query_tokens = 64;
  o.max_answer_tokens = 8;
  o.shuffle_seed = shuffle_seed;
  auto task = IclTask::Prepare(GoldenModel("gpt2"), Gpt2Tokenizer(), o, demos);
  if (!task.ok()) {
    std::fprintf(stderr, "Sst2Task: %s\n", task.status().ToString().c_str());
    std::abort();
  }
  return *std::move(task);
}

std::vector<Example> Sst2Queries() {
  return {{"a delightful film", {}, ""},
          {"a tedious , joyless slog", {}, ""},
          {"the cast is superb and the script sparkles", {}, ""},
          {"un film très réussi", {}, ""}};
}

std::vector<double> ScoreSst2(IclTask& task, const EncodedContext& ctx) {
  auto results = task.Classify(&ctx, Sst2Queries());
  if (!results.ok()) {
    std::fprintf(stderr, "ScoreSst2: %s\n", results.status().ToString().c_str());
    std::abort();
  }
  std::vector<double> scores;
  for (const auto& r : *results) {
    for (const auto& l : r.labels) scores.push_back(l.score.mean_logprob);
  }
  return scores;
}

EncodedContext SyntheticContext(Backend& backend, uint64_t seed, int64_t layers, int64_t tokens,
                                int64_t kv_heads, int64_t head_dim, DType dtype) {
  KvShape shape{DType::kF32,        layers,   tokens,
                kv_heads,           head_dim, /*groups=*/(tokens + 47) / 48,
                /*group_length=*/48};
  EncodedContext ctx = *AllocateContext(backend, shape);
  uint64_t state = seed;
  std::vector<float> host(static_cast<size_t>(std::max<int64_t>(tokens, 1) * kv_heads * head_dim));
  for (size_t l = 0; l < ctx.kv.k.size(); ++l) {
    for (Tensor* t : {&ctx.kv.k[l], &ctx.kv.v[l]}) {
      for (float& x : host) {
        // Values in [-4, 4) with full mantissas, so bf16 rounding is visible.
        x = static_cast<float>(static_cast<double>(SplitMix(&state) >> 11) * 0x1p-53 * 8.0 - 4.0);
      }
      backend.CopyFromHost(host.data(), *t);
    }
  }
  if (dtype == DType::kF32) return ctx;
  return *ConvertContext(ctx, dtype, backend);
}

std::string CompareContexts(const EncodedContext& a, const EncodedContext& b, Backend& backend) {
  auto sa = ShapeOf(a);
  auto sb = ShapeOf(b);
  if (!sa.ok() || !sb.ok()) return "bad shape";
  if (!(*sa == *sb)) {
    return absl::StrCat("shapes differ: ", sa->layers, "x", sa->tokens, "x", sa->kv_heads, "x",
                        sa->head_dim, " ", std::string(DTypeName(sa->dtype)), " vs ", sb->layers,
                        "x", sb->tokens, "x", sb->kv_heads, "x", sb->head_dim, " ",
                        std::string(DTypeName(sb->dtype)));
  }
  for (size_t l = 0; l < a.kv.k.size(); ++l) {
    if (HostBytes(a.kv.k[l], a.tokens, backend) != HostBytes(b.kv.k[l], b.tokens, backend)) {
      return absl::StrCat("layer ", l, " K differs");
    }
    if (HostBytes(a.kv.v[l], a.tokens, backend) != HostBytes(b.kv.v[l], b.tokens, backend)) {
      return absl::StrCat("layer ", l, " V differs");
    }
  }
  return "";
}

std::filesystem::path FreshTempDir(const std::string& name) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() /
             absl::StrCat("manyshot-cache-", name, "-", getpid(), "-", counter++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string EncodeSyntheticSpec(const SyntheticSpec& s) {
  return absl::StrCat(s.seed, " ", s.layers, " ", s.tokens, " ", s.kv_heads, " ", s.head_dim);
}

bool DecodeSyntheticSpec(const std::string& text, SyntheticSpec* s) {
  unsigned long long seed = 0;
  long long layers = 0, tokens = 0, heads = 0, dim = 0;
  if (std::sscanf(text.c_str(), "%llu %lld %lld %lld %lld", &seed, &layers, &tokens, &heads,
                  &dim) != 5) {
    return false;
  }
  *s = {seed, layers, tokens, heads, dim};
  return true;
}

ContextCacheOptions CrashTestOptions() {
  ContextCacheOptions o;
  o.memory_budget_bytes = uint64_t{64} << 20;
  o.chunk_bytes = 16 << 10;
  o.max_batch_bytes = 64 << 10;
  o.sync_task_writes = true;
  return o;
}

std::vector<std::filesystem::path> SstFilesOf(rocksdb::DB& db, const std::string& family) {
  std::vector<rocksdb::LiveFileMetaData> live;
  db.GetLiveFilesMetaData(&live);
  std::vector<std::filesystem::path> files;
  for (const auto& f : live) {
    if (f.column_family_name == family || f.column_family_name.rfind(family + ".", 0) == 0) {
      files.push_back(std::filesystem::path(f.db_path) / std::filesystem::path(f.name).filename());
    }
  }
  return files;
}

}  // namespace manyshot::testing
