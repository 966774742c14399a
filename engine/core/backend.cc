// The checked fronts of every backend op (see backend.h): shapes, dtypes and devices are verified
// here, once for all backends, before an implementation sees them.
#include "engine/core/backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace manyshot {
namespace {

std::string Describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return absl::StrCat(std::string(DTypeName(t.dtype())), t.ShapeString(),
                      t.device() == Device::kCPU ? "@cpu" : "@cuda");
}

// Collects the first failed condition of a front as an INVALID_ARGUMENT naming the op.
class Checker {
 public:
  explicit Checker(const char* op) : op_(op) {}
  // `what` is the message, or a callable that builds it: fronts run on every op, so messages are
  // only formatted for a failed condition.
  template <typename What>
  Checker& That(bool condition, const What& what);
  Checker& Defined(const Tensor& t, const char* name) {
    return That(t.defined(), [&] { return absl::StrCat(name, " is undefined"); });
  }
  Checker& On(const Tensor& t, Device device, const char* name) {
    return That(!t.defined() || t.device() == device, [&] {
      return absl::StrCat(name, " ", Describe(t), " is not on this backend's device");
    });
  }
  Checker& Float(const Tensor& t, const char* name) {
    return That(!t.defined() || IsFloat(t.dtype()),
                [&] { return absl::StrCat(name, " ", Describe(t), " must be a float tensor"); });
  }
  Checker& Is(const Tensor& t, DType dtype, const char* name) {
    return That(!t.defined() || t.dtype() == dtype, [&] {
      return absl::StrCat(name, " ", Describe(t), " must be ", std::string(DTypeName(dtype)));
    });
  }
  Checker& Rank(const Tensor& t, size_t rank, const char* name) {
    return That(!t.defined() || t.rank() == rank,
                [&] { return absl::StrCat(name, " ", Describe(t), " must have rank ", rank); });
  }
  Checker& SameDType(const Tensor& a, const Tensor& b, const char* an, const char* bn) {
    return That(!a.defined() || !b.defined() || a.dtype() == b.dtype(), [&] {
      return absl::StrCat(an, " ", Describe(a), " and ", bn, " ", Describe(b),
                          " must have the same dtype");
    });
  }
  // `weight` in the dtype of `x`, or in one the backend widens for it.
  Checker& WeightDType(const Backend& backend, const Tensor& x, const Tensor& weight,
                       const char* xn, const char* wn) {
    return That(
        !x.defined() || !weight.defined() || backend.SupportsWeightDType(x.dtype(), weight.dtype()),
        [&] {
          return absl::StrCat(wn, " ", Describe(weight), " must have the dtype of ", xn, " ",
                              Describe(x), " (the ", backend.name(), " backend holds no ",
                              std::string(DTypeName(weight.dtype())), " weights for ",
                              std::string(DTypeName(x.dtype())), " activations)");
        });
  }
  Checker& SameNumel(const Tensor& a, const Tensor& b, const char* an, const char* bn) {
    return That(a.numel() == b.numel(), [&] {
      return absl::StrCat(an, " ", Describe(a), " and ", bn, " ", Describe(b),
                          " must have as many elements");
    });
  }
  const absl::Status& status() const { return status_; }

 private:
  const char* op_;
  absl::Status status_;
};

// A message given as text or as a callable that builds it (Checker::That).
template <typename What>
std::string Message(const What& what) {
  if constexpr (std::is_invocable_v<What>) {
    return what();
  } else {
    return std::string(what);
  }
}

template <typename What>
Checker& Checker::That(bool condition, const What& what) {
  if (!condition && status_.ok()) {
    status_ = absl::InvalidArgumentError(absl::StrCat(op_, ": ", Message(what)));
  }
  return *this;
}

int64_t LastDim(const Tensor& t) { return t.rank() == 0 ? 1 : t.dim(t.rank() - 1); }
int64_t LeadingRows(const Tensor& t) {
  const int64_t last = LastDim(t);
  return last == 0 ? 0 : t.numel() / last;
}

}  // namespace

template <typename Check, typename Impl>
void Backend::Dispatch(const char* op, Check&& check, Impl&& impl) {
  Checker checker(op);
  check(checker);
  if (!checker.status().ok()) {
    RecordError(checker.status());
    return;
  }
  if (HasError()) return;  // an earlier op of this thread failed: its outputs are garbage
  absl::Status status = impl();
  if (!status.ok()) RecordError(std::move(status));
}

namespace {

// The calling thread's key in Backend::errors_: unique for the life of the process.
uint64_t ThreadToken() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t token = next.fetch_add(1, std::memory_order_relaxed);
  return token;
}

// The error tables (one per backend) in which this thread has an entry; when the thread ends, it
// removes its entry from those whose backend still exists, so an error nobody took is not kept for
// the life of the backend.
class ErrorsOfThisThread {
 public:
  ~ErrorsOfThisThread() {
    ended_ = true;
    for (const auto& weak : tables_) {
      if (auto table = weak.lock()) {
        std::lock_guard<std::mutex> lock(table->mutex);
        table->by_thread.erase(token_);
      }
    }
  }

  // Remembers `table` (once). An error recorded after this thread's thread_locals were destroyed
  // (by the destructor of another thread_local) keeps its entry: rare, and the entry is only kept.
  static void Remember(const std::shared_ptr<backend_internal::ThreadErrors>& table) {
    if (ended_) return;
    thread_local ErrorsOfThisThread self;
    auto& tables = self.tables_;
    std::erase_if(tables, [](const auto& weak) { return weak.expired(); });
    for (const auto& weak : tables) {
      if (weak.lock() == table) return;
    }
    tables.push_back(table);
  }

 private:
  static thread_local bool ended_;
  const uint64_t token_ = ThreadToken();
  std::vector<std::weak_ptr<backend_internal::ThreadErrors>> tables_;
};

thread_local bool ErrorsOfThisThread::ended_ = false;

}  // namespace

bool Backend::HasError() const {
  std::lock_guard<std::mutex> lock(errors_->mutex);
  return errors_->by_thread.count(ThreadToken()) != 0;
}

void Backend::RecordError(absl::Status status) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(errors_->mutex);
    first = errors_->by_thread.emplace(ThreadToken(), std::move(status)).second;  // keeps the first
  }
  if (first) ErrorsOfThisThread::Remember(errors_);
}

absl::Status Backend::TakeError() {
  std::lock_guard<std::mutex> lock(errors_->mutex);
  auto it = errors_->by_thread.find(ThreadToken());
  if (it == errors_->by_thread.end()) return absl::OkStatus();
  absl::Status status = std::move(it->second);
  errors_->by_thread.erase(it);
  return status;
}

size_t Backend::ThreadsWithPendingErrors() const {
  std::lock_guard<std::mutex> lock(errors_->mutex);
  return errors_->by_thread.size();
}

absl::StatusOr<Tensor> Backend::Allocate(DType dtype, std::vector<int64_t> shape) {
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("Allocate: negative dimension");
  }
  return AllocateImpl(dtype, std::move(shape));
}

absl::StatusOr<Tensor> Backend::AllocateHost(DType dtype, std::vector<int64_t> shape) {
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("AllocateHost: negative dimension");
  }
  return AllocateHostImpl(dtype, std::move(shape));
}

void Backend::CopyFromHost(const void* src, const Tensor& dst) {
  Dispatch(
      "CopyFromHost",
      [&](Checker& c) {
        c.Defined(dst, "dst")
            .On(dst, device(), "dst")
            .That(src != nullptr || dst.bytes() == 0, "null source");
      },
      [&] { return dst.bytes() == 0 ? absl::OkStatus() : CopyFromHostImpl(src, dst); });
}

void Backend::CopyFromHostAsync(const Tensor& src, const Tensor& dst) {
  Dispatch(
      "CopyFromHostAsync",
      [&](Checker& c) {
        c.Defined(src, "src").Defined(dst, "dst").On(src, Device::kCPU, "src");
        c.On(dst, device(), "dst").That(src.bytes() == dst.bytes(), "src and dst sizes differ");
      },
      [&] { return dst.bytes() == 0 ? absl::OkStatus() : CopyFromHostAsyncImpl(src, dst); });
}

absl::Status Backend::CopyToHost(const Tensor& src, void* dst) {
  Dispatch(
      "CopyToHost",
      [&](Checker& c) {
        c.Defined(src, "src")
            .On(src, device(), "src")
            .That(dst != nullptr || src.bytes() == 0, "null destination");
      },
      [&] { return src.bytes() == 0 ? SynchronizeImpl() : CopyToHostImpl(src, dst); });
  return TakeError();
}

void Backend::Copy(const Tensor& src, const Tensor& dst) {
  Dispatch(
      "Copy",
      [&](Checker& c) {
        c.Defined(src, "src").Defined(dst, "dst").On(src, device(), "src").On(dst, device(), "dst");
        c.SameDType(src, dst, "src", "dst").SameNumel(src, dst, "src", "dst");
      },
      [&] { return src.bytes() == 0 ? absl::OkStatus() : CopyImpl(src, dst); });
}

void Backend::Convert(const Tensor& src, const Tensor& dst) {
  Dispatch(
      "Convert",
      [&](Checker& c) {
        c.Defined(src, "src").Defined(dst, "dst").On(src, device(), "src").On(dst, device(), "dst");
        c.Float(src, "src").Float(dst, "dst").SameNumel(src, dst, "src", "dst");
      },
      [&] {
        if (src.numel() == 0) return absl::OkStatus();
        return src.dtype() == dst.dtype() ? CopyImpl(src, dst) : ConvertImpl(src, dst);
      });
}

absl::Status Backend::Synchronize() {
  absl::Status wait = SynchronizeImpl();
  absl::Status first = TakeError();
  return first.ok() ? wait : first;
}

absl::Status Backend::BeginCapture() {
  // A capture must not start over an error its ops would never report.
  if (absl::Status pending = TakeError(); !pending.ok()) return pending;
  return BeginCaptureImpl();
}

absl::StatusOr<std::unique_ptr<CapturedWork>> Backend::EndCapture() {
  absl::StatusOr<std::unique_ptr<CapturedWork>> work = EndCaptureImpl();
  absl::Status first = TakeError();  // an op of the capture failed: the recording is incomplete
  if (!first.ok()) return first;
  return work;
}

void Backend::Replay(const CapturedWork& work) {
  Dispatch(
      "Replay", [](Checker&) {}, [&] { return ReplayImpl(work); });
}

absl::Status Backend::BeginCaptureImpl() {
  return absl::UnimplementedError(absl::StrCat("the ", name(), " backend cannot capture ops"));
}

absl::StatusOr<std::unique_ptr<CapturedWork>> Backend::EndCaptureImpl() {
  return absl::UnimplementedError(absl::StrCat("the ", name(), " backend cannot capture ops"));
}

absl::Status Backend::ReplayImpl(const CapturedWork&) {
  return absl::UnimplementedError(absl::StrCat("the ", name(), " backend cannot replay ops"));
}

void Backend::Embedding(const Tensor& ids, const Tensor& table, const Tensor& out,
                        bool accumulate) {
  Dispatch(
      "Embedding",
      [&](Checker& c) {
        c.Defined(ids, "ids").Defined(table, "table").Defined(out, "out");
        c.On(ids, device(), "ids").On(table, device(), "table").On(out, device(), "out");
        c.Is(ids, DType::kI32, "ids").Rank(ids, 1, "ids").Rank(table, 2, "table");
        c.Rank(out, 2, "out").Float(table, "table").Float(out, "out");
        c.WeightDType(*this, out, table, "out", "table");
        if (!c.status().ok()) return;
        c.That(out.dim(0) == ids.dim(0) && out.dim(1) == table.dim(1), [&] {
          return absl::StrCat("out ", Describe(out), " must be [", ids.dim(0), ", ", table.dim(1),
                              "]");
        });
      },
      [&] { return EmbeddingImpl(ids, table, out, accumulate); });
}

void Backend::GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  Dispatch(
      "GatherRows",
      [&](Checker& c) {
        c.Defined(x, "x").Defined(rows, "rows").Defined(out, "out");
        c.On(x, device(), "x").On(rows, device(), "rows").On(out, device(), "out");
        c.Is(rows, DType::kI32, "rows").Rank(rows, 1, "rows").SameDType(x, out, "x", "out");
        if (!c.status().ok()) return;
        c.That(x.rank() >= 1 && out.rank() == x.rank() && out.dim(0) == rows.dim(0) &&
                   out.RowBytes() == x.RowBytes(),
               [&] {
                 return absl::StrCat("out ", Describe(out), " must hold ", rows.dim(0),
                                     " rows of x ", Describe(x));
               });
      },
      [&] { return rows.numel() == 0 ? absl::OkStatus() : GatherRowsImpl(x, rows, out); });
}

void Backend::RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  Dispatch(
      "RmsNorm",
      [&](Checker& c) {
        c.Defined(x, "x").Defined(weight, "weight").Defined(out, "out");
        c.On(x, device(), "x").On(weight, device(), "weight").On(out, device(), "out");
        c.Float(x, "x").SameDType(x, weight, "x", "weight").SameDType(x, out, "x", "out");
        c.That(x.shape() == out.shape(), "x and out shapes differ");
        c.That(weight.numel() == LastDim(x), "weight must have x's last dimension");
      },
      [&] { return x.numel() == 0 ? absl::OkStatus() : RmsNormImpl(x, weight, eps, out); });
}

void Backend::LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                        const Tensor& out) {
  Dispatch(
      "LayerNorm",
      [&](Checker& c) {
        c.Defined(x, "x").Defined(weight, "weight").Defined(bias, "bias").Defined(out, "out");
        c.On(x, device(), "x").On(weight, device(), "weight").On(bias, device(), "bias");
        c.On(out, device(), "out").Float(x, "x").SameDType(x, weight, "x", "weight");
        c.SameDType(x, bias, "x", "bias").SameDType(x, out, "x", "out");
        c.That(x.shape() == out.shape(), "x and out shapes differ");
        c.That(weight.numel() == LastDim(x) && bias.numel() == LastDim(x),
               "weight and bias must have x's last dimension");
      },
      [&] { return x.numel() == 0 ? absl::OkStatus() : LayerNormImpl(x, weight, bias, eps, out); });
}

namespace {

// Linear's arguments (LinearActivation's too): out = x W (+ bias).
void CheckLinear(Checker& c, Backend& backend, const Tensor& x, const Tensor& weight,
                 WeightLayout layout, const Tensor& bias, const Tensor& out) {
  const Device device = backend.device();
  c.Defined(x, "x").Defined(weight, "weight").Defined(out, "out");
  c.On(x, device, "x").On(weight, device, "weight").On(bias, device, "bias");
  c.On(out, device, "out").Float(x, "x").Float(weight, "weight");
  c.WeightDType(backend, x, weight, "x", "weight");
  c.SameDType(x, bias, "x", "bias").Rank(weight, 2, "weight");
  c.That(out.dtype() == x.dtype() || out.dtype() == DType::kF32, [&] {
    return absl::StrCat("out ", Describe(out), " must be ", std::string(DTypeName(x.dtype())),
                        " or f32");
  });
  if (!c.status().ok()) return;
  const int64_t in = layout == WeightLayout::kOutIn ? weight.dim(1) : weight.dim(0);
  const int64_t outf = layout == WeightLayout::kOutIn ? weight.dim(0) : weight.dim(1);
  c.That(LastDim(x) == in, [&] {
    return absl::StrCat("x ", Describe(x), " does not match weight ", Describe(weight));
  });
  c.That(LastDim(out) == outf && LeadingRows(out) == LeadingRows(x), [&] {
    return absl::StrCat("out ", Describe(out), " must be [", LeadingRows(x), ", ", outf, "]");
  });
  c.That(!bias.defined() || bias.numel() == outf, "bias must have the output dimension");
}

}  // namespace

void Backend::Linear(const Tensor& x, const Tensor& weight, WeightLayout layout, const Tensor& bias,
                     const Tensor& out) {
  Dispatch(
      "Linear", [&](Checker& c) { CheckLinear(c, *this, x, weight, layout, bias, out); },
      [&] {
        return LeadingRows(x) == 0 ? absl::OkStatus() : LinearImpl(x, weight, layout, bias, out);
      });
}

void Backend::LinearActivation(const Tensor& x, const Tensor& weight, WeightLayout layout,
                               const Tensor& bias, GemmActivation activation, const Tensor& out) {
  Dispatch(
      "LinearActivation",
      [&](Checker& c) {
        CheckLinear(c, *this, x, weight, layout, bias, out);
        c.That(activation == GemmActivation::kGeluTanh || activation == GemmActivation::kRelu,
               "unknown activation");
      },
      [&] {
        return LeadingRows(x) == 0 ? absl::OkStatus()
                                   : LinearActivationImpl(x, weight, layout, bias, activation, out);
      });
}

absl::Status Backend::LinearActivationImpl(const Tensor& x, const Tensor& weight,
                                           WeightLayout layout, const Tensor& bias,
                                           GemmActivation activation, const Tensor& out) {
  if (absl::Status s = LinearImpl(x, weight, layout, bias, out); !s.ok()) return s;
  return activation == GemmActivation::kRelu ? ReluImpl(out) : GeluTanhImpl(out);
}

void Backend::Rope(const Tensor& x, const Tensor& positions, const RopeTable& table) {
  Dispatch(
      "Rope",
      [&](Checker& c) {
        c.Defined(x, "x").Defined(positions, "positions").On(x, device(), "x");
        c.On(positions, device(), "positions").Float(x, "x").Rank(x, 3, "x");
        c.Is(positions, DType::kI32, "positions").Rank(positions, 1, "positions");
        if (!c.status().ok()) return;
        c.That(positions.dim(0) == x.dim(0), "one position per row of x");
        c.That(x.dim(2) % 2 == 0, "head_dim must be even");
        c.That(static_cast<int64_t>(table.inv_freq.size()) == x.dim(2) / 2, [&] {
          return absl::StrCat("the RoPE table has ", table.inv_freq.size(),
                              " frequencies, head_dim ", x.dim(2), " needs ", x.dim(2) / 2);
        });
        c.That(std::isfinite(table.attention_factor) && table.attention_factor > 0,
               "the RoPE attention factor must be positive and finite");
      },
      [&] { return x.numel() == 0 ? absl::OkStatus() : RopeImpl(x, positions, table); });
}

void Backend::GeluTanh(const Tensor& x) {
  Dispatch(
      "GeluTanh", [&](Checker& c) { c.Defined(x, "x").On(x, device(), "x").Float(x, "x"); },
      [&] { return x.numel() == 0 ? absl::OkStatus() : GeluTanhImpl(x); });
}

void Backend::GeluErf(const Tensor& x) {
  Dispatch(
      "GeluErf", [&](Checker& c) { c.Defined(x, "x").On(x, device(), "x").Float(x, "x"); },
      [&] { return x.numel() == 0 ? absl::OkStatus() : GeluErfImpl(x); });
}

namespace {

// SwiGlu and GeGlu: gate_up [T, 2I] (gate | up) into out [T, I], one float dtype.
void CheckGlu(Checker& c, Device device, const Tensor& gate_up, const Tensor& out) {
  c.Defined(gate_up, "gate_up").Defined(out, "out").On(gate_up, device, "gate_up");
  c.On(out, device, "out").Float(gate_up, "gate_up").SameDType(gate_up, out, "gate_up", "out");
  c.Rank(gate_up, 2, "gate_up").Rank(out, 2, "out");
  if (!c.status().ok()) return;
  c.That(gate_up.dim(0) == out.dim(0) && gate_up.dim(1) == 2 * out.dim(1),
         "gate_up must be [T, 2I] for out [T, I]");
}

}  // namespace

void Backend::SwiGlu(const Tensor& gate_up, const Tensor& out) {
  Dispatch(
      "SwiGlu", [&](Checker& c) { CheckGlu(c, device(), gate_up, out); },
      [&] { return out.numel() == 0 ? absl::OkStatus() : SwiGluImpl(gate_up, out); });
}

void Backend::GeGlu(const Tensor& gate_up, const Tensor& out) {
  Dispatch(
      "GeGlu", [&](Checker& c) { CheckGlu(c, device(), gate_up, out); },
      [&] { return out.numel() == 0 ? absl::OkStatus() : GeGluImpl(gate_up, out); });
}

void Backend::Relu(const Tensor& x) {
  Dispatch(
      "Relu", [&](Checker& c) { c.Defined(x, "x").On(x, device(), "x").Float(x, "x"); },
      [&] { return x.numel() == 0 ? absl::OkStatus() : ReluImpl(x); });
}

void Backend::Scale(const Tensor& x, float factor) {
  Dispatch(
      "Scale", [&](Checker& c) { c.Defined(x, "x").On(x, device(), "x").Float(x, "x"); },
      [&] { return x.numel() == 0 ? absl::OkStatus() : ScaleImpl(x, factor); });
}

void Backend::SplitQkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v) {
  Dispatch(
      "SplitQkv",
      [&](Checker& c) {
        for (auto [t, n] : {std::pair{&qkv, "qkv"}, {&q, "q"}, {&k, "k"}, {&v, "v"}}) {
          c.Defined(*t, n).On(*t, device(), n).SameDType(qkv, *t, "qkv", n);
        }
        if (!c.status().ok()) return;
        const int64_t rows = qkv.dim(0);
        c.That(q.dim(0) == rows && k.dim(0) == rows && v.dim(0) == rows, "row counts differ");
        c.That(q.numel() + k.numel() + v.numel() == qkv.numel(),
               "q, k and v must split qkv's columns exactly");
      },
      [&] { return qkv.numel() == 0 ? absl::OkStatus() : SplitQkvImpl(qkv, q, k, v); });
}

void Backend::Add(const Tensor& x, const Tensor& y) {
  Dispatch(
      "Add",
      [&](Checker& c) {
        c.Defined(x, "x").Defined(y, "y").On(x, device(), "x").On(y, device(), "y");
        c.Float(x, "x").SameDType(x, y, "x", "y").SameNumel(x, y, "x", "y");
      },
      [&] { return x.numel() == 0 ? absl::OkStatus() : AddImpl(x, y); });
}

void Backend::AddRmsNorm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                         const Tensor& out) {
  Dispatch(
      "AddRmsNorm",
      [&](Checker& c) {
        c.Defined(x, "x").Defined(y, "y").Defined(weight, "weight").Defined(out, "out");
        c.On(x, device(), "x").On(y, device(), "y").On(weight, device(), "weight");
        c.On(out, device(), "out").Float(x, "x").SameDType(x, y, "x", "y");
        c.SameDType(x, weight, "x", "weight").SameDType(x, out, "x", "out");
        c.That(x.shape() == y.shape() && x.shape() == out.shape(), "x, y and out shapes differ");
        c.That(weight.numel() == LastDim(x), "weight must have x's last dimension");
        c.That(x.numel() == 0 || out.raw() != x.raw(), "out must not be x (it may be y)");
      },
      [&] { return x.numel() == 0 ? absl::OkStatus() : AddRmsNormImpl(x, y, weight, eps, out); });
}

void Backend::AddLayerNorm(const Tensor& x, const Tensor& y, const Tensor& weight,
                           const Tensor& bias, float eps, const Tensor& out) {
  Dispatch(
      "AddLayerNorm",
      [&](Checker& c) {
        c.Defined(x, "x").Defined(y, "y").Defined(weight, "weight").Defined(bias, "bias");
        c.Defined(out, "out").On(x, device(), "x").On(y, device(), "y");
        c.On(weight, device(), "weight").On(bias, device(), "bias").On(out, device(), "out");
        c.Float(x, "x").SameDType(x, y, "x", "y").SameDType(x, weight, "x", "weight");
        c.SameDType(x, bias, "x", "bias").SameDType(x, out, "x", "out");
        c.That(x.shape() == y.shape() && x.shape() == out.shape(), "x, y and out shapes differ");
        c.That(weight.numel() == LastDim(x) && bias.numel() == LastDim(x),
               "weight and bias must have x's last dimension");
        c.That(x.numel() == 0 || out.raw() != x.raw(), "out must not be x (it may be y)");
      },
      [&] {
        return x.numel() == 0 ? absl::OkStatus() : AddLayerNormImpl(x, y, weight, bias, eps, out);
      });
}

absl::Status Backend::AddRmsNormImpl(const Tensor& x, const Tensor& y, const Tensor& weight,
                                     float eps, const Tensor& out) {
  if (absl::Status added = AddImpl(x, y); !added.ok()) return added;
  return RmsNormImpl(x, weight, eps, out);
}

absl::Status Backend::AddLayerNormImpl(const Tensor& x, const Tensor& y, const Tensor& weight,
                                       const Tensor& bias, float eps, const Tensor& out) {
  if (absl::Status added = AddImpl(x, y); !added.ok()) return added;
  return LayerNormImpl(x, weight, bias, eps, out);
}

namespace {

// Checks shared by AttendOwn and AttendContext: q and the state, and every sequence's rows.
// q [T, heads, head_dim] and the state it yields: o like q, lse f32 [T, heads].
void CheckQueryAndState(Checker& c, Device device, const Tensor& q, const AttentionState& out) {
  c.Defined(q, "q").Defined(out.o, "out.o").Defined(out.lse, "out.lse");
  c.On(q, device, "q").On(out.o, device, "out.o").On(out.lse, device, "out.lse");
  c.Float(q, "q").Rank(q, 3, "q").SameDType(q, out.o, "q", "out.o");
  c.Is(out.lse, DType::kF32, "out.lse").Rank(out.lse, 2, "out.lse");
  if (!c.status().ok()) return;
  c.That(out.o.shape() == q.shape(), "out.o must have q's shape");
  c.That(out.lse.dim(0) == q.dim(0) && out.lse.dim(1) == q.dim(1), "out.lse must be [T, heads]");
}

// ALiBi arguments of one sequence: slopes f32 [heads] and kI32 key positions covering its keys,
// set or unset alike in every sequence of the call (`first`).
void CheckAlibi(Checker& c, Device device, const Tensor& q, const AttentionSequence& seq,
                const AttentionSequence& first, size_t s) {
  auto what = [s] { return absl::StrCat("sequence ", s, ": "); };
  c.That((seq.alibi_slopes != nullptr) == (first.alibi_slopes != nullptr),
         [&] { return what() + "every sequence of a call uses ALiBi or none does"; });
  if (seq.alibi_slopes == nullptr || !c.status().ok()) return;
  c.That(seq.alibi_slopes->defined() && seq.positions != nullptr && seq.positions->defined(),
         [&] { return what() + "ALiBi needs slopes and key positions"; });
  if (!c.status().ok()) return;
  const Tensor& slopes = *seq.alibi_slopes;
  const Tensor& positions = *seq.positions;
  c.On(slopes, device, "alibi_slopes").Is(slopes, DType::kF32, "alibi_slopes");
  c.Rank(slopes, 1, "alibi_slopes").On(positions, device, "positions");
  c.Is(positions, DType::kI32, "positions").Rank(positions, 1, "positions");
  if (!c.status().ok()) return;
  c.That(slopes.dim(0) == q.dim(1), [&] {
    return absl::StrCat(what(), slopes.dim(0), " ALiBi slopes for ", q.dim(1), " heads");
  });
  c.That(positions.dim(0) >= seq.kv_len, [&] {
    return absl::StrCat(what(), positions.dim(0), " key positions for ", seq.kv_len, " keys");
  });
}

void CheckAttentionRows(Checker& c, Device device, const Tensor& q,
                        absl::Span<const AttentionSequence> sequences, const AttentionState& out) {
  CheckQueryAndState(c, device, q, out);
  if (!c.status().ok()) return;
  for (size_t s = 0; s < sequences.size() && c.status().ok(); ++s) {
    const AttentionSequence& seq = sequences[s];
    c.That(seq.q_begin >= 0 && seq.q_len >= 0 && seq.q_begin + seq.q_len <= q.dim(0), [&] {
      return absl::StrCat("sequence ", s, ": rows [", seq.q_begin, ", ", seq.q_begin + seq.q_len,
                          ") are outside q's ", q.dim(0), " rows");
    });
    c.That(seq.kv_len >= seq.q_len, [&] {
      return absl::StrCat("sequence ", s, ": kv_len ", seq.kv_len, " < q_len ", seq.q_len);
    });
    c.That(seq.kv_len <= std::numeric_limits<int32_t>::max(), "kv_len too large");
    CheckAlibi(c, device, q, seq, sequences.front(), s);
  }
}

// K/V of one attention source: same dtype, [rows >= len, kv_heads, head_dim], kv_heads | heads.
// `what` names the source (as Checker::That's messages).
template <typename What>
void CheckKeys(Checker& c, Device device, const Tensor& q, const Tensor* k, const Tensor* v,
               int64_t len, const What& what_source) {
  auto what = [&] { return Message(what_source); };
  c.That(k != nullptr && v != nullptr && k->defined() && v->defined(),
         [&] { return absl::StrCat(what(), ": k/v are missing"); });
  if (!c.status().ok()) return;
  c.On(*k, device, "k").On(*v, device, "v").Float(*k, "k").SameDType(*k, *v, "k", "v");
  c.Rank(*k, 3, "k").That(k->shape() == v->shape(), [&] {
    return absl::StrCat(what(), ": k and v shapes differ");
  });
  if (!c.status().ok()) return;
  c.That(k->dim(0) >= len,
         [&] { return absl::StrCat(what(), ": ", len, " keys but k has ", k->dim(0), " rows"); });
  c.That(k->dim(2) == q.dim(2),
         [&] { return absl::StrCat(what(), ": head_dim ", k->dim(2), " != q's ", q.dim(2)); });
  c.That(k->dim(1) > 0 && q.dim(1) % k->dim(1) == 0, [&] {
    return absl::StrCat(what(), ": ", q.dim(1), " heads are not a multiple of ", k->dim(1),
                        " kv heads");
  });
}

}  // namespace

void Backend::AttendOwn(const Tensor& q, absl::Span<const AttentionSequence> sequences, float scale,
                        const AttentionState& out) {
  Dispatch(
      "AttendOwn",
      [&](Checker& c) {
        CheckAttentionRows(c, device(), q, sequences, out);
        for (size_t s = 0; s < sequences.size() && c.status().ok(); ++s) {
          CheckKeys(c, device(), q, sequences[s].k, sequences[s].v, sequences[s].kv_len,
                    [&] { return absl::StrCat("sequence ", s); });
          if (s > 0 && c.status().ok()) {
            c.That(sequences[s].k->dtype() == sequences[0].k->dtype(),
                   "every sequence's own K/V must have one dtype");
          }
        }
      },
      [&] { return AttendOwnImpl(q, sequences, scale, out); });
}

void Backend::AttendContext(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                            const AttentionContext& context, float scale,
                            const AttentionState& out) {
  Dispatch(
      "AttendContext",
      [&](Checker& c) {
        CheckAttentionRows(c, device(), q, sequences, out);
        c.That(context.len >= 0, "negative context length");
        if (context.len > 0)
          CheckKeys(c, device(), q, context.k, context.v, context.len, "context");
        if (c.status().ok() && context.len > 0 && !sequences.empty() &&
            sequences.front().alibi_slopes != nullptr) {
          const Tensor* p = context.positions;
          c.That(p != nullptr && p->defined(),
                 "context: ALiBi needs the context keys' positions (none given)");
          if (!c.status().ok()) return;
          c.On(*p, device(), "context.positions").Is(*p, DType::kI32, "context.positions");
          c.Rank(*p, 1, "context.positions");
          if (c.status().ok()) {
            c.That(p->dim(0) >= context.len, [&] {
              return absl::StrCat("context: ", p->dim(0), " key positions for ", context.len,
                                  " keys");
            });
          }
        }
      },
      [&] { return AttendContextImpl(q, sequences, context, scale, out); });
}

void Backend::MergeStates(const AttentionState& into, const AttentionState& other,
                          float other_log_weight) {
  Dispatch(
      "MergeStates",
      [&](Checker& c) {
        for (auto [t, n] : {std::pair{&into.o, "into.o"},
                            {&into.lse, "into.lse"},
                            {&other.o, "other.o"},
                            {&other.lse, "other.lse"}}) {
          c.Defined(*t, n).On(*t, device(), n);
        }
        c.Float(into.o, "into.o").SameDType(into.o, other.o, "into.o", "other.o");
        c.Is(into.lse, DType::kF32, "into.lse").Is(other.lse, DType::kF32, "other.lse");
        c.Rank(into.o, 3, "into.o").Rank(into.lse, 2, "into.lse");
        if (!c.status().ok()) return;
        c.That(into.o.shape() == other.o.shape() && into.lse.shape() == other.lse.shape(),
               "the two states' shapes differ");
        c.That(into.lse.dim(0) == into.o.dim(0) && into.lse.dim(1) == into.o.dim(1),
               "lse must be [T, heads] of o [T, heads, head_dim]");
      },
      [&] {
        return into.o.numel() == 0 ? absl::OkStatus()
                                   : MergeStatesImpl(into, other, other_log_weight);
      });
}

void Backend::Attention(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                        const AttentionContext* context, float scale, const Tensor& out,
                        const Tensor& lse) {
  // The merged state is defined only on rows some sequence owns: they must tile q exactly.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const AttentionSequence& s : sequences) ranges.push_back({s.q_begin, s.q_len});
  std::sort(ranges.begin(), ranges.end());
  int64_t next = 0;
  bool tiled = true;
  for (auto [begin, len] : ranges) {
    tiled = tiled && begin == next;
    next = begin + len;
  }
  tiled = tiled && q.rank() == 3 && next == q.dim(0);
  if (!tiled) {
    Dispatch(
        "Attention",
        [&](Checker& c) {
          c.Rank(q, 3, "q").That(false, "the sequences' query rows must tile q's rows exactly");
        },
        [] { return absl::OkStatus(); });
    return;
  }
  AttentionState own{out, lse};
  if (!lse.defined()) {
    auto own_lse = Allocate(DType::kF32, {q.dim(0), q.dim(1)});
    if (!own_lse.ok()) return RecordError(own_lse.status());
    own.lse = *std::move(own_lse);
  }
  AttendOwn(q, sequences, scale, own);
  if (context == nullptr || context->len == 0) return;
  auto co = Allocate(out.dtype(), q.shape());
  if (!co.ok()) return RecordError(co.status());
  auto clse = Allocate(DType::kF32, {q.dim(0), q.dim(1)});
  if (!clse.ok()) return RecordError(clse.status());
  AttentionState ctx{*std::move(co), *std::move(clse)};
  AttendContext(q, sequences, *context, scale, ctx);
  MergeStates(own, ctx, context->log_weight);
}

void Backend::AttendBiased(const Tensor& q, absl::Span<const BiasedAttentionSequence> sequences,
                           float scale, const AttentionState& out) {
  Dispatch(
      "AttendBiased",
      [&](Checker& c) {
        CheckQueryAndState(c, device(), q, out);
        for (size_t s = 0; s < sequences.size() && c.status().ok(); ++s) {
          const BiasedAttentionSequence& seq = sequences[s];
          auto what = [s] { return absl::StrCat("sequence ", s); };
          c.That(seq.q_begin >= 0 && seq.q_len >= 0 && seq.q_begin + seq.q_len <= q.dim(0), [&] {
            return absl::StrCat(what(), ": rows [", seq.q_begin, ", ", seq.q_begin + seq.q_len,
                                ") are outside q's ", q.dim(0), " rows");
          });
          c.That(seq.kv_len >= 0 && seq.kv_len <= std::numeric_limits<int32_t>::max(),
                 [&] { return absl::StrCat(what(), ": kv_len ", seq.kv_len, " is out of range"); });
          CheckKeys(c, device(), q, seq.k, seq.v, seq.kv_len, what);
          c.That(seq.bias == nullptr || seq.relative_bias == nullptr,
                 [&] { return absl::StrCat(what(), ": both bias and relative_bias are set"); });
          if (seq.bias != nullptr && c.status().ok()) {
            c.Defined(*seq.bias, "bias").On(*seq.bias, device(), "bias");
            c.Is(*seq.bias, DType::kF32, "bias").Rank(*seq.bias, 3, "bias");
            if (!c.status().ok()) break;
            c.That(seq.bias->shape() == std::vector<int64_t>{q.dim(1), seq.q_len, seq.kv_len}, [&] {
              return absl::StrCat(what(), ": bias ", Describe(*seq.bias), " must be [", q.dim(1),
                                  ", ", seq.q_len, ", ", seq.kv_len, "] (heads, q_len, kv_len)");
            });
          }
          if (seq.relative_bias != nullptr && c.status().ok()) {
            const Tensor& rel = *seq.relative_bias;
            c.Defined(rel, "relative_bias").On(rel, device(), "relative_bias");
            c.Is(rel, DType::kF32, "relative_bias").Rank(rel, 2, "relative_bias");
            if (!c.status().ok()) break;
            const int64_t diagonals = std::max<int64_t>(0, seq.q_len + seq.kv_len - 1);
            c.That(rel.shape() == std::vector<int64_t>{q.dim(1), diagonals}, [&] {
              return absl::StrCat(what(), ": relative_bias ", Describe(rel), " must be [", q.dim(1),
                                  ", ", diagonals, "] (heads, q_len + kv_len - 1)");
            });
          }
        }
      },
      [&] {
        return q.numel() == 0 ? absl::OkStatus() : AttendBiasedImpl(q, sequences, scale, out);
      });
}

}  // namespace manyshot
