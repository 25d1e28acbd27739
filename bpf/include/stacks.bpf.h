/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Call stacks at a CUDA call's entry: native frames and Python frames.
 *
 * Native: bpf_get_stack(BPF_F_USER_STACK | BPF_F_USER_BUILD_ID) walks frame
 * pointers and returns (build id, file offset) per frame, so user space can
 * name frames after the process has exited. Code built without frame
 * pointers yields only the probed function; the return address at [sp] (read
 * at entry, before the callee's prologue runs) always names the direct
 * caller, and bpf_find_vma turns it into (inode, file offset) for the same
 * reason.
 *
 * Stack scanning: a window of GS_STACK_WINDOW words above sp follows the
 * frames in the record, so user space can recover the frames that code
 * without frame pointers hides (words that are return addresses: the bytes
 * before them are a call). One bpf_probe_read_user, only for calls the policy
 * selected, and only while `stack_scan` is set.
 *
 * Python: for processes user space registered in `py_procs`, walk
 * _PyRuntime -> interpreters.head -> threads (matched by native thread id,
 * since the GIL is usually released inside CUDA calls) -> frames, emitting
 * (code object, instruction) pairs. User space reads the code objects.
 */
#ifndef GPUSCOPE_STACKS_BPF_H
#define GPUSCOPE_STACKS_BPF_H

#include "common.bpf.h"

#define GS_PY_MAX_VERSIONS 8
#define GS_PY_MAX_THREADS 64

/* 0: no stacks, 1: native, 2: native + Python. */
const volatile __u8 stack_mode = 0;
/* 1: append the stack window (GS_STACK_WINDOW words above sp) for scanning. */
const volatile __u8 stack_scan = 1;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* resized by user space before load */
} stack_events SEC(".maps");

/* op -> policy: 0 never, 1 every call, N >= 2 one call in N (per CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GS_OP_MAX);
	__type(key, __u32);
	__type(value, __u32);
} stack_policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GS_OP_MAX);
	__type(key, __u32);
	__type(value, __u32);
} stack_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct gs_py_proc);
} py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GS_PY_MAX_VERSIONS);
	__type(key, __u32);
	__type(value, struct gs_py_offsets);
} py_offsets SEC(".maps");

struct gs_stack_buf {
	struct gs_stack_header h;
	struct gs_native_frame native[GS_STACK_MAX_NATIVE];
	struct gs_py_frame py[GS_STACK_MAX_PY];
	/* Room for the window right after the densest possible frames: the
	 * record is header, frames, window, with no gaps. */
	__u64 window[GS_STACK_WINDOW];
	__u64 sp; /* user sp at entry; not part of the record */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gs_stack_buf);
} stack_scratch SEC(".maps");

/* Should this call carry a stack? Decided before any stack work. */
static __always_inline int gs_stack_wanted(__u32 op)
{
	__u32 key = op & (GS_OP_MAX - 1);
	__u32 *every, *n;

	if (!stack_mode)
		return 0;
	every = bpf_map_lookup_elem(&stack_policy, &key);
	if (!every || *every == 0)
		return 0;
	if (*every == 1)
		return 1;
	n = bpf_map_lookup_elem(&stack_counts, &key);
	if (!n)
		return 0;
	*n += 1;
	return *n % *every == 1 % *every;
}

struct gs_vma_ctx {
	__u64 addr;
	__u64 ino;
	__u64 off;
};

static long gs_vma_cb(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct gs_vma_ctx *c = data;
	struct file *f = BPF_CORE_READ(vma, vm_file);

	if (!f)
		return 0;
	c->ino = BPF_CORE_READ(f, f_inode, i_ino);
	c->off = c->addr - BPF_CORE_READ(vma, vm_start) + (BPF_CORE_READ(vma, vm_pgoff) << 12);
	return 0;
}

static __always_inline __u64 gs_user_u64(__u64 addr)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

static __always_inline __u16 gs_py_walk(struct gs_stack_buf *b, __u32 tgid, __u32 tid, struct task_struct *task)
{
	struct gs_py_proc *proc = bpf_map_lookup_elem(&py_procs, &tgid);
	struct gs_py_offsets *o;
	__u64 tstate, frame, key;
	__u32 ver;
	int i, n = 0;

	if (!proc)
		return GS_PY_NONE;
	ver = proc->version;
	o = bpf_map_lookup_elem(&py_offsets, &ver);
	if (!o || !o->frame_previous)
		return GS_PY_NO_OFFSETS;
	key = o->tid_is_pthread ? BPF_CORE_READ(task, thread.fsbase) : tid;
	tstate = gs_user_u64(gs_user_u64(proc->runtime + o->interp_head) + o->threads_head);
	for (i = 0; i < GS_PY_MAX_THREADS && tstate; i++) {
		if (gs_user_u64(tstate + o->tstate_tid) == key)
			break;
		tstate = gs_user_u64(tstate + o->tstate_next);
	}
	if (i == GS_PY_MAX_THREADS || !tstate)
		return GS_PY_NO_THREAD;
	frame = gs_user_u64(tstate + o->tstate_frame);
	if (o->cframe_frame >= 0 && frame)
		frame = gs_user_u64(frame + (__u32)o->cframe_frame);
	for (i = 0; i < GS_STACK_MAX_PY && frame; i++) {
		struct gs_py_frame *pf = &b->py[i];
		pf->code = gs_user_u64(frame + o->frame_code);
		pf->instr = gs_user_u64(frame + o->frame_instr);
		if (o->instr_is_int)
			pf->instr &= 0xffffffff;
		n = i + 1;
		frame = gs_user_u64(frame + o->frame_previous);
	}
	b->h.n_py = n;
	return GS_PY_OK;
}

/* Capture the stack into the per-CPU scratch buffer; NULL when not wanted. */
static __always_inline struct gs_stack_buf *gs_stack_capture(struct pt_regs *ctx, __u32 op, __u64 pid_tgid)
{
	__u32 zero = 0;
	struct gs_stack_buf *b;
	struct task_struct *task;
	struct gs_vma_ctx vc = {};
	long n;

	if (!gs_stack_wanted(op))
		return 0;
	b = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!b)
		return 0;
	task = bpf_get_current_task_btf();
	b->h.pid = pid_tgid >> 32;
	b->h.tid = (__u32)pid_tgid;
	b->h.op = op;
	b->h.n_py = 0;
	b->h.py_status = GS_PY_NONE;
	b->sp = PT_REGS_SP(ctx);
	n = bpf_get_stack(ctx, b->native, sizeof(b->native), BPF_F_USER_STACK | BPF_F_USER_BUILD_ID);
	b->h.n_native = n > 0 ? n / sizeof(struct gs_native_frame) : 0;
	vc.addr = gs_user_u64(b->sp);
	b->h.ret_ip = vc.addr;
	bpf_find_vma(task, vc.addr, gs_vma_cb, &vc, 0);
	b->h.ret_ino = vc.ino;
	b->h.ret_off = vc.off;
	if (stack_mode >= 2)
		b->h.py_status = gs_py_walk(b, pid_tgid >> 32, (__u32)pid_tgid, task);
	return b;
}

/* Emit a captured stack for the call that entered at ts_ns. */
static __always_inline void gs_stack_emit(struct gs_stack_buf *b, __u64 ts_ns)
{
	__u64 size;
	__u32 frames;

	b->h.ts_ns = ts_ns;
	frames = (b->h.n_native & 63) * sizeof(struct gs_native_frame) + (b->h.n_py & 63) * sizeof(struct gs_py_frame);
	size = sizeof(b->h) + frames;
	/* Python frames follow the native frames actually captured: move them
	 * down so the record is dense. The destination never passes the source
	 * (it starts at or before b->py), so the copy is safe in ascending order. */
	if (b->h.n_py && b->h.n_native < GS_STACK_MAX_NATIVE) {
		__u32 base = (b->h.n_native & (GS_STACK_MAX_NATIVE - 1)) * sizeof(struct gs_native_frame);
		for (int i = 0; i < GS_STACK_MAX_PY; i++) {
			if (i >= b->h.n_py)
				break;
			__u32 at = base + i * sizeof(struct gs_py_frame);
			if (at > sizeof(b->native) + sizeof(b->py) - sizeof(struct gs_py_frame))
				break;
			*(struct gs_py_frame *)((void *)b->native + at) = b->py[i];
		}
	}
	/* The window goes right after the frames; its length is the record's
	 * remainder. The bound on `frames` keeps the verifier's view of the
	 * destination inside b->window. The top of the main thread's stack can
	 * be closer than the whole window: then try a quarter of it. */
	if (stack_scan && frames <= sizeof(b->native) + sizeof(b->py)) {
		void *dst = (void *)b->native + frames;
		if (!bpf_probe_read_user(dst, sizeof(b->window), (void *)b->sp))
			size += sizeof(b->window);
		else if (!bpf_probe_read_user(dst, sizeof(b->window) / 4, (void *)b->sp))
			size += sizeof(b->window) / 4;
	}
	if (size > offsetof(struct gs_stack_buf, sp))
		size = offsetof(struct gs_stack_buf, sp);
	if (bpf_ringbuf_output(&stack_events, b, size, BPF_RB_NO_WAKEUP))
		gs_count(GS_STAT_DROP_STACK);
}

#endif /* GPUSCOPE_STACKS_BPF_H */
