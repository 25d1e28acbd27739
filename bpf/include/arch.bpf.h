/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What the programs read differently per target architecture: where a probed
 * function finds its arguments and its return address at entry, and how a
 * system call names itself. Everything else is CO-RE and the same C for all.
 *
 * x86-64 (System V ABI): six integer argument registers (rdi rsi rdx rcx r8
 * r9); `call` pushed the return address, so at entry [sp] holds it and the
 * stack arguments start at [sp + 8]. An aggregate over 16 bytes passed by
 * value is copied onto the stack among them.
 *
 * arm64 (AAPCS64): eight argument registers (x0-x7); the return address is in
 * the link register x30 and the stack arguments start at [sp], one 8-byte
 * slot each. An aggregate over 16 bytes passed by value goes by reference:
 * the caller copies it and passes the copy's address in the next register.
 * A frame record {x29, x30} is laid out like x86's {rbp, return address}.
 *
 * Built with -D__TARGET_ARCH_x86 or -D__TARGET_ARCH_arm64 (scripts/build_native.py).
 */
#ifndef GPUSCOPE_ARCH_BPF_H
#define GPUSCOPE_ARCH_BPF_H

#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#if defined(__TARGET_ARCH_x86)

#define GS_ARG_REGS 6
/* The return address sits between sp and the first stack argument. */
#define GS_STACK_ARGS_OFF 8
/* libbpf 1.1 names five argument registers; the sixth is r9. */
#define GS_PT_REGS_PARM6(x) (__PT_REGS_CAST(x)->r9)
#define GS_BIG_AGGREGATE_BY_REF 0
/* The return address at entry: the word at [sp], read with the stack words. */
#define GS_ENTRY_RET_ADDR(ctx, sp_words) ((sp_words)[0])
/* The caller's frame pointer lies above the pushed return address. */
#define GS_FP_ABOVE_SP(fp, sp) ((fp) > (sp))
/* pthread_self() of the current thread: the fs base (glibc's TLS variant II). */
#define GS_HAVE_PTHREAD_SELF 1
#define GS_PTHREAD_SELF(task) BPF_CORE_READ(task, thread.fsbase)
#define GS_NR_MMAP 9
#define GS_SYSCALL_NR(regs) BPF_CORE_READ(regs, orig_ax)

#elif defined(__TARGET_ARCH_arm64)

#define GS_ARG_REGS 8
#define GS_STACK_ARGS_OFF 0
#define GS_PT_REGS_PARM6(x) (__PT_REGS_CAST(x)->regs[5])
#define GS_PT_REGS_PARM7(x) (__PT_REGS_CAST(x)->regs[6])
#define GS_PT_REGS_PARM8(x) (__PT_REGS_CAST(x)->regs[7])
#define GS_BIG_AGGREGATE_BY_REF 1
#define GS_ENTRY_RET_ADDR(ctx, sp_words) PT_REGS_RET(ctx)
/* Nothing is pushed by the call: a caller whose frame record is at the
 * bottom of its frame calls with x29 == sp. */
#define GS_FP_ABOVE_SP(fp, sp) ((fp) >= (sp))
/* glibc's pthread_self() is TPIDR_EL0 less its own sizeof(struct pthread)
 * (TLS variant I), which differs between glibc builds: not derivable here. */
#define GS_HAVE_PTHREAD_SELF 0
#define GS_PTHREAD_SELF(task) 0
/* The generic system call table (include/uapi/asm-generic/unistd.h). */
#define GS_NR_MMAP 222
#define GS_SYSCALL_NR(regs) BPF_CORE_READ(regs, syscallno)

#else
#error "build with -D__TARGET_ARCH_x86 or -D__TARGET_ARCH_arm64"
#endif

/* Stack words that arguments 1..n take beyond the argument registers. */
#define GS_STACK_WORDS(n) ((n) > GS_ARG_REGS ? (n) - GS_ARG_REGS : 0)

#endif /* GPUSCOPE_ARCH_BPF_H */
