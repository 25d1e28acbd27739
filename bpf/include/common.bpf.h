/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Maps and helpers shared by every probe domain. Each object declares these
 * maps; user space loads the first object and makes the others reuse its map
 * fds (bpf_map__reuse_fd), so all programs write one ring and read one target
 * set. */
#ifndef GPUSCOPE_COMMON_BPF_H
#define GPUSCOPE_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "arch.bpf.h"
#include "events.h"

#define GS_MAX_TARGETS 65536

/* 1 when only listed processes (and their descendants) are traced. When 0,
 * any process that calls a probed CUDA API becomes a target on its first call,
 * so its host events follow. */
const volatile __u8 filter_targets = 0;

/* gpuscope's own process: its database writes are not the workload's I/O. */
const volatile __u32 self_tgid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by user space before load */
} events SEC(".maps");

/* tgid -> 1. Written by user space (--pid, launched command), by the fork
 * tracepoint (descendants) and by the first CUDA call in unfiltered mode. */
/* Variable-length, rare records (exec argv). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} aux_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GS_MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GS_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void gs_count(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &slot);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline int gs_is_target(__u32 tgid)
{
	return bpf_map_lookup_elem(&targets, &tgid) != 0;
}

static __always_inline __u32 gs_drop_slot(__u16 op)
{
	if (op < 64)
		return GS_STAT_DROP_CUDA;
	if (op < 128)
		return GS_STAT_DROP_DRIVER;
	if (op < 192)
		return GS_STAT_DROP_NCCL;
	return GS_STAT_DROP_HOST;
}

/* The memory-controller cgroup v1 id of a task. Container runtimes that only
 * use cgroup v1 leave the v2 id at the root on hybrid hosts; this id still
 * tells containers apart. 0 when the controller is not on v1. */
static __always_inline __u64 gs_cgroup_v1_id(struct task_struct *t)
{
	int id = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
	struct cgroup_subsys_state *css;
	struct cgroup *cg;

	if (id < 0 || id >= CGROUP_SUBSYS_COUNT)
		return 0;
	css = BPF_CORE_READ(t, cgroups, subsys[id]);
	if (!css)
		return 0;
	cg = BPF_CORE_READ(css, cgroup);
	if (!cg || BPF_CORE_READ(cg, root, cgrp.kn) == BPF_CORE_READ(t, cgroups, dfl_cgrp, root, cgrp.kn))
		return 0;
	return BPF_CORE_READ(cg, kn, id);
}

/* Reserve a record, or count the loss. The caller fills and submits it. */
static __always_inline struct gs_event *gs_reserve(__u16 op)
{
	struct gs_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		gs_count(gs_drop_slot(op));
		return 0;
	}
	e->op = op;
	e->flags = 0;
	e->ret = 0;
	e->duration_ns = 0;
	e->bytes = 0;
	e->handle = 0;
	e->stream = 0;
	e->arg0 = 0;
	e->arg1 = 0;
	e->site = 0;
	e->cgroup_v1_id = 0;
	return e;
}

/* Submit without waking the reader: it polls every few ms, and a wakeup per
 * record costs the traced thread far more than the record itself. */
static __always_inline void gs_submit(struct gs_event *e)
{
	gs_count(GS_STAT_SUBMITTED);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

#endif /* GPUSCOPE_COMMON_BPF_H */
