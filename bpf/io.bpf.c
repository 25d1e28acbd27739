// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Block I/O: one record per request, from issue to completion, attributed to
 * the task that submitted it. System-wide: the I/O that slows a training job is
 * often someone else's (a checkpoint writer, a log shipper).
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define GS_REQ_OP_MASK 0xff
#define GS_REQ_OP_READ 0
#define GS_REQ_OP_WRITE 1
#define GS_REQ_OP_DISCARD 3

struct gs_inflight {
	__u64 ts_ns;
	__u64 cgroup_id;
	__u64 cgroup_v1_id;
	__u64 bytes;
	__u64 sector;
	__u32 pid;
	__u32 tid;
	__u32 op;
	__u32 dev;
	char comm[GS_TASK_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* struct request * */
	__type(value, struct gs_inflight);
} inflight SEC(".maps");

/* Who a request is for: the task that submitted it. A request the block
 * layer could not issue at once (a busy queue, an I/O scheduler) is inserted
 * in the submitter's context and issued later by a kblockd worker, so the
 * task current at issue is not always the one waiting for it. */
static __always_inline void gs_note_submitter(struct gs_inflight *v)
{
	__u64 id = bpf_get_current_pid_tgid();

	v->pid = id >> 32;
	v->tid = (__u32)id;
	v->cgroup_id = bpf_get_current_cgroup_id();
	v->cgroup_v1_id = gs_cgroup_v1_id(bpf_get_current_task_btf());
	bpf_get_current_comm(v->comm, sizeof(v->comm));
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(gs_block_rq_insert, struct request *rq)
{
	struct gs_inflight v = {};
	__u64 key = (__u64)rq;

	/* The agent's own writes too: their issue by a worker must not be taken for the worker's. */
	gs_note_submitter(&v); /* ts_ns 0: inserted, not issued yet */
	bpf_map_update_elem(&inflight, &key, &v, BPF_ANY);
	return 0;
}

/* A request merged into another is freed without completing: forget it, or
 * its slot would name the submitter of whatever request reuses the address. */
SEC("tp_btf/block_rq_merge")
int BPF_PROG(gs_block_rq_merge, struct request *rq)
{
	__u64 key = (__u64)rq;

	bpf_map_delete_elem(&inflight, &key);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(gs_block_rq_issue, struct request *rq)
{
	struct gs_inflight v = {};
	__u64 key = (__u64)rq;
	__u32 flags = BPF_CORE_READ(rq, cmd_flags);
	__u32 op = flags & GS_REQ_OP_MASK;
	struct gs_inflight *inserted = bpf_map_lookup_elem(&inflight, &key);

	if (inserted) {
		/* Inserted while tracing (or issued before and requeued): its submitter is known. */
		if (inserted->pid == self_tgid) {
			bpf_map_delete_elem(&inflight, &key);
			return 0;
		}
		__builtin_memcpy(&v, inserted, sizeof(v));
	} else {
		if ((bpf_get_current_pid_tgid() >> 32) == self_tgid)
			return 0;
		gs_note_submitter(&v);
	}
	v.ts_ns = bpf_ktime_get_ns();
	v.bytes = BPF_CORE_READ(rq, __data_len);
	v.sector = BPF_CORE_READ(rq, __sector);
	v.op = op == GS_REQ_OP_READ ? 0 : op == GS_REQ_OP_WRITE ? 1 : op == GS_REQ_OP_DISCARD ? 2 : 3;
	struct gendisk *disk = BPF_CORE_READ(rq, q, disk);
	if (disk)
		v.dev = (BPF_CORE_READ(disk, major) << 20) | BPF_CORE_READ(disk, first_minor);
	bpf_map_update_elem(&inflight, &key, &v, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(gs_block_rq_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	struct gs_inflight *v = bpf_map_lookup_elem(&inflight, &key);
	if (!v)
		return 0;
	if (!v->ts_ns) { /* inserted, never issued: nothing to time */
		bpf_map_delete_elem(&inflight, &key);
		return 0;
	}
	struct gs_event *e = gs_reserve(GS_OP_BLOCK_IO);
	if (e) {
		e->ts_ns = v->ts_ns;
		e->duration_ns = bpf_ktime_get_ns() - v->ts_ns;
		e->pid = v->pid;
		e->tid = v->tid;
		e->cgroup_id = v->cgroup_id;
		e->cgroup_v1_id = v->cgroup_v1_id;
		e->bytes = v->bytes;
		e->handle = v->sector;
		e->arg0 = v->op;
		e->arg1 = v->dev;
		e->ret = error;
		__builtin_memcpy(e->comm, v->comm, sizeof(e->comm));
		gs_submit(e);
	}
	bpf_map_delete_elem(&inflight, &key);
	return 0;
}
