/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The wire contract between the BPF programs and user space.
 *
 * Every record on the main ring buffer is one fixed-size `struct gs_event`, so
 * user space can decode a whole span of the ring as one numpy structured array
 * (no per-record dispatch). The Python mirror lives in
 * src/gpuscope/bpf/wire.py and is checked against this header by
 * tests/unit/test_wire_mirror.py, which compiles a program that prints sizeof
 * and offsetof for every field.
 *
 * Only fixed-width types: this header is included both by BPF C (vmlinux.h
 * types) and by the host compiler (stdint.h types) in the mirror test.
 */
#ifndef GPUSCOPE_EVENTS_H
#define GPUSCOPE_EVENTS_H

#ifndef __VMLINUX_H__
#include <stdint.h>
typedef uint8_t __u8;
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef int32_t __s32;
typedef uint64_t __u64;
#endif

#define GS_TASK_COMM_LEN 16

/* Operation ids. The uprobe cookie of every attached symbol is its op id, so
 * versioned variants (_v2, _ptds, _ptsz) of one API share an id. Ranges group
 * ops by source; user space derives the source from the range. */
enum gs_op {
	GS_OP_UNKNOWN = 0,

	/* CUDA Runtime (libcudart): 1..63 */
	GS_OP_CUDA_MALLOC = 1,
	GS_OP_CUDA_FREE = 2,
	GS_OP_CUDA_MALLOC_MANAGED = 3,
	GS_OP_CUDA_MALLOC_HOST = 4,
	GS_OP_CUDA_FREE_HOST = 5,
	GS_OP_CUDA_MEMCPY = 6,
	GS_OP_CUDA_MEMCPY_ASYNC = 7,
	GS_OP_CUDA_MEMSET = 8,
	GS_OP_CUDA_MEMSET_ASYNC = 9,
	GS_OP_CUDA_LAUNCH_KERNEL = 10,
	GS_OP_CUDA_LAUNCH_KERNEL_EXC = 11,
	GS_OP_CUDA_STREAM_SYNCHRONIZE = 12,
	GS_OP_CUDA_DEVICE_SYNCHRONIZE = 13,
	GS_OP_CUDA_EVENT_SYNCHRONIZE = 14,
	GS_OP_CUDA_STREAM_WAIT_EVENT = 15,

	/* CUDA Driver (libcuda): 64..127 */
	GS_OP_CU_LAUNCH_KERNEL = 64,
	GS_OP_CU_LAUNCH_KERNEL_EX = 65,
	GS_OP_CU_MEM_ALLOC = 66,
	GS_OP_CU_MEM_FREE = 67,
	GS_OP_CU_MEM_ALLOC_MANAGED = 68,
	GS_OP_CU_MEMCPY_HTOD = 69,
	GS_OP_CU_MEMCPY_DTOH = 70,
	GS_OP_CU_MEMCPY_ASYNC = 71,
	GS_OP_CU_CTX_SYNCHRONIZE = 72,
	GS_OP_CU_STREAM_SYNCHRONIZE = 73,

	/* Host tracepoints: 192..255 */
	GS_OP_SCHED_SWITCH = 192,
	GS_OP_SCHED_WAKEUP = 193,
	GS_OP_PROCESS_FORK = 194,
	GS_OP_PROCESS_EXEC = 195,
	GS_OP_PROCESS_EXIT = 196,
	/* Reserved for the I/O, network and memory probes; the names are fixed
	 * so analysis rules and stored data agree before the probes exist. */
	GS_OP_BLOCK_IO = 197,
	GS_OP_TCP_RETRANSMIT = 198,
	GS_OP_MM_PAGE_ALLOC = 199,
	GS_OP_DIRECT_RECLAIM = 200,
	GS_OP_OOM_KILL = 201,

	GS_OP_MAX = 256,
};

/* Record flags. */
enum gs_flag {
	GS_FLAG_ENTRY_ONLY = 1 << 0,  /* no return probe: duration_ns and ret are 0 */
	GS_FLAG_PREEMPTED = 1 << 1,   /* sched_switch: the thread was still runnable */
	GS_FLAG_GROUP_EXIT = 1 << 2,  /* process_exit: the whole process exited */
};

/* Per-CPU counters in the `stats` map (index = enum value). A record is either
 * submitted or counted in one of the DROP_* slots: never silently lost. */
enum gs_stat {
	GS_STAT_SUBMITTED = 0,
	GS_STAT_DROP_CUDA = 1,    /* ring full: CUDA runtime record lost */
	GS_STAT_DROP_DRIVER = 2,  /* ring full: CUDA driver record lost */
	GS_STAT_DROP_HOST = 3,    /* ring full: host record lost */
	GS_STAT_CALL_DEPTH = 4,   /* call nesting deeper than GS_MAX_DEPTH: call not timed */
	GS_STAT_UNMATCHED_RET = 5,/* return with no matching entry (attached mid-call) */
	GS_STAT_MAX = 8,
};

/*
 * One traced call or host event: 96 bytes, 8-byte aligned.
 *
 * Field meaning by op family (see docs/schema.md):
 *   alloc / free:   bytes = size, handle = device (or host) pointer
 *   memcpy/memset:  bytes = count, arg0 = cudaMemcpyKind (0 H2H, 1 H2D, 2 D2H,
 *                   3 D2D, 4 default), stream = stream where the API takes one
 *   launches:       handle = kernel function, arg0 = grid, arg1 = block, packed
 *                   x | y << 32 | z << 48; bytes = dynamic shared memory
 *   synchronize:    stream / handle (event) where the API takes one
 *   sched_switch:   ts_ns = switch-out, duration_ns = time off-CPU,
 *                   handle = task that took the CPU (tgid << 32 | tid),
 *                   stream = its cgroup id, arg0 = 1 if preempted,
 *                   arg1 = raw prev_state
 *   sched_wakeup:   handle = waker (tgid << 32 | tid)
 *   process_fork:   handle = child pid; process_exit: ret = exit code
 */
struct gs_event {
	__u64 ts_ns;        /* CLOCK_MONOTONIC at call entry (or event) */
	__u64 duration_ns;  /* return - entry; 0 when entry-only */
	__u32 pid;          /* tgid */
	__u32 tid;
	__u64 cgroup_id;    /* cgroup v2 id of the task */
	__u16 op;           /* enum gs_op */
	__u16 flags;        /* enum gs_flag */
	__s32 ret;          /* return code (cudaError_t / CUresult) */
	__u64 bytes;
	__u64 handle;
	__u64 stream;
	__u64 arg0;
	__u64 arg1;
	char comm[GS_TASK_COMM_LEN];
};

#endif /* GPUSCOPE_EVENTS_H */
