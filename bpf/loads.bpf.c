// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Libraries loaded after tracing began: seen at their first mmap, held until
 * their uprobes are in place.
 *
 * A uprobe belongs to a file's inode, and user space can only attach once it
 * knows the file. A CUDA, driver or NCCL library that a process maps from a
 * directory nobody scanned (dlopen at `import torch`, a descendant's rpath, a
 * venv made later) would run its first calls unprobed. So the first mmap of
 * such a file stops the process (SIGSTOP, delivered as the mmap returns, before
 * one instruction of the library runs), and tells user space which file it
 * was; user space attaches and sends SIGCONT.
 *
 * Hooked at tp_btf/vm_unmapped_area: the kernel calls it while placing every
 * mapping without MAP_FIXED, and a loader maps each library first that way
 * (the rest of its segments go MAP_FIXED into that range). The syscall
 * registers say whether this is mmap(2) of a file and which descriptor, so
 * no syscall tracepoint (which would slow every system call of every
 * process) is needed.
 *
 * A hold is never left in place:
 *   - user space resumes the process as soon as the probes are attached, or
 *     when attaching failed;
 *   - a sweep at context switches resumes it after hold_max_ns in any case
 *     (the agent may be stopped or starved);
 *   - when the agent's last thread exits, however it died, the exit
 *     tracepoint resumes every held process (this runs before the kernel
 *     closes the agent's descriptors, so the program is still attached).
 *
 * Never held: processes that are not targets (when filtering), libraries
 * already known, a process under a debugger (it would see the SIGSTOP), and a
 * job that an interactive shell started in the terminal's foreground: a
 * job-control shell reports the stop and takes the terminal back. Those are
 * reported without a hold, so user space attaches as fast as it can.
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define GS_SIGCONT 18
#define GS_SIGSTOP 19
#define GS_PROT_EXEC 0x4
#define GS_MAP_PRIVATE 0x02
#define GS_MAP_DENYWRITE 0x0800
#define GS_CLOCK_MONOTONIC 1
/* libbpf resolves a missing __weak kfunc to 0 (bpf_ksym_exists is newer than 1.1). */
#define gs_ksym_exists(sym) (!!(sym))

/* 0: report late loads without holding (user space asked, or no kfuncs). */
const volatile __u8 hold_enabled = 1;
/* The longest a process is held, whatever user space does. */
const volatile __u64 hold_max_ns = 2000000000ull;

extern int bpf_send_signal_task(struct task_struct *task, int sig, enum pid_type type, __u64 value) __ksym __weak;
extern struct task_struct *bpf_task_from_pid(__s32 pid) __ksym __weak;
extern void bpf_task_release(struct task_struct *p) __ksym __weak;

/* Library files user space has seen: (kernel dev, inode) -> enum gs_lib_state. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct gs_lib_key);
	__type(value, __u8);
} lib_state SEC(".maps");

/* tgid -> when it was stopped (CLOCK_MONOTONIC ns). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} holds SEC(".maps");

/* Records are rare; the reader is woken for each one (no BPF_RB_NO_WAKEUP). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} load_events SEC(".maps");

/* Until when a sweep may find an expired hold (0: no hold since the last
 * sweep that found the map empty), and when the next sweep may run. */
__u64 sweep_until = 0;
__u64 next_sweep = 0;

/* "libcudart.so", "libcuda.so" or "libnccl.so", then the end or a '.'. */
static __always_inline int gs_is_cuda_name(const char *n)
{
	int len;

	if (n[0] != 'l' || n[1] != 'i' || n[2] != 'b')
		return 0;
	if (n[3] == 'c' && n[4] == 'u' && n[5] == 'd' && n[6] == 'a') {
		if (n[7] == 'r' && n[8] == 't')
			len = 9;
		else
			len = 7;
	} else if (n[3] == 'n' && n[4] == 'c' && n[5] == 'c' && n[6] == 'l') {
		len = 7;
	} else {
		return 0;
	}
	if (n[len] != '.' || n[len + 1] != 's' || n[len + 2] != 'o')
		return 0;
	return n[len + 3] == 0 || n[len + 3] == '.';
}

/*
 * SIGCONT to a held process. bpf_send_signal_task refuses (EPERM) unless the
 * current task's own address space is the one loaded: a timer callback or a
 * kernel thread cannot send it. So it is called only from tracepoints that
 * run in a user task: sched_switch away from one, and the agent's own exit
 * (sched_process_exit runs before the exiting task drops its mm).
 */
static __always_inline void gs_continue(__u32 tgid)
{
	struct task_struct *t;

	if (!gs_ksym_exists(bpf_task_from_pid) || !gs_ksym_exists(bpf_send_signal_task))
		return;
	t = bpf_task_from_pid(tgid);
	if (t) {
		bpf_send_signal_task(t, GS_SIGCONT, PIDTYPE_TGID, 0);
		bpf_task_release(t);
	}
}

static long gs_resume_all(struct bpf_map *map, __u32 *tgid, __u64 *since, void *ctx)
{
	gs_continue(*tgid);
	return 0;
}

struct gs_sweep {
	__u64 now;
	__u32 left;
};

static long gs_resume_expired(struct bpf_map *map, __u32 *tgid, __u64 *since, struct gs_sweep *sw)
{
	if (sw->now - *since < hold_max_ns) {
		sw->left = 1;
		return 0;
	}
	gs_continue(*tgid);
	gs_count(GS_STAT_HOLD_EXPIRED);
	bpf_map_delete_elem(map, tgid);
	return 0;
}

/* Would a stop be seen by someone other than us? */
static __always_inline int gs_stop_is_visible(struct task_struct *t)
{
	struct task_struct *parent = BPF_CORE_READ(t, real_parent);

	if (BPF_CORE_READ(t, ptrace))
		return 1;
	/* A job-control shell puts each job in a process group of its own and
	 * waits for it with WUNTRACED; a launcher or a non-interactive shell
	 * leaves its children in its own group. */
	return BPF_CORE_READ(t, signal, tty) != 0 &&
	       BPF_CORE_READ(t, signal, pids[PIDTYPE_PGID]) != BPF_CORE_READ(parent, signal, pids[PIDTYPE_PGID]);
}

static __always_inline int gs_hold(__u32 tgid, __u64 now)
{
	if (bpf_map_update_elem(&holds, &tgid, &now, BPF_NOEXIST))
		return bpf_map_lookup_elem(&holds, &tgid) != 0; /* held already: another thread, another library */
	if (bpf_send_signal(GS_SIGSTOP)) {
		bpf_map_delete_elem(&holds, &tgid);
		return 0;
	}
	if (sweep_until < now + hold_max_ns + 1000000000ull)
		sweep_until = now + hold_max_ns + 1000000000ull;
	gs_count(GS_STAT_HOLD);
	return 1;
}

SEC("tp_btf/vm_unmapped_area")
int BPF_PROG(gs_vm_unmapped_area, unsigned long addr, struct vm_unmapped_area_info *info)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct gs_load_event *e;
	struct gs_lib_key key = {};
	struct file **fds, *f;
	struct inode *inode;
	char name[16] = {};
	__u64 prot, flags;
	long fd;

	if (GS_SYSCALL_NR(regs) != GS_NR_MMAP || tgid == self_tgid)
		return 0;
	/* A loader maps a library private, and (glibc's ld.so) passes
	 * MAP_DENYWRITE, which the kernel ignores, or maps its first segment
	 * executable. A program reading the file (an ELF parser, gpuscope's own)
	 * maps it otherwise, and is neither reported nor held. */
	prot = PT_REGS_PARM3_CORE_SYSCALL(regs);
	flags = PT_REGS_PARM4_CORE_SYSCALL(regs);
	if (!(flags & GS_MAP_PRIVATE) || !((flags & GS_MAP_DENYWRITE) || (prot & GS_PROT_EXEC)))
		return 0;
	fd = (long)PT_REGS_PARM5_CORE_SYSCALL(regs);
	if (fd < 0 || fd >= BPF_CORE_READ(t, files, fdt, max_fds))
		return 0;
	if (filter_targets && !gs_is_target(tgid))
		return 0;
	fds = BPF_CORE_READ(t, files, fdt, fd);
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return 0;
	bpf_probe_read_kernel_str(name, sizeof(name), BPF_CORE_READ(f, f_path.dentry, d_name.name));
	if (!gs_is_cuda_name(name))
		return 0;
	inode = BPF_CORE_READ(f, f_inode);
	key.dev = BPF_CORE_READ(inode, i_sb, s_dev);
	key.ino = BPF_CORE_READ(inode, i_ino);
	if (bpf_map_lookup_elem(&lib_state, &key))
		return 0;

	e = bpf_ringbuf_reserve(&load_events, sizeof(*e), 0);
	if (!e) {
		gs_count(GS_STAT_DROP_LOAD);
		return 0;
	}
	e->ts_ns = bpf_ktime_get_ns();
	e->pid = tgid;
	e->tid = (__u32)bpf_get_current_pid_tgid();
	e->dev = key.dev;
	e->ino = key.ino;
	e->fd = fd;
	e->held = 0;
	if (hold_enabled && gs_ksym_exists(bpf_send_signal_task) && gs_ksym_exists(bpf_task_from_pid)) {
		if (gs_stop_is_visible(t))
			e->held = GS_HOLD_VISIBLE;
		else if (gs_hold(tgid, e->ts_ns))
			e->held = GS_HOLD_STOPPED;
	}
	bpf_probe_read_kernel_str(e->name, sizeof(e->name), BPF_CORE_READ(f, f_path.dentry, d_name.name));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* The agent's last thread is exiting: nothing will resume its holds. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(gs_agent_exit, struct task_struct *p, bool group_dead)
{
	if (!group_dead || BPF_CORE_READ(p, tgid) != self_tgid)
		return 0;
	bpf_for_each_map_elem(&holds, gs_resume_all, 0, 0);
	return 0;
}

/* The time bound: resume holds older than hold_max_ns, whatever the agent is
 * doing. Costs one load and compare per context switch while no hold is
 * recent; sweeps at most every 5 ms otherwise. */
SEC("tp_btf/sched_switch")
int BPF_PROG(gs_hold_sweep, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct gs_sweep sw = {};

	if (!sweep_until)
		return 0;
	sw.now = bpf_ktime_get_ns();
	if (sw.now < next_sweep || !BPF_CORE_READ(prev, mm))
		return 0;
	next_sweep = sw.now + 5000000;
	bpf_for_each_map_elem(&holds, gs_resume_expired, &sw, 0);
	if (!sw.left && sw.now > sweep_until)
		sweep_until = 0;
	return 0;
}
