// The SIMT emulator's fiber switch (simt.cc): a fiber's saved machine context, and the switch
// between two. On x86-64 a switch saves only the registers the ABI has a callee preserve and the
// stack pointer (glibc's swapcontext also saves the signal mask with a system call on every
// switch, which was half of the emulator's time); elsewhere it is ucontext's.
#pragma once

#include <cstddef>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace simt {

struct FiberContext {
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
};

// Prepares `ctx` to run entry() on the stack [stack, stack + bytes) when first switched to.
// entry must never return: a finished fiber switches away for good.
void MakeFiberContext(FiberContext& ctx, void* stack, size_t bytes, void (*entry)());

// Saves the running context in `from` and resumes `to`.
void SwitchFiber(FiberContext& from, FiberContext& to);

}  // namespace simt
