// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Host scheduler and process-lifecycle tracepoints for traced processes.
 *
 * BTF tracepoints only: this kernel family ships without kprobes, and
 * fentry/fexit are refused. Every thread of a target process is followed (the
 * filter is on the tgid, not on the tid), so CUDA launch threads, NCCL proxy
 * threads and data-loader threads are all visible.
 */
#include "common.bpf.h"
#include "py_procs.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Emit sched_wakeup records (one per wakeup of a target thread). */
const volatile __u8 trace_wakeups = 1;

#define GS_TASK_RUNNING 0

struct gs_offcpu {
	__u64 ts_ns;       /* switch-out time; 0 when on CPU */
	__u64 peer;        /* task that took the CPU: tgid << 32 | tid */
	__u64 peer_cgroup;
	__u32 prev_state;
	__u8 preempted;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct gs_offcpu);
} offcpu SEC(".maps");

static __always_inline __u64 gs_task_cgroup(struct task_struct *t)
{
	return BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

static __always_inline void gs_fill_from_task(struct gs_event *e, struct task_struct *t)
{
	e->pid = BPF_CORE_READ(t, tgid);
	e->tid = BPF_CORE_READ(t, pid);
	e->cgroup_id = gs_task_cgroup(t);
	e->cgroup_v1_id = gs_cgroup_v1_id(t);
	BPF_CORE_READ_STR_INTO(&e->comm, t, comm);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(gs_sched_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();

	if (gs_is_target(prev->tgid)) {
		struct gs_offcpu *o = bpf_task_storage_get(&offcpu, prev, 0,
							   BPF_LOCAL_STORAGE_GET_F_CREATE);
		/* No storage for it (the storage could not be taken or made
		 * here): its record is lost, counted, never silent. */
		if (!o)
			gs_count(GS_STAT_DROP_HOST);
		if (o) {
			o->ts_ns = now;
			/* Runnable at switch-out = involuntary: preempted by the
			 * scheduler (or its time slice ran out). A sleeping state
			 * means the thread blocked by itself. */
			o->preempted = preempt || prev_state == GS_TASK_RUNNING;
			o->prev_state = prev_state;
			o->peer = ((__u64)next->tgid << 32) | (__u32)next->pid;
			o->peer_cgroup = gs_task_cgroup(next);
		}
	}

	if (gs_is_target(next->tgid)) {
		/* With CREATE, NULL means the storage could not be taken, not
		 * that there is none: task storage is refused on a CPU where
		 * another BPF program holds it, e.g. a uprobe program
		 * preempted in the middle of its own task-storage access. A
		 * switch-out may then wait here unseen: counted, never silent
		 * (a sleep missing from a sync was seen with no drop counted). */
		struct gs_offcpu *o = bpf_task_storage_get(&offcpu, next, 0,
							   BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!o)
			gs_count(GS_STAT_DROP_HOST);
		if (o && o->ts_ns) {
			struct gs_event *e = gs_reserve(GS_OP_SCHED_SWITCH);
			if (e) {
				e->ts_ns = o->ts_ns;
				e->duration_ns = now - o->ts_ns;
				gs_fill_from_task(e, next);
				e->handle = o->peer;
				e->stream = o->peer_cgroup;
				e->arg0 = o->preempted;
				e->arg1 = o->prev_state;
				if (o->preempted)
					e->flags = GS_FLAG_PREEMPTED;
				gs_submit(e);
			}
			o->ts_ns = 0;
		}
	}
	return 0;
}

/* sched_waking, not sched_wakeup: it fires in the waker's own context. A wakeup
 * of a task on another CPU is often completed there, from the idle task or an
 * interrupt (the wake list), so at sched_wakeup "current" is not the task that
 * made the wakeup: on a loader thread waking its CUDA thread across CPUs, half
 * the wakers read as pid 0. */
SEC("tp_btf/sched_waking")
int BPF_PROG(gs_sched_wakeup, struct task_struct *p)
{
	if (!trace_wakeups || !gs_is_target(p->tgid))
		return 0;
	struct gs_event *e = gs_reserve(GS_OP_SCHED_WAKEUP);
	if (!e)
		return 0;
	__u64 waker = bpf_get_current_pid_tgid();
	e->ts_ns = bpf_ktime_get_ns();
	gs_fill_from_task(e, p);
	e->handle = ((waker >> 32) << 32) | (__u32)waker;
	gs_submit(e);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(gs_process_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid;
	__u32 ctgid = child->tgid;

	/* Threads share the tgid: only new processes are lifecycle events. */
	if (ptgid == ctgid || !gs_is_target(ptgid))
		return 0;
	__u8 one = 1;
	bpf_map_update_elem(&targets, &ctgid, &one, BPF_ANY);
	/* A forked child (a DataLoader worker) has its parent's memory, and so
	 * its Python runtime: walked from its first call, not once user space
	 * has read its maps. */
	struct gs_py_proc *py = bpf_map_lookup_elem(&py_procs, &ptgid);
	if (py) {
		struct gs_py_proc copy = *py;
		bpf_map_update_elem(&py_procs, &ctgid, &copy, BPF_ANY);
	}
	struct gs_event *e = gs_reserve(GS_OP_PROCESS_FORK);
	if (!e)
		return 0;
	e->ts_ns = bpf_ktime_get_ns();
	gs_fill_from_task(e, parent);
	e->handle = ctgid;
	gs_submit(e);
	return 0;
}

static __always_inline void gs_emit_user_area(struct task_struct *p, __u32 kind, __u64 start, __u64 end)
{
	__u32 len = end > start ? end - start : 0;
	if (len > GS_AUX_PAYLOAD - 1)
		len = GS_AUX_PAYLOAD - 1;
	struct gs_aux_header *h = bpf_ringbuf_reserve(&aux_events, sizeof(*h) + GS_AUX_PAYLOAD, 0);
	if (!h) {
		gs_count(GS_STAT_DROP_AUX);
		return;
	}
	h->ts_ns = bpf_ktime_get_ns();
	h->pid = p->tgid;
	h->tid = p->pid;
	h->kind = kind;
	if (bpf_probe_read_user((void *)(h + 1), len & (GS_AUX_PAYLOAD - 1), (void *)start) != 0)
		len = 0;
	h->len = len;
	bpf_ringbuf_submit(h, BPF_RB_NO_WAKEUP);
}

/* The twin of gs_emit_user_area with a larger record. Kept separate on purpose:
 * folded into one function with the size as an argument, clang drops the
 * `len & (size - 1)` bound the verifier needs before bpf_probe_read_user. */
static __always_inline void gs_emit_env(struct task_struct *p, __u64 start, __u64 end)
{
	__u32 len = end > start ? end - start : 0;
	if (len > GS_AUX_ENV_PAYLOAD - 1)
		len = GS_AUX_ENV_PAYLOAD - 1;
	struct gs_aux_header *h = bpf_ringbuf_reserve(&aux_events, sizeof(*h) + GS_AUX_ENV_PAYLOAD, 0);
	if (!h) {
		gs_count(GS_STAT_DROP_AUX);
		return;
	}
	h->ts_ns = bpf_ktime_get_ns();
	h->pid = p->tgid;
	h->tid = p->pid;
	h->kind = GS_AUX_EXEC_ENV;
	if (bpf_probe_read_user((void *)(h + 1), len & (GS_AUX_ENV_PAYLOAD - 1), (void *)start) != 0)
		len = 0;
	h->len = len;
	bpf_ringbuf_submit(h, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(gs_process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;

	/* Another program: the old one's Python runtime means nothing now. */
	bpf_map_delete_elem(&py_procs, &tgid);
	if (!gs_is_target(tgid))
		return 0;
	struct gs_event *e = gs_reserve(GS_OP_PROCESS_EXEC);
	if (!e)
		return 0;
	e->ts_ns = bpf_ktime_get_ns();
	gs_fill_from_task(e, p);
	e->handle = (__u32)old_pid;
	gs_submit(e);

	/* The new program's argv and environment, read now: by the time user
	 * space looks at /proc, a short-lived process is gone (and with it the
	 * RANK / WORLD_SIZE it was started with). */
	struct mm_struct *mm = BPF_CORE_READ(p, mm);
	gs_emit_user_area(p, GS_AUX_EXEC_ARGV, BPF_CORE_READ(mm, arg_start), BPF_CORE_READ(mm, arg_end));
	gs_emit_env(p, BPF_CORE_READ(mm, env_start), BPF_CORE_READ(mm, env_end));
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(gs_process_exit, struct task_struct *p, bool group_dead)
{
	__u32 tgid = p->tgid;

	/* Only the last thread out is the process exit. */
	if (!group_dead)
		return 0;
	/* Whoever registered it (a process may run Python before it is a target): its pid may be reused. */
	bpf_map_delete_elem(&py_procs, &tgid);
	if (!gs_is_target(tgid))
		return 0;
	struct gs_event *e = gs_reserve(GS_OP_PROCESS_EXIT);
	if (e) {
		e->ts_ns = bpf_ktime_get_ns();
		gs_fill_from_task(e, p);
		e->ret = BPF_CORE_READ(p, exit_code) >> 8;
		e->arg0 = BPF_CORE_READ(p, exit_code);
		e->flags = GS_FLAG_GROUP_EXIT;
		gs_submit(e);
	}
	/* The pid may be reused by an unrelated process. */
	bpf_map_delete_elem(&targets, &tgid);
	return 0;
}
