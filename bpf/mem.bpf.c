// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Memory pressure: page allocations (aggregated in the kernel), direct
 * reclaim stalls, OOM kills.
 *
 * mm_page_alloc fires hundreds of thousands of times a second under load, so
 * it is counted in place, not emitted: per process for targets, one bucket
 * (pid 0) for everyone else. Two generations of counters let user space
 * drain one exactly while the other fills: it flips `page_gen`, waits for
 * programs in flight to finish, then reads and clears the idle generation.
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define GS_PAGE_SIZE 4096

struct gs_page_key {
	__u32 gen;
	__u32 pid;
};

struct gs_page_val {
	__u64 count;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct gs_page_key);
	__type(value, struct gs_page_val);
} page_allocs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} page_gen SEC(".maps");

struct gs_reclaim {
	__u64 ts_ns;
	__u8 memcg;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct gs_reclaim);
} reclaim_start SEC(".maps");

SEC("tp_btf/mm_page_alloc")
int BPF_PROG(gs_mm_page_alloc, struct page *page, unsigned int order, gfp_t gfp, int migratetype)
{
	__u32 zero = 0;
	__u32 *gen = bpf_map_lookup_elem(&page_gen, &zero);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct gs_page_key key = {.gen = gen ? *gen & 1 : 0, .pid = gs_is_target(tgid) ? tgid : 0};
	struct gs_page_val *v = bpf_map_lookup_elem(&page_allocs, &key);

	if (!v) {
		struct gs_page_val init = {};
		bpf_map_update_elem(&page_allocs, &key, &init, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&page_allocs, &key);
		if (!v)
			return 0;
	}
	v->count += 1;
	v->bytes += (__u64)GS_PAGE_SIZE << (order & 31);
	return 0;
}

static __always_inline int gs_reclaim_begin(__u8 memcg)
{
	struct gs_reclaim *r = bpf_task_storage_get(&reclaim_start, bpf_get_current_task_btf(), 0,
						    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (r) {
		r->ts_ns = bpf_ktime_get_ns();
		r->memcg = memcg;
	}
	return 0;
}

static __always_inline int gs_reclaim_end(__u64 reclaimed)
{
	struct task_struct *t = bpf_get_current_task_btf();
	/* CREATE, so that NULL means the storage could not be taken (held by
	 * another BPF program on this CPU): a reclaim whose start may be lost,
	 * counted (see host.bpf.c's sched_switch). */
	struct gs_reclaim *r = bpf_task_storage_get(&reclaim_start, t, 0,
						    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!r) {
		gs_count(GS_STAT_DROP_HOST);
		return 0;
	}
	if (!r->ts_ns)
		return 0;
	struct gs_event *e = gs_reserve(GS_OP_DIRECT_RECLAIM);
	if (e) {
		__u64 id = bpf_get_current_pid_tgid();
		e->ts_ns = r->ts_ns;
		e->duration_ns = bpf_ktime_get_ns() - r->ts_ns;
		e->pid = id >> 32;
		e->tid = (__u32)id;
		e->cgroup_id = bpf_get_current_cgroup_id();
		e->cgroup_v1_id = gs_cgroup_v1_id(t);
		bpf_get_current_comm(e->comm, sizeof(e->comm));
		e->arg0 = reclaimed;
		e->arg1 = r->memcg;
		gs_submit(e);
	}
	r->ts_ns = 0;
	return 0;
}

SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(gs_direct_reclaim_begin, int order, gfp_t gfp)
{
	return gs_reclaim_begin(0);
}

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(gs_direct_reclaim_end, unsigned long reclaimed)
{
	return gs_reclaim_end(reclaimed);
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(gs_memcg_reclaim_begin, int order, gfp_t gfp)
{
	return gs_reclaim_begin(1);
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(gs_memcg_reclaim_end, unsigned long reclaimed)
{
	return gs_reclaim_end(reclaimed);
}

SEC("tp_btf/mark_victim")
int BPF_PROG(gs_oom_mark_victim, struct task_struct *victim, uid_t uid)
{
	struct gs_event *e = gs_reserve(GS_OP_OOM_KILL);
	if (!e)
		return 0;
	e->ts_ns = bpf_ktime_get_ns();
	e->pid = BPF_CORE_READ(victim, tgid);
	e->tid = BPF_CORE_READ(victim, pid);
	e->cgroup_id = BPF_CORE_READ(victim, cgroups, dfl_cgrp, kn, id);
	e->cgroup_v1_id = gs_cgroup_v1_id(victim);
	BPF_CORE_READ_STR_INTO(&e->comm, victim, comm);
	struct mm_struct *mm = BPF_CORE_READ(victim, mm);
	if (mm) {
		__s64 file = BPF_CORE_READ(mm, rss_stat[0].count);
		__s64 anon = BPF_CORE_READ(mm, rss_stat[1].count);
		__s64 shmem = BPF_CORE_READ(mm, rss_stat[3].count);
		__s64 pages = file + anon + shmem;
		e->bytes = pages > 0 ? (__u64)pages * GS_PAGE_SIZE : 0;
	}
	e->handle = uid;
	gs_submit(e);
	return 0;
}
