// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The producer for bench/drain: every getppid() of the generator process
 * (seen through the BTF tracepoint sys_enter)
 * emits `per_call` records of the real wire layout (struct gs_event) into a
 * ring named `events`, like gpuscope's own objects. `bytes` carries a
 * sequence number taken for every attempt, so user space can check that it
 * got every record that was not counted as dropped.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "events.h"

/* x86_64 syscall number of getppid: a BTF tracepoint sees every syscall, so
 * the program filters; unlike tracepoint/syscalls/... it needs no tracefs. */
#define BENCH_NR_GETPPID 110

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u32 per_call = 64;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 32 << 20); /* resized by user space before load */
} events SEC(".maps");

/* [0] = tgid of the generator (set by user space); 0: nobody. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} bench_cfg SEC(".maps");

/* [0] = records attempted (next seq), [1] = reserves that failed (drops). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} bench_counts SEC(".maps");

struct emit_ctx {
	__u64 pid_tgid;
	__u64 now;
	__u64 *seq;
	__u64 *drops;
};

static long emit_one(__u64 i, void *data)
{
	struct emit_ctx *c = data;
	__u64 seq = (*c->seq)++;
	struct gs_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		(*c->drops)++;
		return 0;
	}
	e->ts_ns = c->now;
	e->duration_ns = 0;
	e->pid = c->pid_tgid >> 32;
	e->tid = (__u32)c->pid_tgid;
	e->cgroup_id = 0;
	e->op = GS_OP_CUDA_LAUNCH_KERNEL;
	e->flags = GS_FLAG_ENTRY_ONLY;
	e->ret = 0;
	e->bytes = seq;
	e->handle = 0x1000;
	e->stream = 0;
	e->arg0 = 128;
	e->arg1 = 256;
	__builtin_memcpy(e->comm, "bench-producer", 15);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(bench_produce, struct pt_regs *regs, long id)
{
	__u32 zero = 0, one = 1;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 *target = bpf_map_lookup_elem(&bench_cfg, &zero);

	if (id != BENCH_NR_GETPPID || !target || *target != (__u32)(pid_tgid >> 32))
		return 0;
	struct emit_ctx c = {.pid_tgid = pid_tgid, .now = bpf_ktime_get_ns()};
	c.seq = bpf_map_lookup_elem(&bench_counts, &zero);
	c.drops = bpf_map_lookup_elem(&bench_counts, &one);
	if (!c.seq || !c.drops)
		return 0;
	bpf_loop(per_call, emit_one, &c, 0);
	return 0;
}
