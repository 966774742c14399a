// See fiber_context.h.
#include "testing/simt/fiber_context.h"

#include <cstdint>

#if defined(__x86_64__)

// simt_switch_fiber(save, load): pushes the callee-saved registers, stores the stack pointer in
// *save, loads `load` as the stack pointer and pops the registers the other side pushed; `ret`
// then returns into it (or, the first time, into the fiber's entry function).
extern "C" void simt_switch_fiber(void** save, void* load);
asm(R"(
.text
.globl simt_switch_fiber
.type simt_switch_fiber,@function
simt_switch_fiber:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size simt_switch_fiber,.-simt_switch_fiber
.section .note.GNU-stack,"",@progbits
.text
)");

namespace simt {

void MakeFiberContext(FiberContext& ctx, void* stack, size_t bytes, void (*entry)()) {
  // The entry function is "returned to" by the first switch: its slot 16-byte aligned, so that
  // on entry the stack pointer is 8 mod 16, as after a call; above it a null return address
  // (entry never returns); below it the six registers the switch pops, zero.
  auto top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t{15};
  auto* slot = reinterpret_cast<void**>(top - 16);
  slot[1] = nullptr;
  slot[0] = reinterpret_cast<void*>(entry);
  void** regs = slot - 6;
  for (int i = 0; i < 6; ++i) regs[i] = nullptr;
  ctx.sp = regs;
}

void SwitchFiber(FiberContext& from, FiberContext& to) { simt_switch_fiber(&from.sp, to.sp); }

}  // namespace simt

#else

namespace simt {

void MakeFiberContext(FiberContext& ctx, void* stack, size_t bytes, void (*entry)()) {
  getcontext(&ctx.uc);
  ctx.uc.uc_stack.ss_sp = stack;
  ctx.uc.uc_stack.ss_size = bytes;
  ctx.uc.uc_link = nullptr;
  makecontext(&ctx.uc, entry, 0);
}

void SwitchFiber(FiberContext& from, FiberContext& to) { swapcontext(&from.uc, &to.uc); }

}  // namespace simt

#endif
