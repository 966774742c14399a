// manyshot-bench cache: the 1000-shot SST-2 task of `structured` (GPT-2-small-shaped random model,
// real GPT-2 tokenizer). Encodes the context once, stores it in the disk tier (f32, then bf16),
// closes the cache, reopens it (a fresh memory tier, as after a restart) and restores the
// context, warm (its KV file in the page cache, as after being written) and cold (the file's
// pages dropped with posix_fadvise(DONTNEED), residency checked with mincore()). Same-run
// references on the same filesystem, with the same bytes: a plain buffered read() of a file
// (warm), an O_DIRECT read of it (cold), and a plain write() + fsync of it (store). Targets:
// warm restore >= 0.5 of the buffered read, cold restore >= 0.7 of the O_DIRECT read,
// restore >= 20x faster than re-encoding, store >= 0.5 of the plain write. Restores and reads:
// best of three rounds each; the store and the plain write: one each. Then the scaling: f32
// store and restore of 100, 300, 1000 and 3000 shots (--quick: up to 1000), each encoded first.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>

#include <cstdio>
#include <vector>

#include "bench/bench_common.h"
#include "bench/sst2_data.h"
#include "bench/subcommands.h"
#include "cache/context_cache.h"
#include "cache/kv_convert.h"
#include "cache/kv_stream.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/prompting/icl_cache_key.h"
#include "engine/prompting/icl_task.h"
#include "engine/task/cache_key.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer/transformer.h"

namespace manyshot::bench {
namespace {

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "manyshot-bench cache: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

// Writes `ctx`'s payload (its own dtype) to a plain file, as one sequential stream, and fsyncs
// it: the reference for a durable store.
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
  if (::fsync(fd) != 0 && s.ok()) s = absl::InternalError("fsync failed");
  ::close(fd);
  return s;
}

// Reads the file sequentially in 16 MiB read() calls (O_DIRECT: from the disk, bypassing the page
// cache, into an aligned buffer); returns the bytes read.
size_t ReadPlainFile(const std::filesystem::path& path, bool direct) {
  const int fd = ::open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
  if (fd < 0) return 0;
  constexpr size_t kBuffer = size_t{16} << 20;
  void* buffer = std::aligned_alloc(4096, kBuffer);
  size_t total = 0;
  ssize_t n;
  while ((n = ::read(fd, buffer, kBuffer)) > 0) total += static_cast<size_t>(n);
  std::free(buffer);
  ::close(fd);
  return total;
}

// Drops the file's pages from the page cache (they are clean: the file was fsynced) and returns
// the fraction still resident afterwards, from mincore().
double DropFromPageCache(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const size_t size = std::filesystem::file_size(path);
  double resident = 0;
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map != MAP_FAILED) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> in_core((size + page - 1) / page);
    if (::mincore(map, size, in_core.data()) == 0) {
      size_t n = 0;
      for (unsigned char c : in_core) n += c & 1;
      resident = static_cast<double>(n) / static_cast<double>(in_core.size());
    }
    ::munmap(map, size);
  }
  ::close(fd);
  return resident;
}

// Restores and reads are timed this many times each, and the best is reported (on a shared
// machine, the other load decides the rest).
constexpr int kRounds = 3;

struct StoreAndRestoreFigures {
  double bytes = 0;     // the KV file
  double store_s = 0;   // PutTask: the KV file written and fsynced, then the commit
  double open_s = 0;    // reopening the cache (the last restore's)
  double warm_s = 0;    // best restore with the file in the page cache
  double cold_s = 0;    // best restore with its pages dropped
  double resident = 0;  // the largest fraction of the file's pages left after dropping them
};

// Stores `encoded` (the context of `task`) in a fresh disk tier in `dir` with KV dtype `dtype`,
// closes it, and restores it into a freshly opened cache (as after a restart): kRounds times with
// the KV file warm, then kRounds times cold. `before_restores` runs between the store and the
// restores (the plain-file references run there, while the KV file is still warm).
template <typename BeforeRestores>
absl::StatusOr<StoreAndRestoreFigures> StoreAndRestore(
    const Transformer& model, const Tokenizer& tokenizer, const IclTask& task,
    const EncodedContext& encoded, DType dtype, const std::filesystem::path& dir, Backend& backend,
    BeforeRestores&& before_restores) {
  std::filesystem::remove_all(dir);
  ContextCacheOptions cache_options;
  cache_options.kv_dtype = dtype;
  cache_options.memory_budget_bytes = uint64_t{16} << 30;
  cache_options.memory_holds_storage_dtype = true;  // as the server runs it (server_app.cc)
  const std::string key = CacheKeyForTask(model, tokenizer, task, dtype);
  const std::filesystem::path kv_file = dir / "kv_files" / (key + ".kv");
  TaskRecord record{"sst2", "bench", "sst2", "", key, 0};
  StoreAndRestoreFigures f;
  {
    auto cache = ContextCache::Open(dir, cache_options, backend);
    if (!cache.ok()) return cache.status();
    auto start = std::chrono::steady_clock::now();
    if (absl::Status s = (*cache)->PutTask(record, encoded); !s.ok()) return s;
    f.store_s = Seconds(std::chrono::steady_clock::now() - start);
  }  // closed: what follows is what a restarted server does
  f.bytes = static_cast<double>(std::filesystem::file_size(kv_file));
  if (absl::Status s = before_restores(f.bytes); !s.ok()) return s;

  auto restore = [&](double* seconds) -> absl::Status {
    auto start = std::chrono::steady_clock::now();
    auto cache = ContextCache::Open(dir, cache_options, backend);
    if (!cache.ok()) return cache.status();
    f.open_s = Seconds(std::chrono::steady_clock::now() - start);
    start = std::chrono::steady_clock::now();
    auto restored = (*cache)->Acquire(
        key, nullptr, [&](const EncodedContext& c) { return task.CheckContext(c); });
    if (!restored.ok()) return restored.status();
    *seconds = Seconds(std::chrono::steady_clock::now() - start);
    if ((*cache)->Stats().encodes != 0) return absl::InternalError("restore re-encoded");
    return absl::OkStatus();
  };
  ReadPlainFile(kv_file, false);  // warm (it mostly is, having just been written)
  f.warm_s = f.cold_s = 1e30;
  for (int round = 0; round < kRounds; ++round) {
    double seconds = 0;
    if (absl::Status s = restore(&seconds); !s.ok()) return s;
    f.warm_s = std::min(f.warm_s, seconds);
  }
  for (int round = 0; round < kRounds; ++round) {
    double seconds = 0;
    f.resident = std::max(f.resident, DropFromPageCache(kv_file));
    if (absl::Status s = restore(&seconds); !s.ok()) return s;
    f.cold_s = std::min(f.cold_s, seconds);
  }
  std::filesystem::remove_all(dir);
  return f;
}

}  // namespace

int RunCacheBench(const BenchOptions& options) {
  Report report("cache", options.json);
  report.EchoToStderr();  // a run cut off by a time limit still leaves the figures it reached
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
    // The same bytes through a plain file, in this run: written and fsynced (the store's
    // reference), read back from the page cache (warm) and with O_DIRECT (cold).
    double write_s = 0, read_s = 1e30, direct_s = 1e30;  // reads: best of kRounds, as restores
    auto plain_references = [&](double bytes) -> absl::Status {
      auto storage = ConvertContext(*encoded, dtype, backend);
      if (!storage.ok()) return storage.status();
      const auto plain = dir / "plain.bin";
      auto t0 = std::chrono::steady_clock::now();
      if (absl::Status s = WritePlainFile(*storage, backend, plain); !s.ok()) return s;
      write_s = Seconds(std::chrono::steady_clock::now() - t0);
      storage = absl::UnknownError("released");
      ReadPlainFile(plain, false);  // warm, as the KV file is after being written
      for (int round = 0; round < kRounds; ++round) {
        t0 = std::chrono::steady_clock::now();
        const size_t read_bytes = ReadPlainFile(plain, false);
        read_s = std::min(read_s, Seconds(std::chrono::steady_clock::now() - t0));
        t0 = std::chrono::steady_clock::now();
        const size_t direct_bytes = ReadPlainFile(plain, true);
        direct_s = std::min(direct_s, Seconds(std::chrono::steady_clock::now() - t0));
        if (static_cast<double>(read_bytes) != bytes ||
            static_cast<double>(direct_bytes) != bytes) {
          return absl::InternalError("short read of the plain file");
        }
      }
      std::filesystem::remove(plain);
      return absl::OkStatus();
    };
    auto figures = StoreAndRestore(**model, **tokenizer, **task, *encoded, dtype, dir, backend,
                                   plain_references);
    if (!figures.ok()) return Fail("store and restore", figures.status());
    const StoreAndRestoreFigures& f = *figures;
    const double bytes = f.bytes;

    report.Add(p + "kv_bytes", bytes, "bytes");
    report.Add(p + "store_seconds", f.store_s, "s (KV file written and fsynced, then the commit)");
    report.Add(p + "plain_write_seconds", write_s, "s (write + fsync of the same bytes)");
    report.Add(p + "store_fraction_of_plain_write", write_s / f.store_s, "(target >= 0.5)");
    report.Add(p + "open_seconds", f.open_s, "s (reopen the cache, list tasks)");
    report.Add(p + "warm_restore_seconds", f.warm_s,
               "s (read, verify, convert to the memory dtype)");
    report.Add(p + "warm_restore_gb_per_second", bytes / f.warm_s / 1e9, "GB/s");
    report.Add(p + "plain_read_gb_per_second", bytes / read_s / 1e9, "GB/s (buffered, warm)");
    report.Add(p + "warm_restore_fraction_of_plain_read", read_s / f.warm_s, "(target >= 0.5)");
    report.Add(p + "cold_resident_fraction", f.resident,
               "of the KV file's pages in the page cache after fadvise(DONTNEED)");
    report.Add(p + "cold_restore_seconds", f.cold_s, "s");
    report.Add(p + "cold_restore_gb_per_second", bytes / f.cold_s / 1e9, "GB/s");
    report.Add(p + "direct_read_gb_per_second", bytes / direct_s / 1e9, "GB/s (O_DIRECT)");
    report.Add(p + "cold_restore_fraction_of_direct_read", direct_s / f.cold_s, "(target >= 0.7)");
    report.Add(p + "warm_restore_speedup_over_encode", encode_s / f.warm_s, "x (target >= 20)");
    report.Add(p + "cold_restore_speedup_over_encode", encode_s / f.cold_s, "x (target >= 20)");
  }

  // Scaling: the f32 restore of 100, 300, 1000 and 3000 shots (--quick: up to 1000), each task
  // encoded, stored and restored as above; restore time should grow linearly with the bytes.
  std::vector<size_t> scaling_shots = {100, 300, 1000};
  if (!options.quick) scaling_shots.push_back(3000);
  auto scaling_train = LoadSst2(Sst2Dir(options.data_dir) / "stsa.binary.train", 3000);
  if (!scaling_train.ok()) return Fail("SST-2", scaling_train.status());
  double min_ns_per_byte = 1e30, max_ns_per_byte = 0;
  for (size_t n : scaling_shots) {
    std::vector<Example> demos(scaling_train->begin(), scaling_train->begin() + n);
    auto t = IclTask::Prepare(**model, **tokenizer, Sst2TaskOptions(), demos);
    if (!t.ok()) return Fail("task", t.status());
    auto e0 = std::chrono::steady_clock::now();
    auto ctx = (*t)->EncodeContext();
    if (!ctx.ok()) return Fail("encode", ctx.status());
    const double enc_s = Seconds(std::chrono::steady_clock::now() - e0);
    auto f = StoreAndRestore(**model, **tokenizer, **t, *ctx, DType::kF32,
                             options.work_dir / "cache-bench-scaling", backend,
                             [](double) { return absl::OkStatus(); });
    if (!f.ok()) return Fail("scaling store and restore", f.status());
    const std::string s = "shots" + std::to_string(n) + "_";
    report.Add(s + "context_tokens", static_cast<double>(ctx->tokens));
    report.Add(s + "f32_kv_bytes", f->bytes, "bytes");
    report.Add(s + "encode_seconds", enc_s, "s");
    report.Add(s + "warm_restore_seconds", f->warm_s, "s");
    report.Add(s + "cold_restore_seconds", f->cold_s, "s");
    report.Add(s + "cold_restore_ms_per_demonstration", f->cold_s / static_cast<double>(n) * 1e3,
               "ms");
    report.Add(s + "cold_restore_speedup_over_encode", enc_s / f->cold_s, "x");
    const double ns_per_byte = f->cold_s / f->bytes * 1e9;
    min_ns_per_byte = std::min(min_ns_per_byte, ns_per_byte);
    max_ns_per_byte = std::max(max_ns_per_byte, ns_per_byte);
  }
  report.Add("scaling_cold_restore_ns_per_byte_max_over_min", max_ns_per_byte / min_ns_per_byte,
             "(1 = exactly linear in the bytes)");
  report.Print();
  return 0;
}

}  // namespace manyshot::bench
