// manyshot-bench cache: the 1000-shot SST-2 task of `structured` (GPT-2-small-shaped random model,
// real GPT-2 tokenizer). Encodes the context once, stores it in the RocksDB tier (f32, then bf16),
// closes the database, reopens it (a fresh memory tier, as after a restart) and restores the
// context: restore time vs the encode time (target >= 10x faster), and restore throughput as a
// fraction of a plain sequential read() of the same bytes from a file written in the same run.
// Both reads are served from the OS page cache (the bench does not drop caches), so the ratio
// compares like with like: RocksDB + checksums + conversion vs a bare read.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "bench/bench_common.h"
#include "bench/sst2_data.h"
#include "bench/subcommands.h"
#include "cache/cache_key.h"
#include "cache/context_cache.h"
#include "cache/kv_convert.h"
#include "cache/kv_stream.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/prompting/icl_task.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer/transformer.h"

namespace manyshot::bench {
namespace {

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "manyshot-bench cache: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

// Writes `ctx`'s payload (its own dtype) to a plain file, as one sequential stream.
absl::Status WritePlainFile(const EncodedContext& ctx, Backend& backend,
                            const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::InternalError("cannot create " + path.string());
  absl::Status s =
      ForEachPayloadChunk(ctx, backend, size_t{16} << 20, [&](uint64_t, std::string_view chunk) {
        size_t done = 0;
        while (done < chunk.size()) {
          const ssize_t n = ::write(fd, chunk.data() + done, chunk.size() - done);
          if (n <= 0) return absl::InternalError("write failed");
          done += static_cast<size_t>(n);
        }
        return absl::OkStatus();
      });
  ::fsync(fd);
  ::close(fd);
  return s;
}

// Reads the file sequentially in 16 MB read() calls; returns the bytes read.
size_t ReadPlainFile(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return 0;
  std::vector<char> buffer(size_t{16} << 20);
  size_t total = 0;
  ssize_t n;
  while ((n = ::read(fd, buffer.data(), buffer.size())) > 0) total += static_cast<size_t>(n);
  ::close(fd);
  return total;
}

}  // namespace

int RunCacheBench(const BenchOptions& options) {
  Report report("cache", options.json);
  report.Add("threads", options.threads);
  auto tokenizer = LoadTokenizer(options.tokenizer_dir);
  if (!tokenizer.ok()) return Fail("tokenizer", tokenizer.status());
  std::string why;
  auto opened = OpenBenchBackend(options.backend, options.threads, &why);
  if (!opened.ok()) return Fail("backend", opened.status());
  Backend& backend = **opened;
  report.AddText("backend", backend.name());
  report.AddText("backend_why", why);
  report.AddText("backend_description", backend.description());
  // Encoding and the restored KV live on the backend: with --backend=cuda, restore is RocksDB ->
  // host -> GPU memory and re-encoding runs on the GPU (bf16 compute).
  auto model =
      Transformer::Load(EnsureGpt2SmallModel(options.work_dir / "gpt2-small-random"), backend);
  if (!model.ok()) return Fail("model", model.status());
  auto train = LoadSst2(Sst2Dir(options.data_dir) / "stsa.binary.train", 1000);
  if (!train.ok()) return Fail("SST-2", train.status());
  auto task = IclTask::Prepare(**model, **tokenizer, Sst2TaskOptions(), *train);
  if (!task.ok()) return Fail("task", task.status());

  auto start = std::chrono::steady_clock::now();
  auto encoded = (*task)->EncodeContext();
  if (!encoded.ok()) return Fail("encode", encoded.status());
  const double encode_s = Seconds(std::chrono::steady_clock::now() - start);
  report.Add("shots", static_cast<double>(train->size()));
  report.Add("context_tokens", static_cast<double>(encoded->tokens));
  report.Add("groups", static_cast<double>(encoded->groups));
  report.Add("encode_seconds", encode_s, "s");

  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const std::string p = std::string(DTypeName(dtype)) + "_";
    const auto dir = options.work_dir / ("cache-bench-" + std::string(DTypeName(dtype)));
    std::filesystem::remove_all(dir);
    ContextCacheOptions cache_options;
    cache_options.kv_dtype = dtype;
    cache_options.memory_budget_bytes = uint64_t{16} << 30;
    const std::string key = CacheKeyForTask(**model, **tokenizer, **task, dtype);
    TaskRecord record{"sst2-1000", "bench", "sst2:1000", "", key, 0};
    {
      auto cache = ContextCache::Open(dir, cache_options, backend);
      if (!cache.ok()) return Fail("open", cache.status());
      start = std::chrono::steady_clock::now();
      if (absl::Status s = (*cache)->PutTask(record, *encoded); !s.ok()) return Fail("put", s);
      report.Add(p + "store_seconds", Seconds(std::chrono::steady_clock::now() - start), "s");
      report.Add(p + "kv_bytes", static_cast<double>((*cache)->Stats().disk_bytes), "bytes");
    }  // closed: what follows is what a restarted server does
    start = std::chrono::steady_clock::now();
    auto cache = ContextCache::Open(dir, cache_options, backend);
    if (!cache.ok()) return Fail("reopen", cache.status());
    const double open_s = Seconds(std::chrono::steady_clock::now() - start);
    start = std::chrono::steady_clock::now();
    auto restored = (*cache)->Acquire(
        key, nullptr, [&](const EncodedContext& c) { return (*task)->CheckContext(c); });
    if (!restored.ok()) return Fail("restore", restored.status());
    const double restore_s = Seconds(std::chrono::steady_clock::now() - start);
    const CacheStats stats = (*cache)->Stats();
    if (stats.encodes != 0) return Fail("restore", absl::InternalError("restore re-encoded"));
    const double bytes = static_cast<double>(stats.disk_bytes);

    // The same bytes through a plain file, read back the same way (page cache) in this run.
    auto storage = ConvertContext(*encoded, dtype, backend);
    if (!storage.ok()) return Fail("convert", storage.status());
    const auto plain = dir / "plain.bin";
    if (absl::Status s = WritePlainFile(*storage, backend, plain); !s.ok()) return Fail("file", s);
    storage = absl::UnknownError("released");
    ReadPlainFile(plain);  // warm, as the RocksDB files are after being written
    start = std::chrono::steady_clock::now();
    const size_t read_bytes = ReadPlainFile(plain);
    const double read_s = Seconds(std::chrono::steady_clock::now() - start);
    if (static_cast<double>(read_bytes) != bytes) {
      return Fail("plain read", absl::InternalError("short read"));
    }
    report.Add(p + "open_seconds", open_s, "s (reopen the DB, list tasks)");
    report.Add(p + "restore_seconds", restore_s, "s (load, verify, convert to f32)");
    report.Add(p + "restore_gb_per_second", bytes / restore_s / 1e9, "GB/s");
    report.Add(p + "plain_read_seconds", read_s, "s");
    report.Add(p + "plain_read_gb_per_second", bytes / read_s / 1e9, "GB/s");
    report.Add(p + "restore_fraction_of_plain_read", read_s / restore_s);
    report.Add(p + "restore_speedup_over_encode", encode_s / restore_s, "x (target >= 10)");
    restored->Release();
    cache->reset();
    std::filesystem::remove_all(dir);
  }
  report.Print();
  return 0;
}

}  // namespace manyshot::bench
