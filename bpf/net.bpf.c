// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * TCP retransmissions, system-wide, with addresses and ports (IPv4 and
 * IPv6). The current task is often a softirq context, so the pid is the
 * socket owner's only when the retransmit happens in process context.
 */
#include "common.bpf.h"
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define GS_AF_INET 2
#define GS_AF_INET6 10

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(gs_tcp_retransmit, const struct sock *sk, const struct sk_buff *skb)
{
	struct gs_event *e = gs_reserve(GS_OP_TCP_RETRANSMIT);
	if (!e)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	e->ts_ns = bpf_ktime_get_ns();
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->bytes = family;
	if (family == GS_AF_INET6) {
		__u64 s6[2] = {}, d6[2] = {};
		BPF_CORE_READ_INTO(&s6, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(&d6, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
		e->handle = s6[1];
		e->stream = d6[1];
	} else {
		e->handle = bpf_ntohl(BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr));
		e->stream = bpf_ntohl(BPF_CORE_READ(sk, __sk_common.skc_daddr));
	}
	__u16 sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	__u16 dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	e->arg0 = ((__u64)sport << 16) | dport;
	e->arg1 = BPF_CORE_READ(sk, __sk_common.skc_state);
	gs_submit(e);
	return 0;
}
