// manyshot-bench attention: structured prompting's hot path on one backend, for a GPT-2-small- and
// a Llama-1B-shaped model (random weights). (1) AttendContext of one 20-row query against the
// 1000-shot SST-2 context (N = 30,569 tokens of K/V per layer, bf16 on CUDA, f32 on the CPU) as
// context bytes read per second against a same-run device copy; (2) 32 such queries at once as
// FLOP/s against a same-run bf16 GEMM; (3) whole query batches (Transformer::Forward with the
// context) as queries/s, next to the PyTorch peer (bench/torch_peer.py: concat +
// scaled_dot_product_attention with a mask).
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/bench_common.h"
#include "bench/percentile.h"
#include "bench/subcommands.h"
#include "engine/backends/backend_factory.h"
#include "engine/model/synthetic/tiny_model.h"
#include "engine/transformer/transformer.h"
#if MANYSHOT_CUDA_ENABLED
#include "engine/cuda/cuda_plugin.h"
#endif

namespace manyshot::bench {
namespace {

// The 1000-shot SST-2 task's context on GPT-2's tokenizer (structured's context_tokens figure,
// cache/README.md); the synthetic K/V below has exactly this length.
constexpr int64_t kSst2ContextTokens = 30569;
constexpr int64_t kQueryRows = 20;  // tokens per query, bos included
constexpr int64_t kGroupLength = 1024;

struct Shape {
  std::string name;  // figure prefix and the peer's --shape
  TinyModelSpec spec;
  // Positions of a query's non-bos tokens start here (structured prompting places them after
  // the group length; GPT-2's 1024 learned positions leave room only below 1005).
  int32_t first_position = 0;
};

Shape Gpt2Shape() {
  Shape s{"gpt2", {}, 1000};
  s.spec.family = "gpt2";
  s.spec.vocab_size = 50257;
  s.spec.hidden_size = 768;
  s.spec.intermediate_size = 3072;
  s.spec.num_layers = 12;
  s.spec.num_heads = 12;
  s.spec.num_kv_heads = 12;
  s.spec.max_position_embeddings = 1024;
  s.spec.tie_word_embeddings = true;
  s.spec.attention_bias = true;
  s.spec.seed = 7;  // EnsureGpt2SmallModel's spec: the same model files serve both benches
  return s;
}

// Llama-3.2-1B's layer shape (tied embeddings) with Llama-2's 32000-token vocabulary.
Shape Llama1bShape() {
  Shape s{"llama1b", {}, static_cast<int32_t>(kGroupLength)};
  s.spec.family = "llama";
  s.spec.vocab_size = 32000;
  s.spec.hidden_size = 2048;
  s.spec.intermediate_size = 8192;
  s.spec.num_layers = 16;
  s.spec.num_heads = 32;
  s.spec.num_kv_heads = 8;
  s.spec.max_position_embeddings = 4096;
  s.spec.tie_word_embeddings = true;
  s.spec.dtype = DType::kBF16;  // halves the 1.2B-parameter file
  s.spec.seed = 11;
  return s;
}

[[noreturn]] void Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "manyshot-bench attention: %s: %s\n", what.c_str(),
               status.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Must(absl::StatusOr<T> value, const std::string& what) {
  if (!value.ok()) Fail(what, value.status());
  return *std::move(value);
}

// Unit-variance uniform values from splitmix64: attention's cost does not depend on the
// distribution, and Box-Muller normals for ~10^9 context values would dominate set-up time.
std::vector<float> RandomValues(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& x : v) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    x = static_cast<float>((static_cast<double>(z >> 11) * 0x1.0p-53 * 2 - 1) * std::sqrt(3.0));
  }
  return v;
}

// A device tensor of `dtype` holding random values (uploaded as f32, converted on the device).
Tensor RandomTensor(Backend& b, DType dtype, std::vector<int64_t> shape, uint64_t seed) {
  Tensor staging = Must(b.Allocate(DType::kF32, shape), "allocate");
  Tensor out = Must(b.Allocate(dtype, shape), "allocate");
  std::vector<float> host = RandomValues(static_cast<size_t>(staging.numel()), seed);
  b.CopyFromHost(host.data(), staging);
  b.Convert(staging, out);
  if (auto s = b.Synchronize(); !s.ok()) Fail("upload", s);
  return out;
}

// Median seconds per call: after `inner` warm-up calls, `runs` timed loops of `inner` calls, each
// launched and then waited for with Synchronize (so a GPU's launch latency is amortised the way
// consecutive layers amortise it).
double SecondsPerCall(Backend& b, int runs, int inner, const std::function<void(int)>& call) {
  for (int i = 0; i < inner; ++i) call(i);
  if (auto s = b.Synchronize(); !s.ok()) Fail("warm-up", s);
  std::vector<double> times;
  for (int r = 0; r < runs; ++r) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) call(r * inner + i);
    if (auto s = b.Synchronize(); !s.ok()) Fail("timed run", s);
    times.push_back(Seconds(std::chrono::steady_clock::now() - start) / inner);
  }
  return Percentile(std::move(times), 0.5);
}

// Writes the model once; into a temporary directory renamed at the end, so an interrupted write
// is never mistaken for a model.
std::filesystem::path EnsureModel(const Shape& shape, const std::filesystem::path& work_dir) {
  if (shape.name == "gpt2") return EnsureGpt2SmallModel(work_dir / "gpt2-small-random");
  const std::filesystem::path dir = work_dir / (shape.name + "-random");
  if (std::filesystem::exists(dir / "config.json")) return dir;
  const std::filesystem::path tmp = work_dir / (shape.name + "-random.partial");
  const std::filesystem::path empty = work_dir / "no-tokenizer";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(empty);
  if (auto s = WriteTinyModel(shape.spec, empty, tmp); !s.ok()) Fail("write model", s);
  std::filesystem::rename(tmp, dir);
  return dir;
}

struct PeerResult {
  bool ok = false;
  std::string reason;     // why not, when !ok
  nlohmann::json output;  // the peer's JSON object
};

// Runs the PyTorch peer and parses the last JSON line it prints (warnings may precede it).
PeerResult RunTorchPeer(const std::filesystem::path& script, const std::string& args) {
  PeerResult result;
  std::string quoted = "'";
  for (char c : script.string()) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  const std::string command = "python3 " + quoted + " " + args + " --json 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    result.reason = "cannot start python3";
    return result;
  }
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < out.size()) {
    size_t end = out.find('\n', begin);
    if (end == std::string::npos) end = out.size();
    if (end > begin) lines.push_back(out.substr(begin, end - begin));
    begin = end + 1;
  }
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (it->empty() || (*it)[0] != '{') continue;
    result.output = nlohmann::json::parse(*it, nullptr, /*allow_exceptions=*/false);
    break;
  }
  if (result.output.is_object() && result.output.contains("error")) {
    result.reason = result.output["error"].get<std::string>();
  } else if (!result.output.is_object() || status != 0) {
    // No JSON: python3 or torch is missing, or the script failed; its last line says why.
    result.reason = absl::StrCat("exit status ", WIFEXITED(status) ? WEXITSTATUS(status) : -1, ": ",
                                 lines.empty() ? "no output" : lines.back());
  } else {
    result.ok = true;
  }
  return result;
}

struct References {
  bool available = false;
  double copy_bytes_per_second = 0;  // read + written
  double gemm_flops_per_second = 0;
};

}  // namespace

int RunAttentionBench(const BenchOptions& options) {
  Report report("attention", options.json);
  report.EchoToStderr();  // minutes on a GPU machine whose run may be cut off by a time limit

  // The backend: as asked, else CUDA when a GPU can be used, else the CPU.
  std::string why;
  std::unique_ptr<Backend> backend =
      Must(OpenBenchBackend(options.backend, options.threads, &why), "create backend");
  Backend& b = *backend;
  const bool cuda = b.device() == Device::kCUDA;
  report.AddText("backend", b.name());
  report.AddText("backend_why", why);
  report.AddText("backend_description", b.description());

  // Same-run references: what this device does on plain copies and on the GEMM of Linear.
  References ref;
  std::string device_name = "cpu";
#if MANYSHOT_CUDA_ENABLED
  if (cuda) {
    const int dev = b.device_index();
    namespace fn = cuda_plugin_functions;
    auto* name = Must(CudaPluginFunction<fn::DeviceName>(fn::kDeviceName), "device name");
    auto* copy =
        Must(CudaPluginFunction<fn::CopyBytesPerSecond>(fn::kCopyBytesPerSecond), "copy reference");
    auto* gemm =
        Must(CudaPluginFunction<fn::GemmFlopsPerSecond>(fn::kGemmFlopsPerSecond), "GEMM reference");
    device_name = Must(name(dev), "device name");
    ref.copy_bytes_per_second = Must(copy(dev, size_t{1} << 30, 20), "copy reference");
    ref.gemm_flops_per_second =
        Must(gemm(dev, 8192, 8192, 8192, DType::kBF16, 20), "GEMM reference");
    ref.available = true;
  }
#endif
  report.AddText("device", device_name);
  if (ref.available) {
    report.Add("reference_copy_gbytes_per_second", ref.copy_bytes_per_second / 1e9,
               "GB/s (device copy of 1 GiB, read + written)");
    report.Add("reference_gemm_bf16_tflops", ref.gemm_flops_per_second / 1e12,
               "TFLOP/s (cuBLASLt 8192^3, bf16 in, f32 accumulate)");
  } else {
    report.AddText("reference_copy_gbytes_per_second", "n/a");
    report.AddText("reference_gemm_bf16_tflops", "n/a");
  }

  const int64_t N = options.context_tokens > 0 ? options.context_tokens
                    : options.quick            ? 4096
                                               : kSst2ContextTokens;
  const int64_t big_batch = options.batch > 0 ? options.batch : options.quick ? 4 : 32;
  // The CPU is ~100x slower: fewer, single-call runs keep a smoke test short.
  const int runs = cuda ? std::max(20, options.repeats) : std::max(1, options.repeats);
  const int inner = cuda ? 10 : 1;
  // Structured prompting: M groups of at most 1024 tokens; the query's own non-bos keys are
  // weighted by M (own_log_weight = ln M), the context by 1 (StructuredPlacement).
  const int64_t M = (N + kGroupLength - 1) / kGroupLength;
  const float own_log_weight = static_cast<float>(std::log(static_cast<double>(M)));
  // What the server runs by default on this backend (server/kv_dtype_default.h): bf16 compute
  // and K/V (the tensor-core flash kernel) on CUDA, f32 on the CPU.
  const DType compute = cuda ? DType::kBF16 : DType::kF32;
  const DType kv = cuda ? DType::kBF16 : DType::kF32;
  report.Add("context_tokens", static_cast<double>(N));
  report.Add("groups", static_cast<double>(M));
  report.Add("own_log_weight", own_log_weight);
  report.Add("context_log_weight", 0);
  report.Add("rows_per_query", kQueryRows);
  report.Add("batch_large", static_cast<double>(big_batch));
  report.Add("timed_runs", runs);
  report.Add("calls_per_timed_run", inner);
  report.AddText("compute_dtype", std::string(DTypeName(compute)));
  report.AddText("kv_dtype", std::string(DTypeName(kv)));

  for (const Shape& shape : {Gpt2Shape(), Llama1bShape()}) {
    const TinyModelSpec& spec = shape.spec;
    const std::string& p = shape.name;
    const int64_t heads = spec.num_heads, kv_heads = spec.num_kv_heads;
    const int64_t D = spec.hidden_size / spec.num_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    report.Add(p + "_layers", static_cast<double>(spec.num_layers));
    report.Add(p + "_hidden", static_cast<double>(spec.hidden_size));
    report.Add(p + "_heads", static_cast<double>(heads));
    report.Add(p + "_kv_heads", static_cast<double>(kv_heads));
    report.Add(p + "_head_dim", static_cast<double>(D));
    report.Add(p + "_intermediate", static_cast<double>(spec.intermediate_size));
    report.Add(p + "_vocab", static_cast<double>(spec.vocab_size));

    // The context: random K/V (`kv`) [N, kv_heads, D] for every layer. The timed calls cycle
    // through the layers as a forward pass does, so no call finds its context in a cache (one layer
    // of GPT-2's is 94 MB, of Llama's 63 MB: more than an H100's 50 MB L2).
    ContextKv context;
    context.len = N;
    context.log_weight = 0.0f;
    for (int64_t l = 0; l < spec.num_layers; ++l) {
      context.k.push_back(RandomTensor(b, kv, {N, kv_heads, D}, 1000 + 2 * l));
      context.v.push_back(RandomTensor(b, kv, {N, kv_heads, D}, 1001 + 2 * l));
    }
    const double kv_bytes = 2.0 * static_cast<double>(N * kv_heads * D) * DTypeSize(kv);
    report.Add(p + "_context_kv_mbytes_per_layer", kv_bytes / 1e6, "MB");

    // (1), (2): AttendContext alone. Every row sees the context (context_from 0), so the FLOPs
    // are exactly 4 * rows * heads * N * D (q.k and p.v, a multiply-add each).
    Tensor own = Must(b.Allocate(kv, {kQueryRows, kv_heads, D}), "allocate");
    for (int64_t batch : {int64_t{1}, big_batch}) {
      const int64_t rows = batch * kQueryRows;
      Tensor q = RandomTensor(b, compute, {rows, heads, D}, 7 + batch);
      AttentionState out{Must(b.Allocate(compute, {rows, heads, D}), "allocate"),
                         Must(b.Allocate(DType::kF32, {rows, heads}), "allocate")};
      std::vector<AttentionSequence> seqs(batch);
      for (int64_t s = 0; s < batch; ++s) {
        seqs[s] = {s * kQueryRows, kQueryRows, &own, &own, kQueryRows};
      }
      const double seconds = SecondsPerCall(b, runs, inner, [&](int i) {
        const int64_t l = i % spec.num_layers;
        AttentionContext c{&context.k[l], &context.v[l], N, 0.0f};
        b.AttendContext(q, seqs, c, scale, out);
      });
      const double flops = 4.0 * static_cast<double>(rows * heads * N * D);
      const std::string f = p + "_attend_context_b" + std::to_string(batch);
      report.Add(f + "_ms", seconds * 1e3, "ms per layer-call");
      report.Add(f + "_kv_gbytes_per_second", kv_bytes / seconds / 1e9, "GB/s context read");
      report.Add(f + "_tflops", flops / seconds / 1e12, "TFLOP/s");
      const bool primary_copy = batch == 1;
      if (ref.available) {
        report.Add(f + "_fraction_of_copy", kv_bytes / seconds / ref.copy_bytes_per_second,
                   primary_copy ? "(target >= 0.7)" : "");
        report.Add(f + "_fraction_of_gemm", flops / seconds / ref.gemm_flops_per_second,
                   primary_copy ? "" : "(target >= 0.5)");
      } else {
        report.AddText(f + "_fraction_of_copy", "n/a");
        report.AddText(f + "_fraction_of_gemm", "n/a");
      }
    }

    std::map<int64_t, double> ours_qps;  // batch -> queries/s of (3), for the peer's ratio
    // (3): whole query batches through the model with the context, as the query runner does:
    // bos at position 0 (weight 1, no context), the other 19 tokens weighted by M.
    {
      auto model = Must(Transformer::Load(EnsureModel(shape, options.work_dir), b,
                                          TransformerOptions{compute, kv}),
                        "load " + p);
      const ModelConfig& config = model->config();
      const int32_t bos = static_cast<int32_t>(std::max<int64_t>(config.bos_token_id, 0));
      for (int64_t batch : {int64_t{1}, big_batch}) {
        std::vector<std::vector<int32_t>> tokens(batch), positions(batch);
        std::vector<KvCache> caches;
        std::vector<int64_t> last = {kQueryRows - 1};
        for (int64_t s = 0; s < batch; ++s) {
          tokens[s].push_back(bos);
          positions[s].push_back(0);
          for (int64_t t = 1; t < kQueryRows; ++t) {
            // Arbitrary ids spread over the vocabulary (the cost does not depend on them).
            tokens[s].push_back(static_cast<int32_t>((s * 7919 + t * 104729) % spec.vocab_size));
            positions[s].push_back(shape.first_position + static_cast<int32_t>(t - 1));
          }
          caches.push_back(model->NewCache(kQueryRows));
        }
        const double seconds = MedianSeconds(
            [&] {
              std::vector<ForwardSequence> seqs(batch);
              for (int64_t s = 0; s < batch; ++s) {
                caches[s].Truncate(0);
                seqs[s] = {tokens[s], positions[s], &caches[s], last, own_log_weight, 1, 1};
              }
              auto r = model->Forward(seqs, &context);
              if (!r.ok()) Fail("forward " + p, r.status());
            },
            runs);
        const std::string f = p + "_forward_b" + std::to_string(batch);
        report.Add(f + "_ms", seconds * 1e3, "ms per batch");
        report.Add(f + "_queries_per_second", static_cast<double>(batch) / seconds, "q/s");
        ours_qps[batch] = static_cast<double>(batch) / seconds;
      }
    }
    context = ContextKv();  // the peer gets the device to itself

    // (4): the PyTorch peer on the same shapes and batches.
    if (options.torch_peer.empty()) {
      report.AddText(p + "_torch_peer", "not run (--torch_peer=bench/torch_peer.py)");
      continue;
    }
    const std::string args =
        absl::StrCat("--shape ", p, " --context_tokens ", N, " --batch 1,", big_batch, " --rows ",
                     kQueryRows, " --runs ", runs, " --device ", cuda ? "cuda" : "cpu");
    PeerResult peer = RunTorchPeer(options.torch_peer, args);
    if (!peer.ok) {
      report.AddText(p + "_torch_peer", "unavailable: " + peer.reason);
      continue;
    }
    report.AddText(p + "_torch_peer", absl::StrCat("torch ", peer.output.value("torch", "?"),
                                                   " on ", peer.output.value("device", "?"), ", ",
                                                   peer.output.value("attention", "?")));
    for (const auto& r : peer.output["results"]) {
      const int64_t batch = r.value("batch", int64_t{0});
      const double qps = r.value("queries_per_second", 0.0);
      const std::string f = p + "_torch_b" + std::to_string(batch);
      report.Add(f + "_ms", r.value("ms_per_batch", 0.0), "ms per batch");
      report.Add(f + "_queries_per_second", qps, "q/s");
      if (ours_qps.count(batch) && qps > 0) {
        report.Add(p + "_ours_over_torch_b" + std::to_string(batch), ours_qps[batch] / qps, "x");
      }
    }
  }
  report.Print();
  return 0;
}

}  // namespace manyshot::bench
