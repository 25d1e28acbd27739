// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * CUDA Runtime, Driver, Graph and NCCL API probes.
 *
 * Two programs serve every probed symbol: gs_cuda_entry at function entry and
 * gs_cuda_return at return. The uprobe cookie is the op id (enum gs_op), so one
 * uprobe_multi link per direction and library attaches all symbols at once.
 *
 * The entry program saves the call's start time and key arguments on a small
 * per-thread stack in task-local storage (cheaper than a hash keyed by tid, and
 * freed with the thread); the return program pops it and emits one record with
 * the duration. The stack is needed because runtime calls nest driver calls
 * (cudaMalloc -> cuMemAlloc_v2), and both are probed.
 */
#include "common.bpf.h"
#include "stacks.bpf.h"
#include "profile.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* 1: emit at entry and never time the call (cheapest mode, --entry-only). */
const volatile __u8 entry_only = 0;

/* Slot 0: 1 while a sampling window is open (user space opens it after the
 * sampled ops' links are attached and closes it before they are detached), so
 * a sampled op's record exists exactly for the calls made inside a window the
 * agent recorded, whatever the attach and detach themselves take. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} sample_gate SEC(".maps");

static __always_inline int gs_gate_closed(__u64 cookie)
{
	__u32 zero = 0;
	__u32 *open;

	if (!(cookie & GS_COOKIE_SAMPLED))
		return 0;
	open = bpf_map_lookup_elem(&sample_gate, &zero);
	return !open || !*open;
}

/* The work of one record, reserved and discarded: what a probe on the
 * calibration library costs beside the trap itself. */
static __always_inline int gs_calibration_hit(void)
{
	struct gs_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e)
		return 0;
	e->ts_ns = bpf_ktime_get_ns();
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_discard(e, BPF_RB_NO_WAKEUP);
	return 0;
}

#define GS_MAX_DEPTH 4

struct gs_call {
	__u64 ts_ns;
	__u64 bytes;
	__u64 handle;
	__u64 stream;
	__u64 arg0;
	__u64 arg1;
	__u64 out_ptr; /* where the API writes its result handle (cudaMalloc's devPtr) */
	__u32 op;
	__u32 _pad;
	__u64 site; /* the call's site (gs_stack_header.site), for its event */
};

/* Per-thread state, one task-storage lookup per probe: the open calls, and
 * the thread's cgroup v1 id, which costs ten dependent reads (~340 ns) and
 * so is re-read only every 1024 records (in case the thread moved). */
struct gs_call_stack {
	__u32 depth;
	__u32 v1_age;
	__u64 v1_id;
	struct gs_call calls[GS_MAX_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct gs_call_stack);
} call_stacks SEC(".maps");

static __always_inline __u64 gs_read_u64(const void *addr)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), addr);
	return v;
}

/* sizeof(ncclDataType_t value): int8, uint8, int32, uint32, int64, uint64,
 * float16, float32, float64, bfloat16, fp8 e4m3, fp8 e5m2. */
static __always_inline __u64 gs_nccl_dtype_size(__u64 dt)
{
	switch (dt) {
	case 0: case 1: case 10: case 11:
		return 1;
	case 6: case 9:
		return 2;
	case 2: case 3: case 7:
		return 4;
	case 4: case 5: case 8:
		return 8;
	default:
		return 0;
	}
}

static __always_inline void gs_nccl_coll(struct gs_call *c, __u64 count, __u64 dtype, __u64 redop, __u64 peer,
					 __u64 comm, __u64 stream)
{
	c->arg0 = count;
	c->bytes = count * gs_nccl_dtype_size(dtype);
	c->arg1 = (dtype & 0xff) | ((redop & 0xff) << 8) | ((peer & 0xffffffff) << 32);
	c->handle = comm;
	c->stream = stream;
}

/* A 64-bit fold of the 128-byte ncclUniqueId, so communicators can be told
 * apart across processes without storing the id itself. */
static __always_inline __u64 gs_hash_unique_id(__u64 addr)
{
	__u64 words[16] = {};
	__u64 h = 0x9e3779b97f4a7c15ull;

	bpf_probe_read_user(words, sizeof(words), (void *)addr);
	for (int i = 0; i < 16; i++) {
		h ^= words[i];
		h *= 0xbf58476d1ce4e5b9ull;
		h ^= h >> 31;
	}
	return h;
}

static __always_inline __u64 gs_pack_dim(__u64 x, __u64 y, __u64 z)
{
	return (x & 0xffffffff) | ((y & 0xffff) << 32) | ((z & 0xffff) << 48);
}

/* A driver memset (CUdeviceptr dst, value, size_t N[, CUstream]) counts N in
 * elements of `width` bytes; recorded like the runtime's cudaMemset, with
 * bytes = N x width, so analysis needs no per-width case. Libraries that link
 * the runtime statically (cuBLAS, cuBLASLt) reach memsets only through these
 * entry points, never through libcudart's cudaMemset. */
static __always_inline void gs_cu_memset(struct pt_regs *ctx, struct gs_call *c, __u64 width, int async)
{
	c->handle = PT_REGS_PARM1(ctx);
	c->bytes = PT_REGS_PARM3(ctx) * width;
	if (async)
		c->stream = PT_REGS_PARM4(ctx);
}

/* The first n (at most 3) stack argument words (from [sp + GS_STACK_ARGS_OFF]):
 * those the stack capture read already (`pre`, one read for all), else read
 * here. n is a constant: 0 where the registers hold every argument. */
static __always_inline void gs_stack_args(__u64 sp, const __u64 *pre, __u64 *stk, __u32 n)
{
	if (!n)
		return;
	if (pre) {
		stk[0] = pre[0];
		stk[1] = pre[1];
		stk[2] = pre[2];
	} else {
		bpf_probe_read_user(stk, n * sizeof(__u64), (void *)(sp + GS_STACK_ARGS_OFF));
	}
}

/* Integer argument n (1-based, a constant) past the fifth: a register while
 * the ABI has one (arch.bpf.h), else word n - GS_ARG_REGS - 1 of `stk`. */
static __always_inline __u64 gs_arg(struct pt_regs *ctx, int n, const __u64 *stk)
{
	switch (n) {
	case 6:
		return GS_PT_REGS_PARM6(ctx);
#if GS_ARG_REGS > 6
	case 7:
		return GS_PT_REGS_PARM7(ctx);
	case 8:
		return GS_PT_REGS_PARM8(ctx);
#endif
	default:
		return stk[n - GS_ARG_REGS - 1];
	}
}

/* The same, reading a stack argument on its own. */
static __always_inline __u64 gs_arg_read(struct pt_regs *ctx, int n, __u64 sp)
{
	if (n <= GS_ARG_REGS)
		return gs_arg(ctx, n, 0);
	return gs_read_u64((void *)(sp + GS_STACK_ARGS_OFF + 8 * (n - GS_ARG_REGS - 1)));
}

/* Fill the argument fields of `c` at entry. Both ABIs pass a dim3 (12 bytes)
 * in two registers (x|y, z); arch.bpf.h says where the rest are. */
static __always_inline void gs_read_args(struct pt_regs *ctx, __u32 op, struct gs_call *c, const __u64 *pre)
{
	__u64 sp = PT_REGS_SP(ctx);

	switch (op) {
	case GS_OP_CUDA_MALLOC:         /* (void **devPtr, size_t size) */
	case GS_OP_CUDA_MALLOC_HOST:    /* (void **ptr, size_t size) */
	case GS_OP_CUDA_MALLOC_MANAGED: /* (void **devPtr, size_t size, unsigned flags) */
	case GS_OP_CU_MEM_ALLOC:        /* (CUdeviceptr *dptr, size_t bytesize) */
	case GS_OP_CU_MEM_ALLOC_MANAGED:
		c->out_ptr = PT_REGS_PARM1(ctx);
		c->bytes = PT_REGS_PARM2(ctx);
		break;
	case GS_OP_CUDA_FREE:           /* (void *devPtr) */
	case GS_OP_CUDA_FREE_HOST:
	case GS_OP_CU_MEM_FREE:
		c->handle = PT_REGS_PARM1(ctx);
		break;
	case GS_OP_CUDA_MEMCPY:         /* (dst, src, count, kind) */
		c->bytes = PT_REGS_PARM3(ctx);
		c->arg0 = PT_REGS_PARM4(ctx);
		break;
	case GS_OP_CUDA_MEMCPY_ASYNC:   /* (dst, src, count, kind, stream) */
		c->bytes = PT_REGS_PARM3(ctx);
		c->arg0 = PT_REGS_PARM4(ctx);
		c->stream = PT_REGS_PARM5(ctx);
		break;
	case GS_OP_CUDA_MEMSET:         /* (devPtr, value, count) */
		c->handle = PT_REGS_PARM1(ctx);
		c->bytes = PT_REGS_PARM3(ctx);
		break;
	case GS_OP_CUDA_MEMSET_ASYNC:   /* (devPtr, value, count, stream) */
		c->handle = PT_REGS_PARM1(ctx);
		c->bytes = PT_REGS_PARM3(ctx);
		c->stream = PT_REGS_PARM4(ctx);
		break;
	case GS_OP_CUDA_LAUNCH_KERNEL:
		/* (func, dim3 grid, dim3 block, void **args, size_t shmem, stream):
		 * arguments 1-8 as words. x86-64: func rdi, grid rsi|rdx, block
		 * rcx|r8, args r9, shmem [sp+8], stream [sp+16]; arm64: x0-x7. */
		c->handle = PT_REGS_PARM1(ctx);
		c->arg0 = gs_pack_dim(PT_REGS_PARM2(ctx), PT_REGS_PARM2(ctx) >> 32, PT_REGS_PARM3(ctx));
		c->arg1 = gs_pack_dim(PT_REGS_PARM4(ctx), PT_REGS_PARM4(ctx) >> 32, PT_REGS_PARM5(ctx));
		{
			/* One read for both stack arguments: each read is ~140 ns. */
			__u64 stk[3] = {};
			gs_stack_args(sp, pre, stk, GS_STACK_WORDS(8));
			c->bytes = gs_arg(ctx, 7, stk);
			c->stream = gs_arg(ctx, 8, stk);
		}
		break;
	case GS_OP_CUDA_LAUNCH_KERNEL_EXC: {
		/* (const cudaLaunchConfig_t *config, const void *func, void **args);
		 * config = {dim3 grid @0, dim3 block @12, size_t shmem @24, stream @32} */
		__u32 dims[6] = {};
		__u64 cfg = PT_REGS_PARM1(ctx);
		bpf_probe_read_user(dims, sizeof(dims), (void *)cfg);
		c->handle = PT_REGS_PARM2(ctx);
		c->arg0 = gs_pack_dim(dims[0], dims[1], dims[2]);
		c->arg1 = gs_pack_dim(dims[3], dims[4], dims[5]);
		c->bytes = gs_read_u64((void *)(cfg + 24));
		c->stream = gs_read_u64((void *)(cfg + 32));
		break;
	}
	case GS_OP_CUDA_STREAM_SYNCHRONIZE: /* (stream) */
	case GS_OP_CU_STREAM_SYNCHRONIZE:
		c->stream = PT_REGS_PARM1(ctx);
		break;
	case GS_OP_CUDA_EVENT_SYNCHRONIZE:  /* (event) */
		c->handle = PT_REGS_PARM1(ctx);
		break;
	case GS_OP_CUDA_STREAM_WAIT_EVENT:  /* (stream, event, flags) */
		c->stream = PT_REGS_PARM1(ctx);
		c->handle = PT_REGS_PARM2(ctx);
		break;
	case GS_OP_CU_LAUNCH_KERNEL:
		/* (f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
		 * x86-64: bz [sp+8], shmem [sp+16], stream [sp+24]; arm64:
		 * stream [sp]. */
		c->handle = PT_REGS_PARM1(ctx);
		c->arg0 = gs_pack_dim(PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx));
		{
			__u64 stk[3] = {};
			gs_stack_args(sp, pre, stk, GS_STACK_WORDS(9));
			c->arg1 = gs_pack_dim(PT_REGS_PARM5(ctx), gs_arg(ctx, 6, stk), gs_arg(ctx, 7, stk));
			c->bytes = gs_arg(ctx, 8, stk) & 0xffffffff;
			c->stream = gs_arg(ctx, 9, stk);
		}
		break;
	case GS_OP_CU_LAUNCH_KERNEL_EX: {
		/* (const CUlaunchConfig *config, CUfunction f, ...);
		 * config = {gx,gy,gz,bx,by,bz,shmem (u32 each) @0..27, hStream @32} */
		__u32 dims[7] = {};
		__u64 cfg = PT_REGS_PARM1(ctx);
		bpf_probe_read_user(dims, sizeof(dims), (void *)cfg);
		c->handle = PT_REGS_PARM2(ctx);
		c->arg0 = gs_pack_dim(dims[0], dims[1], dims[2]);
		c->arg1 = gs_pack_dim(dims[3], dims[4], dims[5]);
		c->bytes = dims[6];
		c->stream = gs_read_u64((void *)(cfg + 32));
		break;
	}
	case GS_OP_CU_MEMCPY_HTOD:      /* (CUdeviceptr dst, const void *src, size_t n) */
		c->bytes = PT_REGS_PARM3(ctx);
		c->arg0 = 1;
		break;
	case GS_OP_CU_MEMCPY_DTOH:      /* (void *dst, CUdeviceptr src, size_t n) */
		c->bytes = PT_REGS_PARM3(ctx);
		c->arg0 = 2;
		break;
	case GS_OP_CU_MEMCPY_ASYNC:     /* (dst, src, n, stream): direction from UVA */
		c->bytes = PT_REGS_PARM3(ctx);
		c->arg0 = 4;
		c->stream = PT_REGS_PARM4(ctx);
		break;
	/* Driver memsets: (CUdeviceptr dst, value, size_t N[, stream]). */
	case GS_OP_CU_MEMSET_D8:
		gs_cu_memset(ctx, c, 1, 0);
		break;
	case GS_OP_CU_MEMSET_D16:
		gs_cu_memset(ctx, c, 2, 0);
		break;
	case GS_OP_CU_MEMSET_D32:
		gs_cu_memset(ctx, c, 4, 0);
		break;
	case GS_OP_CU_MEMSET_D8_ASYNC:
		gs_cu_memset(ctx, c, 1, 1);
		break;
	case GS_OP_CU_MEMSET_D16_ASYNC:
		gs_cu_memset(ctx, c, 2, 1);
		break;
	case GS_OP_CU_MEMSET_D32_ASYNC:
		gs_cu_memset(ctx, c, 4, 1);
		break;

	/* CUDA Graph: the same shapes in the runtime and the driver. */
	case GS_OP_CUDA_STREAM_BEGIN_CAPTURE: /* (stream, mode) */
	case GS_OP_CU_STREAM_BEGIN_CAPTURE:
		c->stream = PT_REGS_PARM1(ctx);
		c->arg0 = PT_REGS_PARM2(ctx);
		break;
	case GS_OP_CUDA_STREAM_END_CAPTURE:   /* (stream, graph *out) */
	case GS_OP_CU_STREAM_END_CAPTURE:
		c->stream = PT_REGS_PARM1(ctx);
		c->out_ptr = PT_REGS_PARM2(ctx);
		break;
	case GS_OP_CUDA_GRAPH_INSTANTIATE:    /* (exec *out, graph, flags) */
	case GS_OP_CU_GRAPH_INSTANTIATE:
		c->out_ptr = PT_REGS_PARM1(ctx);
		c->arg0 = PT_REGS_PARM2(ctx);
		c->arg1 = PT_REGS_PARM3(ctx);
		break;
	case GS_OP_CUDA_GRAPH_LAUNCH:         /* (exec, stream) */
	case GS_OP_CU_GRAPH_LAUNCH:
		c->handle = PT_REGS_PARM1(ctx);
		c->stream = PT_REGS_PARM2(ctx);
		break;
	case GS_OP_CUDA_GRAPH_EXEC_UPDATE:    /* (exec, graph, info *) */
	case GS_OP_CU_GRAPH_EXEC_UPDATE:
		c->handle = PT_REGS_PARM1(ctx);
		c->arg0 = PT_REGS_PARM2(ctx);
		break;
	case GS_OP_CUDA_GRAPH_DESTROY:        /* (graph) */
	case GS_OP_CU_GRAPH_DESTROY:
	case GS_OP_CUDA_GRAPH_EXEC_DESTROY:   /* (exec) */
	case GS_OP_CU_GRAPH_EXEC_DESTROY:
		c->handle = PT_REGS_PARM1(ctx);
		break;

	/* NCCL. x86-64: 7th and later integer arguments at [sp+8], [sp+16];
	 * arm64: all in registers. */
	case GS_OP_NCCL_ALL_REDUCE:     /* (send, recv, count, dtype, op, comm, stream) */
	case GS_OP_NCCL_REDUCE_SCATTER: /* (send, recv, recvcount, dtype, op, comm, stream) */
		gs_nccl_coll(c, PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx), PT_REGS_PARM5(ctx), 0, gs_arg(ctx, 6, 0),
			     gs_arg_read(ctx, 7, sp));
		break;
	case GS_OP_NCCL_REDUCE:         /* (send, recv, count, dtype, op, root, comm, stream) */
		gs_nccl_coll(c, PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx), PT_REGS_PARM5(ctx), gs_arg(ctx, 6, 0),
			     gs_arg_read(ctx, 7, sp), gs_arg_read(ctx, 8, sp));
		break;
	case GS_OP_NCCL_BROADCAST:      /* (send, recv, count, dtype, root, comm, stream) */
		gs_nccl_coll(c, PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx), 0, PT_REGS_PARM5(ctx), gs_arg(ctx, 6, 0),
			     gs_arg_read(ctx, 7, sp));
		break;
	case GS_OP_NCCL_ALL_GATHER:     /* (send, recv, sendcount, dtype, comm, stream) */
		gs_nccl_coll(c, PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx), 0, 0, PT_REGS_PARM5(ctx), gs_arg(ctx, 6, 0));
		break;
	case GS_OP_NCCL_SEND:           /* (buf, count, dtype, peer, comm, stream) */
	case GS_OP_NCCL_RECV:
		gs_nccl_coll(c, PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx), 0, PT_REGS_PARM4(ctx), PT_REGS_PARM5(ctx),
			     gs_arg(ctx, 6, 0));
		break;
	case GS_OP_NCCL_COMM_INIT_RANK:        /* (comm *out, nranks, ncclUniqueId id, rank) */
	case GS_OP_NCCL_COMM_INIT_RANK_CONFIG: /* (comm *out, nranks, id, rank, config *) */
		c->out_ptr = PT_REGS_PARM1(ctx);
		c->arg1 = PT_REGS_PARM2(ctx) & 0xffffffff;
#if GS_BIG_AGGREGATE_BY_REF
		/* The 128-byte id goes by reference: its copy's address is the
		 * third argument, rank the fourth. */
		c->arg0 = PT_REGS_PARM4(ctx) & 0xffffffff;
		c->stream = gs_hash_unique_id(PT_REGS_PARM3(ctx));
#else
		/* The 128-byte id is passed by value in memory, at the first stack
		 * slot; it takes no register, so rank is the third register argument. */
		c->arg0 = PT_REGS_PARM3(ctx) & 0xffffffff;
		c->stream = gs_hash_unique_id(sp + GS_STACK_ARGS_OFF);
#endif
		break;
	case GS_OP_NCCL_COMM_DESTROY:   /* (comm) */
	case GS_OP_NCCL_COMM_ABORT:
		c->handle = PT_REGS_PARM1(ctx);
		break;
	default:
		break;
	}
}

static __always_inline __u64 gs_cached_cgroup_v1_id(struct task_struct *t, struct gs_call_stack *st)
{
	if (!st)
		return gs_cgroup_v1_id(t);
	if (st->v1_age == 0)
		st->v1_id = gs_cgroup_v1_id(t);
	st->v1_age = (st->v1_age + 1) & 1023;
	return st->v1_id;
}

static __always_inline void gs_fill_task(struct gs_event *e, __u64 pid_tgid, struct task_struct *t,
					 struct gs_call_stack *st)
{
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->cgroup_id = bpf_get_current_cgroup_id();
	e->cgroup_v1_id = gs_cached_cgroup_v1_id(t, st);
	bpf_get_current_comm(e->comm, sizeof(e->comm));
}

static __always_inline void gs_copy_call(struct gs_event *e, const struct gs_call *c)
{
	e->bytes = c->bytes;
	e->handle = c->handle;
	e->stream = c->stream;
	e->arg0 = c->arg0;
	e->arg1 = c->arg1;
}

SEC("uprobe")
int gs_cuda_entry(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	__u32 op = (__u32)cookie;

	if (cookie & GS_COOKIE_CALIBRATE)
		return gs_calibration_hit();
	if (gs_gate_closed(cookie))
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	/* A thread that has its state was checked at its first traced call, and
	 * a process leaves the target set only when its last thread exits: so the
	 * target lookup runs once per thread, not once per call. */
	struct gs_call_stack *st = bpf_task_storage_get(&call_stacks, task, 0, 0);

	if (!st) {
		if (!gs_is_target(tgid)) {
			if (filter_targets)
				return 0;
			__u8 one = 1;
			bpf_map_update_elem(&targets, &tgid, &one, BPF_NOEXIST);
		}
		st = bpf_task_storage_get(&call_stacks, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	}

	if (entry_only) {
		struct gs_call c = {};
		struct gs_event *e;

		struct gs_stack_buf *sb = gs_stack_capture(ctx, op, pid_tgid);

		gs_read_args(ctx, op, &c, sb ? &sb->sp_words[GS_STACK_ARGS_OFF / 8] : 0);
		e = gs_reserve(op);
		if (!e)
			return 0;
		e->ts_ns = bpf_ktime_get_ns();
		if (sb)
			e->site = gs_stack_emit(sb, e->ts_ns, pid_tgid, op);
		gs_fill_task(e, pid_tgid, task, st);
		gs_copy_call(e, &c);
		e->flags = GS_FLAG_ENTRY_ONLY | ((cookie & GS_COOKIE_STEPPED) ? GS_FLAG_STEPPED : 0);
		gs_submit(e);
		return 0;
	}

	if (!st)
		return 0;
	__u32 d = st->depth;
	if (d >= GS_MAX_DEPTH) {
		gs_count(GS_STAT_CALL_DEPTH);
		return 0;
	}
	struct gs_call *c = &st->calls[d];
	__builtin_memset(c, 0, sizeof(*c));
	c->op = op;
	struct gs_stack_buf *sb = gs_stack_capture(ctx, op, pid_tgid);
	gs_read_args(ctx, op, c, sb ? &sb->sp_words[GS_STACK_ARGS_OFF / 8] : 0);
	st->depth = d + 1;
	/* Last, so the probe's own work is not counted in the call's duration
	 * (only the stack record's copy into the ring is). */
	c->ts_ns = bpf_ktime_get_ns();
	if (sb)
		c->site = gs_stack_emit(sb, c->ts_ns, pid_tgid, op);
	return 0;
}

SEC("uretprobe")
int gs_cuda_return(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 op = (__u32)cookie;

	if (cookie & GS_COOKIE_CALIBRATE)
		return gs_calibration_hit();

	struct task_struct *task = bpf_get_current_task_btf();
	struct gs_call_stack *st = bpf_task_storage_get(&call_stacks, task, 0, 0);

	/* Only the entry checks the target set: a frame on this thread's stack
	 * means the call was traced. Without one, an untraced process is not a
	 * mismatch, just not ours (the lookup runs on this rare path only). */
	if (!st || st->depth == 0 || st->depth > GS_MAX_DEPTH) {
		if (filter_targets && !gs_is_target(pid_tgid >> 32))
			return 0;
		/* A sampled op returning from a call made before its window opened. */
		if (cookie & GS_COOKIE_SAMPLED)
			return 0;
		gs_count(GS_STAT_UNMATCHED_RET);
		return 0;
	}
	/* Find the innermost frame of this op; frames above it belong to calls
	 * whose return was never seen (longjmp, or attached mid-call) and are
	 * discarded. */
	__u32 idx = GS_MAX_DEPTH;
	for (int i = GS_MAX_DEPTH - 1; i >= 0; i--) {
		if ((__u32)i < st->depth && st->calls[i].op == op) {
			idx = i;
			break;
		}
	}
	if (idx >= GS_MAX_DEPTH) {
		if (!(cookie & GS_COOKIE_SAMPLED))
			gs_count(GS_STAT_UNMATCHED_RET);
		return 0;
	}
	struct gs_call *c = &st->calls[idx];
	st->depth = idx;

	struct gs_event *e = gs_reserve(op);
	if (!e)
		return 0;
	e->ts_ns = c->ts_ns;
	e->duration_ns = now - c->ts_ns;
	gs_fill_task(e, pid_tgid, task, st);
	gs_copy_call(e, c);
	e->site = c->site;
	e->ret = (__s32)PT_REGS_RC(ctx);
	if (cookie & GS_COOKIE_STEPPED)
		e->flags |= GS_FLAG_STEPPED;
	if (c->out_ptr && e->ret == 0)
		e->handle = gs_read_u64((void *)c->out_ptr);
	gs_submit(e);
	return 0;
}
