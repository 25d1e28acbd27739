/* A minimal CO-RE vmlinux.h for arm64: only the kernel types and members the
 * programs in bpf/ use, each as the kernel names it. Not a dump of a kernel.
 *
 * Written by scripts/gen_min_vmlinux.py --arch arm64: it compiles the
 * programs for arm64 and takes what they lack from the vendored x86 dump
 * (bpf/include/vmlinux/x86/vmlinux.h); members nested in anonymous structs
 * are lifted into their parent. Offsets here are placeholders: libbpf
 * relocates every access against the running kernel's BTF by name, and
 * preserve_access_index (below, as bpftool emits it) makes each one a CO-RE
 * access. The register structs (struct user_pt_regs, struct pt_regs) are
 * arm64's own, as in the kernel's asm/ptrace.h, never x86's.
 *
 * Regenerate after a program starts using another kernel type or member:
 *   scripts/gen_min_vmlinux.py --arch arm64
 * Or replace it with a full dump from a real arm64 machine with BTF:
 *   bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/include/vmlinux/arm64/vmlinux.h
 * (scripts/gen_vmlinux.sh, run on that machine, does the same); then
 * tests/unit/packaging/test_cross_arch.py checks the dump instead.
 */
#ifndef __VMLINUX_H__
#define __VMLINUX_H__

#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute push (__attribute__((preserve_access_index)), apply_to = record)
#endif

struct bpf_map;
struct page;
struct request;
struct sk_buff;
struct sock;
struct vm_area_struct;
struct vm_unmapped_area_info;

typedef unsigned char __u8;

typedef short unsigned int __u16;

typedef int __s32;

typedef unsigned int __u32;

typedef long long int __s64;

typedef long long unsigned int __u64;

typedef __u8 u8;

typedef __s32 s32;

typedef __u32 u32;

typedef __s64 s64;

typedef __u64 u64;

typedef int __kernel_pid_t;

typedef unsigned int __kernel_uid32_t;

typedef __u16 __be16;

typedef __u32 __be32;

typedef __u32 __wsum;

typedef u32 __kernel_dev_t;

typedef __kernel_dev_t dev_t;

typedef __kernel_pid_t pid_t;

typedef _Bool bool;

typedef __kernel_uid32_t uid_t;

typedef u64 sector_t;

typedef unsigned int gfp_t;

struct task_struct {
	unsigned int ptrace;
	struct mm_struct *mm;
	int exit_code;
	pid_t pid;
	pid_t tgid;
	struct task_struct *real_parent;
	char comm[16];
	struct files_struct *files;
	struct signal_struct *signal;
	struct css_set *cgroups;
};

struct percpu_counter {
	s64 count;
};

struct mm_struct {
	long unsigned int arg_start;
	long unsigned int arg_end;
	long unsigned int env_start;
	long unsigned int env_end;
	long unsigned int saved_auxv[56];
	struct percpu_counter rss_stat[4];
	struct file *exe_file;
};

struct vm_area_struct {
	long unsigned int vm_start;
	long unsigned int vm_pgoff;
	struct file *vm_file;
};

enum pid_type {
	PIDTYPE_PID = 0,
	PIDTYPE_TGID = 1,
	PIDTYPE_PGID = 2,
	PIDTYPE_SID = 3,
	PIDTYPE_MAX = 4,
};

struct signal_struct {
	struct pid *pids[4];
	struct tty_struct *tty;
};

struct css_set {
	struct cgroup_subsys_state *subsys[12];
	struct cgroup *dfl_cgrp;
};

struct cgroup_subsys_state {
	struct cgroup *cgroup;
};

struct gendisk {
	int major;
	int first_minor;
};

struct path {
	struct dentry *dentry;
};

struct file {
	struct inode *f_inode;
	const struct path f_path;
};

struct qstr {
	const unsigned char *name;
};

struct dentry {
	const struct qstr d_name;
};

struct inode {
	struct super_block *i_sb;
	long unsigned int i_ino;
};

struct super_block {
	dev_t s_dev;
};

struct cgroup {
	struct kernfs_node *kn;
	struct cgroup_root *root;
};

struct request_queue {
	struct gendisk *disk;
};

typedef __u32 blk_opf_t;

typedef u8 blk_status_t;

struct kernfs_node {
	u64 id;
};

struct cgroup_root {
	struct cgroup cgrp;
};

enum bpf_map_type {
	BPF_MAP_TYPE_UNSPEC = 0,
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PROG_ARRAY = 3,
	BPF_MAP_TYPE_PERF_EVENT_ARRAY = 4,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_STACK_TRACE = 7,
	BPF_MAP_TYPE_CGROUP_ARRAY = 8,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_LRU_PERCPU_HASH = 10,
	BPF_MAP_TYPE_LPM_TRIE = 11,
	BPF_MAP_TYPE_ARRAY_OF_MAPS = 12,
	BPF_MAP_TYPE_HASH_OF_MAPS = 13,
	BPF_MAP_TYPE_DEVMAP = 14,
	BPF_MAP_TYPE_SOCKMAP = 15,
	BPF_MAP_TYPE_CPUMAP = 16,
	BPF_MAP_TYPE_XSKMAP = 17,
	BPF_MAP_TYPE_SOCKHASH = 18,
	BPF_MAP_TYPE_CGROUP_STORAGE_DEPRECATED = 19,
	BPF_MAP_TYPE_CGROUP_STORAGE = 19,
	BPF_MAP_TYPE_REUSEPORT_SOCKARRAY = 20,
	BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE_DEPRECATED = 21,
	BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE = 21,
	BPF_MAP_TYPE_QUEUE = 22,
	BPF_MAP_TYPE_STACK = 23,
	BPF_MAP_TYPE_SK_STORAGE = 24,
	BPF_MAP_TYPE_DEVMAP_HASH = 25,
	BPF_MAP_TYPE_STRUCT_OPS = 26,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_INODE_STORAGE = 28,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
	BPF_MAP_TYPE_BLOOM_FILTER = 30,
	BPF_MAP_TYPE_USER_RINGBUF = 31,
	BPF_MAP_TYPE_CGRP_STORAGE = 32,
	BPF_MAP_TYPE_ARENA = 33,
	__MAX_BPF_MAP_TYPE = 34,
};

struct in6_addr {
	union {
		__u8 u6_addr8[16];
		__be16 u6_addr16[8];
		__be32 u6_addr32[4];
	} in6_u;
};

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	short unsigned int skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
};

struct sock {
	struct sock_common __sk_common;
};

enum cgroup_subsys_id {
	cpuset_cgrp_id = 0,
	cpu_cgrp_id = 1,
	cpuacct_cgrp_id = 2,
	io_cgrp_id = 3,
	memory_cgrp_id = 4,
	devices_cgrp_id = 5,
	freezer_cgrp_id = 6,
	net_cls_cgrp_id = 7,
	perf_event_cgrp_id = 8,
	net_prio_cgrp_id = 9,
	hugetlb_cgrp_id = 10,
	pids_cgrp_id = 11,
	CGROUP_SUBSYS_COUNT = 12,
};

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
};

struct files_struct {
	struct fdtable *fdt;
};

struct request {
	struct request_queue *q;
	blk_opf_t cmd_flags;
	unsigned int __data_len;
	sector_t __sector;
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
	BPF_F_LOCK = 4,
};

enum {
	BPF_F_NO_PREALLOC = 1,
	BPF_F_NO_COMMON_LRU = 2,
	BPF_F_NUMA_NODE = 4,
	BPF_F_RDONLY = 8,
	BPF_F_WRONLY = 16,
	BPF_F_STACK_BUILD_ID = 32,
	BPF_F_ZERO_SEED = 64,
	BPF_F_RDONLY_PROG = 128,
	BPF_F_WRONLY_PROG = 256,
	BPF_F_CLONE = 512,
	BPF_F_MMAPABLE = 1024,
	BPF_F_PRESERVE_ELEMS = 2048,
	BPF_F_INNER_MAP = 4096,
	BPF_F_LINK = 8192,
	BPF_F_PATH_FD = 16384,
	BPF_F_VTYPE_BTF_OBJ_FD = 32768,
	BPF_F_TOKEN_FD = 65536,
	BPF_F_SEGV_ON_FAULT = 131072,
	BPF_F_NO_USER_CONV = 262144,
};

enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};

enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
	BPF_SK_STORAGE_GET_F_CREATE = 1,
};

enum {
	BPF_F_SKIP_FIELD_MASK = 255,
	BPF_F_USER_STACK = 256,
	BPF_F_FAST_STACK_CMP = 512,
	BPF_F_REUSE_STACKID = 1024,
	BPF_F_USER_BUILD_ID = 2048,
};

struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};

struct pt_regs {
	union {
		struct user_pt_regs user_regs;
		struct {
			u64 regs[31];
			u64 sp;
			u64 pc;
			u64 pstate;
		};
	};
	u64 orig_x0;
	s32 syscallno;
	u32 unused2;
	u64 sdei_ttbr1;
	u64 pmr_save;
	u64 stackframe[2];
	u64 lockdep_hardirqs;
	u64 exit_rcu;
};

#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute pop
#endif

#endif /* __VMLINUX_H__ */
