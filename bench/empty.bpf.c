// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The floor for bench/overhead: uprobe and uretprobe programs that do nothing.
 * Attached with uprobe_multi to the same offsets as gs_cuda_entry/return, so
 * the difference to gpuscope's programs is the programs' own work. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("uprobe")
int bench_empty_entry(struct pt_regs *ctx)
{
	return 0;
}

SEC("uretprobe")
int bench_empty_return(struct pt_regs *ctx)
{
	return 0;
}
