// The SIMT emulator's scheduler (see simt.h): one fiber per CUDA thread of a block.
#include "testing/simt/simt.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "testing/simt/fiber_context.h"

uint3 threadIdx = {0, 0, 0};
uint3 blockIdx = {0, 0, 0};
dim3 blockDim;
dim3 gridDim;

namespace simt {
namespace {

// Kernel frames hold their parameters by value (up to 32 KB) and register arrays.
constexpr size_t kStackBytes = 256 * 1024;
// Bytes after the dynamic shared memory that must still hold the poison after a block: a write
// past the launch's shared memory shows there.
constexpr size_t kSmemGuard = 256;
constexpr unsigned char kPoison = 0xff;

enum class State { kRunnable, kAtBarrier, kAtCollective, kDone };

struct PendingCopy {
  void* dst;
  const void* src;
  size_t bytes;
  size_t src_bytes;
};

struct Fiber {
  FiberContext ctx;
  void* stack = nullptr;
  State state = State::kRunnable;
  uint3 idx = {0, 0, 0};
  const char* what = nullptr;  // the collective it waits at
  void* data = nullptr;
  Resolver resolve = nullptr;
  std::vector<PendingCopy> open_group;
  std::deque<std::vector<PendingCopy>> committed;
};

struct Run {
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  int current_index = 0;
  FiberContext scheduler;
  std::vector<unsigned char> smem;  // dynamic shared memory + guard
  size_t smem_bytes = 0;
  std::string error;
};

// Fiber stacks, kept from launch to launch (guarded by g_launch_mu).
std::vector<void*>& StackPool() {
  static std::vector<void*> pool;
  return pool;
}

Run* g_run = nullptr;
Order g_order = Order::kForward;
CopyTiming g_copy_timing = CopyTiming::kAtWait;
std::mutex g_launch_mu;  // one launch at a time: the built-ins are process globals

void PerformCopies(std::vector<PendingCopy>& copies) {
  for (const PendingCopy& c : copies) {
    if (c.src_bytes > 0) std::memcpy(c.dst, c.src, c.src_bytes);
    if (c.bytes > c.src_bytes) {
      std::memset(static_cast<unsigned char*>(c.dst) + c.src_bytes, 0, c.bytes - c.src_bytes);
    }
  }
  copies.clear();
}

void Yield(State state) {
  Fiber* f = g_run->current;
  f->state = state;
  SwitchFiber(f->ctx, g_run->scheduler);
}

void FiberEntry() {
  (*g_run->body)();
  Fiber* f = g_run->current;
  // Copies still in flight when a thread returns land anyway.
  for (auto& group : f->committed) PerformCopies(group);
  f->committed.clear();
  PerformCopies(f->open_group);
  f->state = State::kDone;
  SwitchFiber(f->ctx, g_run->scheduler);  // for good: a done fiber is never resumed
}

uint3 ThreadIndex(int linear, const dim3& block) {
  const unsigned l = static_cast<unsigned>(linear);
  return uint3{l % block.x, (l / block.x) % block.y, l / (block.x * block.y)};
}

std::string Describe(const std::vector<Fiber>& fibers) {
  int runnable = 0, barrier = 0, collective = 0, done = 0;
  for (const Fiber& f : fibers) {
    switch (f.state) {
      case State::kRunnable:
        ++runnable;
        break;
      case State::kAtBarrier:
        ++barrier;
        break;
      case State::kAtCollective:
        ++collective;
        break;
      case State::kDone:
        ++done;
        break;
    }
  }
  std::string s = std::to_string(barrier) + " threads at __syncthreads(), " +
                  std::to_string(collective) + " at a warp collective, " + std::to_string(done) +
                  " returned";
  for (const Fiber& f : fibers) {
    if (f.state == State::kAtCollective) {
      s += "; e.g. thread " + std::to_string(&f - fibers.data()) + " waits at " + f.what;
      break;
    }
  }
  return s;
}

// Resolves warp [w0, w0 + lanes) when all its lanes wait at a collective. Returns whether it
// did; sets g_run->error for lanes waiting at different collectives.
bool ResolveWarp(std::vector<Fiber>& fibers, int w0, int lanes) {
  for (int l = 0; l < lanes; ++l) {
    if (fibers[w0 + l].state != State::kAtCollective) return false;
  }
  const char* what = fibers[w0].what;
  void* data[32];
  for (int l = 0; l < lanes; ++l) {
    if (std::strcmp(fibers[w0 + l].what, what) != 0) {
      g_run->error = "lanes of warp " + std::to_string(w0 / 32) + " wait at different " +
                     "collectives: lane 0 at " + what + ", lane " + std::to_string(l) + " at " +
                     fibers[w0 + l].what;
      return false;
    }
    data[l] = fibers[w0 + l].data;
  }
  fibers[w0].resolve(data, lanes);
  for (int l = 0; l < lanes; ++l) fibers[w0 + l].state = State::kRunnable;
  return true;
}

// Runs the runnable lanes of warp [w0, w0 + lanes) once each. Returns whether any ran.
bool RunLanes(Run& run, int w0, int lanes) {
  bool ran = false;
  for (int k = 0; k < lanes; ++k) {
    const int i = w0 + (g_order == Order::kForward ? k : lanes - 1 - k);
    Fiber& f = run.fibers[i];
    if (f.state != State::kRunnable) continue;
    run.current = &f;
    run.current_index = i;
    threadIdx = f.idx;
    SwitchFiber(run.scheduler, f.ctx);
    ran = true;
  }
  return ran;
}

// Runs one block to completion. Returns false when it cannot (g_run->error says why).
bool RunBlock(Run& run, const dim3& block) {
  std::vector<Fiber>& fibers = run.fibers;
  const int n = static_cast<int>(fibers.size());
  for (int i = 0; i < n; ++i) {
    Fiber& f = fibers[i];
    MakeFiberContext(f.ctx, f.stack, kStackBytes, FiberEntry);
    f.state = State::kRunnable;
    f.idx = ThreadIndex(i, block);
    f.open_group.clear();
    f.committed.clear();
  }
  // Warp after warp, each as far as it can go (to a __syncthreads() or its end) before the next
  // starts, so a read of another warp's data that lacks a barrier sees the poison in one order.
  const int warps = (n + 31) / 32;
  for (;;) {
    bool progress = false;
    for (int k = 0; k < warps; ++k) {
      const int w = g_order == Order::kForward ? k : warps - 1 - k;
      const int w0 = w * 32, lanes = std::min(32, n - w0);
      for (;;) {
        progress = RunLanes(run, w0, lanes) || progress;
        if (!ResolveWarp(fibers, w0, lanes)) break;
        progress = true;
      }
      if (!run.error.empty()) return false;
    }
    int done = 0, barrier = 0;
    for (const Fiber& f : fibers) {
      done += f.state == State::kDone;
      barrier += f.state == State::kAtBarrier;
    }
    if (done == n) return true;
    if (barrier + done == n) {
      if (done > 0) {
        run.error = "__syncthreads() reached by " + std::to_string(barrier) + " threads after " +
                    std::to_string(done) + " threads of the block returned";
        return false;
      }
      for (Fiber& f : fibers) f.state = State::kRunnable;
      ++Count().barriers;
      continue;
    }
    if (!progress) {
      run.error = "deadlock: " + Describe(fibers);
      return false;
    }
  }
}

}  // namespace

DeviceProps& Props() {
  static DeviceProps props;
  return props;
}

Counters& Count() {
  static Counters counters;
  return counters;
}

void SetOrder(Order order) { g_order = order; }

void SetCopyTiming(CopyTiming timing) { g_copy_timing = timing; }

std::string Launch(dim3 grid, dim3 block, size_t dynamic_smem,
                   const std::function<void()>& thread_body) {
  std::lock_guard<std::mutex> lock(g_launch_mu);
  const int64_t threads = int64_t{block.x} * block.y * block.z;
  if (threads <= 0 || threads > 1024 || block.z > 64) {
    return "invalid block " + std::to_string(block.x) + " x " + std::to_string(block.y) + " x " +
           std::to_string(block.z);
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535) {
    return "invalid grid " + std::to_string(grid.x) + " x " + std::to_string(grid.y) + " x " +
           std::to_string(grid.z);
  }
  Run run;
  run.body = &thread_body;
  run.fibers.resize(static_cast<size_t>(threads));
  std::vector<void*>& pool = StackPool();
  for (Fiber& f : run.fibers) {
    if (!pool.empty()) {
      f.stack = pool.back();
      pool.pop_back();
      continue;
    }
    // The stack, and below it (stacks grow down) an inaccessible page: a kernel frame too large
    // for the fiber faults there instead of writing over another fiber's stack.
    const size_t guard = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* base = mmap(nullptr, guard + kStackBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
      f.stack = nullptr;
      run.error = "cannot map a fiber stack";
      continue;
    }
    mprotect(base, guard, PROT_NONE);
    f.stack = static_cast<unsigned char*>(base) + guard;
  }
  run.smem_bytes = dynamic_smem;
  run.smem.resize(dynamic_smem + kSmemGuard);
  g_run = &run;
  gridDim = grid;
  blockDim = block;
  ++Count().launches;
  for (unsigned z = 0; z < grid.z && run.error.empty(); ++z) {
    for (unsigned y = 0; y < grid.y && run.error.empty(); ++y) {
      for (unsigned x = 0; x < grid.x && run.error.empty(); ++x) {
        blockIdx = uint3{x, y, z};
        std::fill(run.smem.begin(), run.smem.end(), kPoison);
        ++Count().blocks;
        if (!RunBlock(run, block)) break;
        for (size_t i = dynamic_smem; i < run.smem.size(); ++i) {
          if (run.smem[i] != kPoison) {
            run.error = "a write past the " + std::to_string(dynamic_smem) +
                        " bytes of dynamic shared memory (byte " + std::to_string(i) + ")";
            break;
          }
        }
        if (!run.error.empty()) {
          run.error += " (block " + std::to_string(x) + ", " + std::to_string(y) + ", " +
                       std::to_string(z) + ")";
        }
      }
    }
  }
  for (Fiber& f : run.fibers) {
    if (f.stack != nullptr) pool.push_back(f.stack);  // kept for the next launch
  }
  g_run = nullptr;
  return run.error;
}

void SyncThreads() { Yield(State::kAtBarrier); }

void WarpCollective(const char* what, void* data, Resolver resolve) {
  Fiber* f = g_run->current;
  f->what = what;
  f->data = data;
  f->resolve = resolve;
  Yield(State::kAtCollective);
}

int LaneId() { return g_run->current_index & 31; }

unsigned char* DynamicSmem() { return g_run->smem.data(); }

bool InDynamicSmem(const void* p, size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  const unsigned char* lo = g_run->smem.data();
  return b >= lo && b + bytes <= lo + g_run->smem_bytes;
}

void CpAsync(void* dst, const void* src, size_t bytes, size_t src_bytes) {
  ++Count().cp_async;
  std::vector<PendingCopy> copy{PendingCopy{dst, src, bytes, src_bytes}};
  if (g_copy_timing == CopyTiming::kAtIssue) {
    PerformCopies(copy);
  } else {
    g_run->current->open_group.push_back(copy.front());
  }
}

void CpAsyncCommit() {
  Fiber* f = g_run->current;
  f->committed.push_back(std::move(f->open_group));
  f->open_group.clear();
}

void CpAsyncWait(int pending_groups) {
  Fiber* f = g_run->current;
  while (static_cast<int>(f->committed.size()) > pending_groups) {
    PerformCopies(f->committed.front());
    f->committed.pop_front();
  }
}

void Fail(const std::string& why) {
  if (g_run != nullptr && g_run->error.empty()) {
    g_run->error = why + " (thread " + std::to_string(g_run->current_index) + ")";
  }
}

}  // namespace simt
