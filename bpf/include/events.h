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
typedef int64_t __s64;
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
	/* CUDA Graph (runtime): handle = graph or exec, stream, arg0/arg1 below */
	GS_OP_CUDA_STREAM_BEGIN_CAPTURE = 20,  /* stream, arg0 = mode */
	GS_OP_CUDA_STREAM_END_CAPTURE = 21,    /* stream, handle = graph made */
	GS_OP_CUDA_GRAPH_INSTANTIATE = 22,     /* handle = exec made, arg0 = graph, arg1 = flags */
	GS_OP_CUDA_GRAPH_LAUNCH = 23,          /* handle = exec, stream */
	GS_OP_CUDA_GRAPH_EXEC_UPDATE = 24,     /* handle = exec, arg0 = graph */
	GS_OP_CUDA_GRAPH_DESTROY = 25,         /* handle = graph */
	GS_OP_CUDA_GRAPH_EXEC_DESTROY = 26,    /* handle = exec */

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
	/* Memsets: one op per element width, because the cookie is all the probe
	 * knows of which symbol fired. bytes = N x width, handle = dst, stream
	 * for the async ones: the shape of the runtime's cudaMemset rows. */
	GS_OP_CU_MEMSET_D8 = 74,
	GS_OP_CU_MEMSET_D16 = 75,
	GS_OP_CU_MEMSET_D32 = 76,
	GS_OP_CU_MEMSET_D8_ASYNC = 77,
	GS_OP_CU_MEMSET_D16_ASYNC = 78,
	GS_OP_CU_MEMSET_D32_ASYNC = 79,
	/* CUDA Graph (driver twins), same fields as the runtime ops */
	GS_OP_CU_STREAM_BEGIN_CAPTURE = 80,
	GS_OP_CU_STREAM_END_CAPTURE = 81,
	GS_OP_CU_GRAPH_INSTANTIATE = 82,
	GS_OP_CU_GRAPH_LAUNCH = 83,
	GS_OP_CU_GRAPH_EXEC_UPDATE = 84,
	GS_OP_CU_GRAPH_DESTROY = 85,
	GS_OP_CU_GRAPH_EXEC_DESTROY = 86,

	/* NCCL (libnccl): 128..191. Collectives: bytes = count x datatype size,
	 * handle = communicator, stream, arg0 = element count,
	 * arg1 = datatype | redop << 8 | peer-or-root << 32.
	 * Init: handle = communicator made, stream = hash of the unique id,
	 * arg0 = rank, arg1 = nranks. */
	GS_OP_NCCL_ALL_REDUCE = 128,
	GS_OP_NCCL_REDUCE = 129,
	GS_OP_NCCL_BROADCAST = 130,
	GS_OP_NCCL_ALL_GATHER = 131,
	GS_OP_NCCL_REDUCE_SCATTER = 132,
	GS_OP_NCCL_SEND = 133,
	GS_OP_NCCL_RECV = 134,
	GS_OP_NCCL_GROUP_START = 135,
	GS_OP_NCCL_GROUP_END = 136,
	GS_OP_NCCL_COMM_INIT_RANK = 137,
	GS_OP_NCCL_COMM_INIT_RANK_CONFIG = 138,
	GS_OP_NCCL_COMM_DESTROY = 139,
	GS_OP_NCCL_COMM_ABORT = 140,

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

/* Bits of a uprobe's 64-bit cookie above the op id (the low 32 bits).
 * SAMPLED: the op is probed in windows under the overhead budget; its probes
 * emit only while the `sample_gate` map says a window is open.
 * CALIBRATE: a probe on gpuscope's own calibration library, attached to the
 * agent alone: it does a record's work and discards it (the per-call cost). */
#define GS_COOKIE_SAMPLED (1ull << 32)
#define GS_COOKIE_CALIBRATE (1ull << 33)
/* STEPPED: the probed function's first instruction is single-stepped, not
 * emulated (a costlier hit); copied into the record's GS_FLAG_STEPPED. */
#define GS_COOKIE_STEPPED (1ull << 34)

/* Record flags. */
enum gs_flag {
	GS_FLAG_ENTRY_ONLY = 1 << 0,  /* no return probe: duration_ns and ret are 0 */
	GS_FLAG_PREEMPTED = 1 << 1,   /* sched_switch: the thread was still runnable */
	GS_FLAG_GROUP_EXIT = 1 << 2,  /* process_exit: the whole process exited */
	GS_FLAG_STEPPED = 1 << 3,     /* a call's probe hit single-stepped its first instruction (GS_COOKIE_STEPPED) */
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
	GS_STAT_DROP_NCCL = 6,    /* ring full: NCCL record lost */
	GS_STAT_DROP_AUX = 7,     /* aux ring full: exec argv record lost */
	GS_STAT_DROP_STACK = 8,   /* stack ring full: the call's stack record lost (the call is kept) */
	GS_STAT_HOLD = 9,         /* a process was stopped at its first mmap of an unknown CUDA library */
	GS_STAT_HOLD_EXPIRED = 10,/* ... and resumed by the kernel's time bound, not by the agent */
	GS_STAT_DROP_LOAD = 11,   /* load ring full: a late library load not reported */
	GS_STAT_CPU_SAMPLES = 12, /* on-CPU samples of traced threads handed over */
	GS_STAT_CPU_SAMPLE_NS = 13, /* time the sampling program took, all samples (ns) */
	GS_STAT_DROP_CPU_SAMPLE = 14, /* stack ring full: an on-CPU sample lost */
	GS_STAT_MAX = 15,
};

/*
 * One traced call or host event: 104 bytes, 8-byte aligned.
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
 *   block_io:       ts_ns = issue, duration_ns = issue -> complete, bytes,
 *                   arg0 = 0 read / 1 write / 2 discard / 3 other,
 *                   arg1 = dev (major << 20 | minor), handle = sector,
 *                   task = the task that issued the request
 *   tcp_retransmit: bytes = address family (2 IPv4, 10 IPv6), handle = saddr,
 *                   stream = daddr (IPv4; low 64 bits for IPv6),
 *                   arg0 = sport << 16 | dport, arg1 = TCP state
 *   mm_page_alloc:  aggregated by user space from per-process counters:
 *                   ts_ns = interval start, duration_ns = interval, bytes,
 *                   arg0 = allocations; pid 0 = every untraced process
 *   direct_reclaim: duration_ns = time stalled reclaiming, arg0 = pages
 *                   reclaimed, arg1 = 1 for memcg reclaim
 *   oom_kill:       task = the victim, bytes = its resident memory
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
	__u64 cgroup_v1_id; /* memory-controller cgroup v1 id (hybrid hosts), else 0 */
	__u64 site;         /* the call site whose last full stack this call has (gs_stack_header.site); 0: none */
	char comm[GS_TASK_COMM_LEN];
};

/* Variable-length records on the `aux_events` ring (rare events only). */
enum gs_aux_kind {
	GS_AUX_EXEC_ARGV = 1, /* payload: NUL-separated argv of the new program */
	GS_AUX_EXEC_ENV = 2,  /* payload: its NUL-separated environment (first 4 KiB) */
};

#define GS_AUX_PAYLOAD 512
#define GS_AUX_ENV_PAYLOAD 4096

struct gs_aux_header {
	__u64 ts_ns;
	__u32 pid;
	__u32 tid;
	__u32 kind;       /* enum gs_aux_kind */
	__u32 len;        /* payload bytes that follow */
};

/*
 * Stack records on the `stack_events` ring (variable length): one per CUDA
 * call the stack policy selects, joined to its event by (pid, tid, ts_ns),
 * where ts_ns is the event's entry time. Layout:
 *   struct gs_stack_header
 *   n_native x struct gs_native_frame   (innermost first; [0] is the probed function)
 *   n_py x struct gs_py_frame            (innermost first)
 *   0..GS_STACK_WINDOW x __u64           (the user stack from sp up, for stack
 *                                         scanning; its length is what remains)
 */
#define GS_STACK_MAX_NATIVE 32
#define GS_STACK_MAX_PY 32
#define GS_STACK_WINDOW 64

/* Python walk outcome (gs_stack_header.py_status, low byte). A walk that
 * succeeded puts the py_offsets slot it used in the high byte: user space
 * names the frames with that layout even after the process has exited. */
#define GS_PY_SLOT_SHIFT 8
enum gs_py_status {
	GS_PY_NONE = 0,       /* not a configured Python process (or Python stacks off) */
	GS_PY_OK = 1,         /* frames walked */
	GS_PY_NO_THREAD = 2,  /* no thread state for this thread (a thread Python does not know) */
	GS_PY_NO_OFFSETS = 3, /* the process's interpreter version has no offsets loaded */
};

/* Same layout as the kernel's struct bpf_stack_build_id (BPF_F_USER_BUILD_ID):
 * status 1 = build_id + file offset, 2 = raw ip (anonymous/JIT memory or
 * build id unreadable), 0 = empty. */
struct gs_native_frame {
	__s32 status;
	__u8 build_id[20];
	__u64 offset_or_ip;
};

/* A Python frame: the code object and the executing instruction (a pointer
 * into co_code_adaptive on 3.11+, the f_lasti instruction index on 3.10). */
struct gs_py_frame {
	__u64 code;      /* | GS_PY_CODE_UNDESCRIBED: its description is not on the ring (see there) */
	__u64 instr;
};

/* A code object (8-byte aligned, so bit 0 is free) whose description could
 * not go on the ring (full): user space must not name it after an earlier
 * object at the same address, and reads it from the live process instead. */
#define GS_PY_CODE_UNDESCRIBED 1

struct gs_stack_header {
	__u64 ts_ns;     /* entry time of the call: equals gs_event.ts_ns */
	__u32 pid;
	__u32 tid;
	__u16 op;
	__u16 py_status; /* enum gs_py_status | py_offsets slot << GS_PY_SLOT_SHIFT */
	__u16 n_native;
	__u16 n_py;
	__u64 ret_ip;    /* the return address at [sp] on entry: the direct caller */
	__u64 ret_ino;   /* inode of the file mapped at ret_ip; 0 when anonymous */
	__u64 ret_off;   /* file offset of ret_ip in that file */
	__u64 site;      /* the call site's id (per process), 0 when none */
};

/* Call sites. A call whose site (thread, op, return address at [sp], the
 * caller's return address, innermost Python code and instruction) was seen
 * before takes no stack: its event names the site (gs_event.site) and user
 * space gives it the site's last full stack. The first call at a site, and
 * one call in N after it, take a full stack, which names the site too. */

/*
 * A code object's description, on the `stack_events` ring the first time a
 * process's stack shows it (a per-process "seen" set in BPF), ahead of the
 * stack record that refers to it. User space caches it by (pid, code), so
 * Python frames resolve after the process has exited. The record is a
 * gs_stack_header with op = GS_STACK_OP_CODE and no frames, then this. Strings are a compact str's raw
 * characters (kind = bytes per character: 1 ASCII/latin-1, 2 UCS2, 4 UCS4;
 * 0 = unreadable or not compact), cut at the array's size; *_len are the
 * full lengths, in characters for strings, bytes for the line table.
 */
#define GS_STACK_OP_CODE 0xffff
/* An on-CPU sample's stack (profile.bpf.h): ts_ns is the sample's time. */
#define GS_STACK_OP_CPU_SAMPLE 0xfffe
#define GS_CODE_NAME 128
#define GS_CODE_FILE 256
#define GS_CODE_LINETABLE 1024

enum gs_code_flag {
	GS_CODE_NOT_CODE = 1,   /* the frame's executable is not a code object (3.12+ shim frames) */
	GS_CODE_UNREADABLE = 2, /* the code object itself could not be read */
};

struct gs_py_code {
	__u64 code;             /* the code object's address */
	__s32 firstlineno;
	__u32 linetable_len;
	__u32 qualname_len;
	__u32 filename_len;
	__u8 qualname_kind;
	__u8 filename_kind;
	__u16 flags;            /* enum gs_code_flag */
	__u32 _pad;
	char qualname[GS_CODE_NAME];
	char filename[GS_CODE_FILE];
	__u8 linetable[GS_CODE_LINETABLE];
};

/* A library file as the kernel names it: s_dev (major << 20 | minor) and inode. */
struct gs_lib_key {
	__u64 dev;
	__u64 ino;
};

/* Values of the `lib_state` map (written by user space). */
enum gs_lib_state {
	GS_LIB_PROBED = 1,     /* probes attached */
	GS_LIB_NOT_PROBED = 2, /* seen, and not a library gpuscope probes */
};

/* gs_load_event.held */
enum gs_hold_kind {
	GS_HOLD_NONE = 0,    /* not held: holds are off or unsupported */
	GS_HOLD_STOPPED = 1, /* stopped (SIGSTOP) until user space resumes it */
	GS_HOLD_VISIBLE = 2, /* not held: a debugger or a job-control shell would see the stop */
};

#define GS_LOAD_NAME 64

/* On the `load_events` ring: a process mapped a CUDA library file that user
 * space has not seen (bpf/loads.bpf.c). */
struct gs_load_event {
	__u64 ts_ns;
	__u32 pid;
	__u32 tid;
	__u64 dev;
	__u64 ino;
	__s32 fd;   /* the descriptor the file was mapped from */
	__u32 held; /* enum gs_hold_kind */
	char name[GS_LOAD_NAME];
};

/* Where to find Python frames in one interpreter version (written by user
 * space into the `py_offsets` array; index = gs_py_proc.version). */
struct gs_py_offsets {
	__u32 interp_head;   /* _PyRuntime -> interpreters.head */
	__u32 threads_head;  /* PyInterpreterState -> threads.head */
	__u32 tstate_next;
	__u32 tstate_tid;    /* native_thread_id, or thread_id (pthread_t) with tid_is_pthread */
	__u32 tstate_frame;  /* tstate -> cframe (3.11, 3.12) or current frame (3.10, 3.13) */
	__s32 cframe_frame;  /* cframe -> current_frame; -1 when tstate_frame is the frame */
	__u32 frame_code;
	__u32 frame_previous;
	__u32 frame_instr;
	__u32 tid_is_pthread;/* 3.10: thread_id is pthread_self(), the thread's fs base */
	__u32 instr_is_int;  /* 3.10: f_lasti is a 4-byte instruction index */
	/* code objects, read in BPF the first time a process shows one (gs_py_code) */
	__u32 co_filename;
	__u32 co_qualname;   /* co_name on 3.10 */
	__u32 co_firstlineno;
	__u32 co_linetable;
	__u32 ascii_size;    /* sizeof(PyASCIIObject): where an ASCII str's characters start */
	__u32 compact_size;  /* sizeof(PyCompactUnicodeObject): where a UCS1/2/4 str's start */
	__u32 _pad;
};

/* code_type, here and in gs_py_exe and gs_py_lib: PyCode_Type - _PyRuntime in
 * the build (0: unknown). A code object is known by its type's address, not
 * its name: a forked child (a DataLoader worker) has its parent's memory but
 * not yet the page tables of read-only pages it has not touched, where the
 * name lies, and a BPF read cannot fault them in. */
struct gs_py_proc {
	__u64 runtime;       /* address of _PyRuntime in the process */
	__u32 version;       /* index into py_offsets */
	__s32 code_type;
};

/* A Python executable registered by its file (`py_exes`), for processes not
 * registered one by one in `py_procs` yet: on a loaded machine a short script
 * makes its calls and exits before user space has read its maps. Builds with
 * the runtime in the executable itself (the usual static python3): _PyRuntime
 * lies at a fixed distance from the entry point, which the kernel put in the
 * process's auxiliary vector (AT_ENTRY). */
struct gs_py_exe_key {
	__u64 ino;
	__u32 dev;           /* the kernel's encoding, as /proc/PID/maps shows it: major << 20 | minor */
	__u32 _pad;
};

struct gs_py_exe {
	__s64 runtime_from_entry; /* _PyRuntime - e_entry, in the file's addresses */
	__u32 version;            /* index into py_offsets */
	__s32 code_type;
};

/* A libpython registered by its file (`py_libs`): a build with its runtime in
 * libpython3.X.so maps it wherever ld.so puts it, so it is found when the
 * process enters the library's start (Py_BytesMain, Py_InitializeFromConfig,
 * ...): a uprobe there knows the address it hit, and so the load bias. Each
 * probe's cookie is the symbol's address in the file << GS_PY_LIB_SHIFT | its
 * slot here. */
#define GS_PY_MAX_LIBS 16
#define GS_PY_LIB_SHIFT 8
struct gs_py_lib {
	__u64 ino;           /* the file, checked against the mapping the probe hit */
	__u64 runtime;       /* _PyRuntime's address in the file */
	__s64 text_delta;    /* address - file offset in the segment the start symbols lie in */
	__u32 version;       /* index into py_offsets */
	__s32 code_type;
};

#endif /* GPUSCOPE_EVENTS_H */
