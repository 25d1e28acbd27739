/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * On-CPU samples of traced threads: where the host's time goes while the GPU
 * waits for it.
 *
 * User space opens a software cpu-clock perf event on every online CPU, one
 * sample per period of CPU time (e.g. 49 a second), and attaches this program
 * to each. A sample of a thread that is not a target returns at once; a
 * target's becomes a stack record (op GS_STACK_OP_CPU_SAMPLE, the sample's
 * time, native and Python frames) on the stack ring, resolved like a call's
 * stack, so code objects and files are named after the process has exited.
 *
 * No call site, return address or stack window: the sample interrupts the
 * thread anywhere (in the kernel too), so only the unwinds hold. Native
 * frames are raw addresses (status 2), named from the process's maps. The program
 * times itself into the stats map: its measured cost is part of gpuscope's
 * self-cost.
 *
 * A sample can land while a call's uprobe program runs on the same CPU (the
 * uprobe path does not take the kernel's bpf_prog_active), so the sampler has
 * scratch slots of its own (GS_SCRATCH_SAMPLE).
 */
#ifndef GPUSCOPE_PROFILE_BPF_H
#define GPUSCOPE_PROFILE_BPF_H

#include "common.bpf.h"
#include "stacks.bpf.h"

static __always_inline void gs_count_ns(__u32 slot, __u64 ns)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &slot);
	if (v)
		__sync_fetch_and_add(v, ns);
}

SEC("perf_event")
int gs_cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32, slot = GS_SCRATCH_SAMPLE, frames;
	struct gs_stack_buf *b;
	__u64 t0, size;
	long n;

	/* Idle (pid 0), gpuscope itself and every thread not traced. */
	if (!tgid || tgid == self_tgid || !gs_is_target(tgid))
		return 0;
	t0 = bpf_ktime_get_ns();
	b = bpf_map_lookup_elem(&stack_scratch, &slot);
	if (!b)
		return 0;
	b->h.ts_ns = t0;
	b->h.pid = tgid;
	b->h.tid = (__u32)pid_tgid;
	b->h.op = GS_STACK_OP_CPU_SAMPLE;
	b->h.py_status = GS_PY_NONE;
	b->h.n_native = 0;
	b->h.n_py = 0;
	b->h.ret_ip = 0;
	b->h.ret_ino = 0;
	b->h.ret_off = 0;
	b->h.site = 0;
	/* Raw addresses, not build ids: a build-id lookup per frame is two thirds of a
	 * sample's cost (measured: 41 us a sample with them at 12 Python frames).
	 * User space names them from the process's maps; the Python frames, what
	 * a profile is read for, are named from the code objects either way. The
	 * window is free in a sample: it holds the addresses. */
	n = bpf_get_stack(ctx, b->window, GS_STACK_MAX_NATIVE * sizeof(__u64), BPF_F_USER_STACK);
	n = n > 0 ? n / sizeof(__u64) : 0;
	for (int i = 0; i < GS_STACK_MAX_NATIVE; i++) {
		if (i >= n)
			break;
		b->native[i].status = 2;
		b->native[i].offset_or_ip = b->window[i];
		/* Zeroed: the record's bytes are the key identical stacks are resolved once by. */
		__builtin_memset(b->native[i].build_id, 0, sizeof(b->native[i].build_id));
	}
	b->h.n_native = n;
	if (stack_mode >= 2)
		b->h.py_status = gs_py_walk(b, tgid, (__u32)pid_tgid, bpf_get_current_task_btf(), GS_SCRATCH_SAMPLE);
	frames = (b->h.n_native & 63) * sizeof(struct gs_native_frame) + (b->h.n_py & 63) * sizeof(struct gs_py_frame);
	gs_stack_pack_py(b);
	size = sizeof(b->h) + frames;
	if (size > offsetof(struct gs_stack_buf, window))
		size = offsetof(struct gs_stack_buf, window);
	if (bpf_ringbuf_output(&stack_events, b, size, BPF_RB_NO_WAKEUP))
		gs_count(GS_STAT_DROP_CPU_SAMPLE);
	else
		gs_count(GS_STAT_CPU_SAMPLES);
	gs_count_ns(GS_STAT_CPU_SAMPLE_NS, bpf_ktime_get_ns() - t0);
	return 0;
}

#endif /* GPUSCOPE_PROFILE_BPF_H */
