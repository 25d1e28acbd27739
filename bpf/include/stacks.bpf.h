/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Call stacks at a CUDA call's entry: native frames and Python frames.
 *
 * Native: bpf_get_stack(BPF_F_USER_STACK | BPF_F_USER_BUILD_ID) walks frame
 * pointers and returns (build id, file offset) per frame, so user space can
 * name frames after the process has exited. Code built without frame
 * pointers yields only the probed function; the return address at [sp] (read
 * at entry, before the callee's prologue runs) always names the direct
 * caller, and bpf_find_vma turns it into (inode, file offset) for the same
 * reason.
 *
 * Stack scanning: a window of GS_STACK_WINDOW words above sp follows the
 * frames in the record, so user space can recover the frames that code
 * without frame pointers hides (words that are return addresses: the bytes
 * before them are a call). One bpf_probe_read_user, only for calls the policy
 * selected, and only while `stack_scan` is set.
 *
 * Python: for processes registered in `py_procs` (by user space, by the
 * start of a libpython registered in `py_libs`, or inherited at a fork), or
 * whose executable user space registered in `py_exes`, walk
 * _PyRuntime -> interpreters.head -> threads (matched by native thread id,
 * since the GIL is usually released inside CUDA calls) -> frames, emitting
 * (code object, instruction) pairs. User space reads the code objects.
 */
#ifndef GPUSCOPE_STACKS_BPF_H
#define GPUSCOPE_STACKS_BPF_H

#include "common.bpf.h"
#include "py_procs.bpf.h"

#define GS_PY_MAX_VERSIONS 8
#define GS_PY_MAX_THREADS 64

/* 0: no stacks, 1: native, 2: native + Python. */
const volatile __u8 stack_mode = 0;
/* 1: append the stack window (GS_STACK_WINDOW words above sp) for scanning. */
const volatile __u8 stack_scan = 1;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* resized by user space before load */
} stack_events SEC(".maps");

/* op -> policy: 0 no stacks; 1 a full stack on every call; N >= 2 a full
 * stack on the first call at each call site and on every Nth call there, a
 * site reference (no frames) on the others. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GS_OP_MAX);
	__type(key, __u32);
	__type(value, __u32);
} stack_policy SEC(".maps");

/* How far above sp a caller's frame pointer may be (its frame's size). */
#define GS_FP_REACH (1 << 16)

/* What tells call sites apart: cheap to read at every call (a handful of
 * user reads), unlike a full unwind. */
struct gs_site_key {
	__u32 tgid;
	__u32 tid;      /* per thread: threads often share a line but not their callers */
	__u32 op;
	__u32 _pad;
	__u64 ret;      /* return address at entry ([sp]; arm64: x30): the direct caller */
	__u64 ret2;     /* [fp + 8]: the caller's caller, when it keeps frame pointers */
	__u64 py_code;  /* innermost Python frame (cached thread state), 0 when none */
	__u64 py_instr;
};

struct gs_site {
	__u64 id;
	__u64 calls; /* calls at the site since it was first seen */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct gs_site_key);
	__type(value, struct gs_site);
} stack_sites SEC(".maps");

/* Site ids: one counter, touched only on a site's first call. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} stack_site_ids SEC(".maps");

/* A Python thread's state address, found by the full walk and kept with the
 * task, so a site reference reads the innermost frame without walking the
 * interpreter's thread list. `runtime` guards against an exec. */
struct gs_py_thread {
	__u64 tstate;
	__u64 runtime;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct gs_py_thread);
} py_threads SEC(".maps");


struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GS_PY_MAX_VERSIONS);
	__type(key, __u32);
	__type(value, struct gs_py_offsets);
} py_offsets SEC(".maps");

#define GS_PY_MAX_EXES 64
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GS_PY_MAX_EXES);
	__type(key, struct gs_py_exe_key);
	__type(value, struct gs_py_exe);
} py_exes SEC(".maps");

/* [0]: how many executables `py_exes` holds. While none, a process that is not
 * in `py_procs` costs one array read, not a look at its executable. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} py_exe_count SEC(".maps");

#define GS_AT_NULL 0
#define GS_AT_ENTRY 9
#define GS_AUXV_PAIRS 32

/* The runtime of a process from its executable's registration: AT_ENTRY
 * (where the kernel loaded the entry point) plus the registered distance. */
static __noinline int gs_py_proc_by_exe(struct task_struct *task, struct gs_py_proc *out)
{
	struct gs_py_exe_key k = {};
	struct gs_py_exe *e;
	struct mm_struct *mm;
	struct inode *inode;
	__u64 pair[2], auxv;
	__u32 zero = 0, *count = bpf_map_lookup_elem(&py_exe_count, &zero);
	int i;

	if (!count || !*count)
		return 0;
	mm = BPF_CORE_READ(task, mm);
	if (!mm)
		return 0;
	inode = BPF_CORE_READ(mm, exe_file, f_inode);
	if (!inode)
		return 0;
	k.ino = BPF_CORE_READ(inode, i_ino);
	k.dev = BPF_CORE_READ(inode, i_sb, s_dev);
	e = bpf_map_lookup_elem(&py_exes, &k);
	if (!e)
		return 0;
	auxv = (__u64)mm + bpf_core_field_offset(struct mm_struct, saved_auxv);
	for (i = 0; i < GS_AUXV_PAIRS; i++) {
		if (bpf_probe_read_kernel(pair, sizeof(pair), (void *)(auxv + i * sizeof(pair))))
			return 0;
		if (pair[0] == GS_AT_ENTRY) {
			out->runtime = pair[1] + e->runtime_from_entry;
			out->version = e->version;
			out->code_type = e->code_type;
			return 1;
		}
		if (pair[0] == GS_AT_NULL)
			return 0;
	}
	return 0;
}

/* The process's interpreter: registered by user space, else by its executable. */
static __always_inline int gs_py_proc_of(struct task_struct *task, __u32 tgid, struct gs_py_proc *out)
{
	struct gs_py_proc *proc = bpf_map_lookup_elem(&py_procs, &tgid);

	if (proc) {
		out->runtime = proc->runtime;
		out->version = proc->version;
		out->code_type = proc->code_type;
		return 1;
	}
	return gs_py_proc_by_exe(task, out);
}

struct gs_stack_buf {
	struct gs_stack_header h;
	struct gs_native_frame native[GS_STACK_MAX_NATIVE];
	struct gs_py_frame py[GS_STACK_MAX_PY];
	/* Room for the window right after the densest possible frames: the
	 * record is header, frames, window, with no gaps. */
	__u64 window[GS_STACK_WINDOW];
	__u64 sp; /* user sp at entry; not part of the record */
	__u64 sp_words[4]; /* [sp] to [sp+24]: the call's stack arguments (x86-64: after the return address) */
	struct gs_site_key site_key;
	__u64 tstate;   /* the walk's thread state, to cache */
	__u32 new_site; /* first call at the site: record it once the stack is out */
	__u32 full;     /* take and emit the full stack; 0: the call only names its site */
};

/* Two scratch slots per CPU: one for the call probes, one for the on-CPU
 * sampler (profile.bpf.h). A uprobe program runs with migration disabled but
 * outside the kernel's bpf_prog_active guard (bpf_prog_run_array_uprobe), so
 * the sampler's perf event can fire in the middle of it on the same CPU:
 * sharing one buffer, the sample overwrote the call's stack (measured: 65 of
 * 20,000 calls lost their stack at 999 samples a second). A uprobe program
 * never interrupts the sampler (it needs a return to user mode). */
#define GS_SCRATCH_PROBE 0
#define GS_SCRATCH_SAMPLE 1

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct gs_stack_buf);
} stack_scratch SEC(".maps");

struct gs_vma_ctx {
	__u64 addr;
	__u64 ino;
	__u64 off;
};

static long gs_vma_cb(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct gs_vma_ctx *c = data;
	struct file *f = BPF_CORE_READ(vma, vm_file);

	if (!f)
		return 0;
	c->ino = BPF_CORE_READ(f, f_inode, i_ino);
	c->off = c->addr - BPF_CORE_READ(vma, vm_start) + (BPF_CORE_READ(vma, vm_pgoff) << 12);
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GS_PY_MAX_LIBS);
	__type(key, __u32);
	__type(value, struct gs_py_lib);
} py_libs SEC(".maps");

/* A process entering a registered libpython's start: register its runtime
 * now, before it runs a line of Python, so its first CUDA call (made before
 * user space has read its maps, or after it has exited) has its frames. */
SEC("uprobe")
int gs_py_start(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 slot = cookie & ((1 << GS_PY_LIB_SHIFT) - 1);
	__u64 sym = cookie >> GS_PY_LIB_SHIFT;
	struct gs_vma_ctx vc = {};
	struct gs_py_proc proc = {};
	struct gs_py_lib *lib;

	if (stack_mode < 2 || (filter_targets && !gs_is_target(tgid)))
		return 0;
	lib = bpf_map_lookup_elem(&py_libs, &slot);
	if (!lib || !lib->runtime)
		return 0;
	/* The address hit is the symbol's, wherever the library lies: checked
	 * against the mapping (the file, and the symbol's offset in it) before
	 * the load bias it gives is trusted. */
	vc.addr = PT_REGS_IP(ctx);
	if (bpf_find_vma(bpf_get_current_task_btf(), vc.addr, gs_vma_cb, &vc, 0) || vc.ino != lib->ino ||
	    vc.off + lib->text_delta != sym)
		return 0;
	proc.runtime = vc.addr - sym + lib->runtime;
	proc.version = lib->version;
	proc.code_type = lib->code_type;
	bpf_map_update_elem(&py_procs, &tgid, &proc, BPF_ANY);
	return 0;
}

static __always_inline __u64 gs_user_u64(__u64 addr)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

/* Code objects already described to user space, per process: a code record
 * goes out only the first time a process's stack shows a code object. LRU,
 * so a long run with endless generated code re-describes rather than stalls. */
/* Per process and interpreter: after an exec (the launcher's Python, then
 * the job's) another runtime's code objects may sit at the same addresses,
 * and must be described again. */
/* And per object, not per address: a code object freed (a function made at
 * run time, the start-up's own code) leaves its address to the next one,
 * which must be described again. `ident` folds the object's file name,
 * qualified name and line table pointers and its name's length and hash:
 * another object at the same address differs in one (measured: without it, 4,270 of 5,000 functions made and
 * freed one after another were named as an earlier one). */
struct gs_py_seen_key {
	__u32 tgid;
	__u32 _pad;
	__u64 code;
	__u64 runtime;
	__u64 ident;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct gs_py_seen_key);
	__type(value, __u8);
} py_code_seen SEC(".maps");

/* The record: a stack header (op GS_STACK_OP_CODE, no frames), then the code. */
struct gs_py_code_rec {
	struct gs_stack_header h;
	struct gs_py_code c;
};

/* Slots as stack_scratch's. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct gs_py_code_rec);
} py_code_scratch SEC(".maps");

/* The leading fields of a compact str (PyASCIIObject), the same on 3.10-3.13. */
struct gs_py_str_head {
	__u64 refcnt;
	__u64 type;
	__s64 length;
	__u64 hash;
	__u32 state;
};

/* Copy a compact str's characters (at most `cap` bytes); returns bytes per
 * character, 0 when it is not a readable compact str. */
static __always_inline __u8 gs_py_str(__u64 obj, const struct gs_py_offsets *o, char *dst, __u32 cap, __u32 *len)
{
	struct gs_py_str_head s;
	__u64 kind, n; /* 64-bit: a 32-bit size is re-extended past the verifier's bound check */

	if (!obj || bpf_probe_read_user(&s, sizeof(s), (void *)obj))
		return 0;
	kind = (s.state >> 2) & 7;
	if (!((s.state >> 5) & 1) || (kind != 1 && kind != 2 && kind != 4) || s.length < 0 || s.length > 1 << 20)
		return 0;
	*len = s.length;
	n = (__u64)s.length * kind;
	if (n > cap)
		n = cap;
	/* Re-check after an opaque copy: clang would otherwise fold the bound
	 * into a form the verifier cannot follow to the helper's size. */
	barrier_var(n);
	if (n > cap)
		return 0;
	if (bpf_probe_read_user(dst, n, (void *)(obj + ((s.state >> 6) & 1 ? o->ascii_size : o->compact_size))))
		return 0;
	return kind;
}

/* Describe a code object on the stack ring (a BPF-to-BPF call: the walk's
 * loop stays small for the verifier, and this runs once per code object). */
static __noinline int gs_py_describe(__u32 tgid, __u64 code, const struct gs_py_proc *proc,
				     const struct gs_py_offsets *o, __u32 slot)
{
	struct gs_py_code_rec *rec = bpf_map_lookup_elem(&py_code_scratch, &slot);
	__u64 ptrs[4] = {}, type = 0, tp_name = 0, lt = 0;
	int is_code = 0;
	char tname[8] = {};
	__s64 size = 0;
	__u64 n;

	struct gs_py_code *r;

	if (!rec || !o)
		return 0;
	__builtin_memset(&rec->h, 0, sizeof(rec->h));
	rec->h.pid = tgid;
	rec->h.op = GS_STACK_OP_CODE;
	r = &rec->c;
	r->code = code;
	r->flags = 0;
	r->firstlineno = 0;
	r->linetable_len = r->qualname_len = r->filename_len = 0;
	r->qualname_kind = r->filename_kind = 0;
	/* ob_type->tp_name: frames of 3.12+ may run a non-code executable. */
	/* Its type's address when the build's is known (gs_py_proc.code_type),
	 * else its name. */
	type = gs_user_u64(code + 8);
	if (proc->code_type && type) {
		if (type == proc->runtime + proc->code_type)
			is_code = 1;
		else
			r->flags = GS_CODE_NOT_CODE;
	} else {
		tp_name = type ? gs_user_u64(type + 24) : 0;
		if (!tp_name || bpf_probe_read_user(tname, 5, (void *)tp_name))
			r->flags = GS_CODE_UNREADABLE;
		else if (tname[0] != 'c' || tname[1] != 'o' || tname[2] != 'd' || tname[3] != 'e' || tname[4])
			r->flags = GS_CODE_NOT_CODE;
		else
			is_code = 1;
	}
	if (is_code) {
		ptrs[0] = gs_user_u64(code + o->co_filename);
		ptrs[1] = gs_user_u64(code + o->co_qualname);
		ptrs[2] = gs_user_u64(code + o->co_linetable);
		bpf_probe_read_user(&r->firstlineno, sizeof(r->firstlineno), (void *)(code + o->co_firstlineno));
		r->filename_kind = gs_py_str(ptrs[0], o, r->filename, sizeof(r->filename), &r->filename_len);
		r->qualname_kind = gs_py_str(ptrs[1], o, r->qualname, sizeof(r->qualname), &r->qualname_len);
		/* bytes object: ob_size at 16, ob_sval at 32 */
		lt = ptrs[2];
		if (lt && !bpf_probe_read_user(&size, sizeof(size), (void *)(lt + 16)) && size >= 0) {
			r->linetable_len = size;
			n = size > sizeof(r->linetable) ? sizeof(r->linetable) : (__u64)size;
			barrier_var(n);
			if (n > sizeof(r->linetable))
				n = 0;
			if (bpf_probe_read_user(r->linetable, n, (void *)(lt + 32)))
				r->flags = GS_CODE_UNREADABLE;
		} else {
			r->flags = GS_CODE_UNREADABLE;
		}
		if (!r->filename_kind || !r->qualname_kind)
			r->flags = GS_CODE_UNREADABLE;
	}
	/* Another program of this CPU wrote the slot meanwhile (a kernel that
	 * preempts programs): a record naming the wrong code is worse than none. */
	if (rec->h.pid != tgid || rec->c.code != code) {
		gs_count(GS_STAT_DROP_STACK);
		return -1;
	}
	if (bpf_ringbuf_output(&stack_events, rec, sizeof(*rec), BPF_RB_NO_WAKEUP)) {
		gs_count(GS_STAT_DROP_STACK);
		return -1;
	}
	return 0;
}

/* First sight of this code object in this process: describe it. */
static __always_inline __u64 gs_py_note_code(__u32 tgid, __u64 code, const struct gs_py_proc *proc,
					     const struct gs_py_offsets *o, __u32 slot)
{
	struct gs_py_seen_key k = {.tgid = tgid, .code = code, .runtime = proc->runtime};
	__u64 ptrs[4] = {}, len_hash[2] = {}, qualname;
	__u8 one = 1;

	if (!code)
		return 0;
	/* One read: co_filename, then co_qualname (3.10: co_name) and
	 * co_linetable within the next three words on 3.10-3.13. Only those:
	 * 3.10 keeps a field there that changes while the code runs. */
	bpf_probe_read_user(ptrs, sizeof(ptrs), (void *)(code + o->co_filename));
	qualname = ptrs[((o->co_qualname - o->co_filename) / 8) & 3];
	/* The objects may all have been freed with the code and taken by the
	 * next one's: the qualified name's length and hash (cached by an
	 * interned str) tell two functions apart by what they are called. */
	bpf_probe_read_user(len_hash, sizeof(len_hash), (void *)(qualname + 16));
	k.ident = ptrs[0] ^ (qualname << 7) ^ (ptrs[((o->co_linetable - o->co_filename) / 8) & 3] << 13) ^
		  len_hash[1] ^ (len_hash[0] << 47);
	if (bpf_map_lookup_elem(&py_code_seen, &k))
		return 0;
	/* Marked seen only once described: a record lost to a full ring is
	 * retried at the next stack that shows the object. */
	if (gs_py_describe(tgid, code, proc, o, slot))
		return GS_PY_CODE_UNDESCRIBED;
	bpf_map_update_elem(&py_code_seen, &k, &one, BPF_ANY);
	return 0;
}

static __always_inline __u16 gs_py_walk(struct gs_stack_buf *b, __u32 tgid, __u32 tid, struct task_struct *task,
					 __u32 slot)
{
	struct gs_py_proc pp = {}, *proc = &pp;
	struct gs_py_offsets *o;
	__u64 tstate, frame, key;
	__u32 ver;
	int i, n = 0;

	if (!gs_py_proc_of(task, tgid, proc))
		return GS_PY_NONE;
	ver = proc->version;
	o = bpf_map_lookup_elem(&py_offsets, &ver);
	if (!o || !o->frame_previous)
		return GS_PY_NO_OFFSETS;
	/* 3.10 names a thread by pthread_self(), which arch.bpf.h may not know. */
	if (o->tid_is_pthread && !GS_HAVE_PTHREAD_SELF)
		return GS_PY_NO_THREAD;
	key = o->tid_is_pthread ? GS_PTHREAD_SELF(task) : tid;
	tstate = gs_user_u64(gs_user_u64(proc->runtime + o->interp_head) + o->threads_head);
	for (i = 0; i < GS_PY_MAX_THREADS && tstate; i++) {
		if (gs_user_u64(tstate + o->tstate_tid) == key)
			break;
		tstate = gs_user_u64(tstate + o->tstate_next);
	}
	if (i == GS_PY_MAX_THREADS || !tstate)
		return GS_PY_NO_THREAD;
	b->tstate = tstate;
	frame = gs_user_u64(tstate + o->tstate_frame);
	if (o->cframe_frame >= 0 && frame)
		frame = gs_user_u64(frame + (__u32)o->cframe_frame);
	for (i = 0; i < GS_STACK_MAX_PY && frame; i++) {
		struct gs_py_frame *pf = &b->py[i];
		pf->code = gs_user_u64(frame + o->frame_code);
		pf->instr = gs_user_u64(frame + o->frame_instr);
		pf->code |= gs_py_note_code(tgid, pf->code, proc, o, slot);
		if (o->instr_is_int)
			pf->instr &= 0xffffffff;
		n = i + 1;
		frame = gs_user_u64(frame + o->frame_previous);
	}
	b->h.n_py = n;
	return GS_PY_OK | (ver << GS_PY_SLOT_SHIFT);
}

/* The innermost Python frame through the thread's cached state; 0 when the
 * thread has none cached yet (its first call takes the full walk). */
static __always_inline int gs_py_innermost(struct gs_site_key *k, struct task_struct *task, __u32 tgid)
{
	struct gs_py_proc pp = {}, *proc = &pp;
	struct gs_py_thread *th;
	struct gs_py_offsets *o;
	__u64 frame;
	__u32 ver;

	if (!gs_py_proc_of(task, tgid, proc))
		return 1; /* not Python: nothing to add to the key */
	ver = proc->version;
	o = bpf_map_lookup_elem(&py_offsets, &ver);
	if (!o || !o->frame_previous)
		return 1;
	th = bpf_task_storage_get(&py_threads, task, 0, 0);
	if (!th || th->runtime != proc->runtime)
		return 0;
	frame = gs_user_u64(th->tstate + o->tstate_frame);
	if (o->cframe_frame >= 0 && frame)
		frame = gs_user_u64(frame + (__u32)o->cframe_frame);
	if (!frame)
		return 1;
	k->py_code = gs_user_u64(frame + o->frame_code);
	k->py_instr = gs_user_u64(frame + o->frame_instr);
	return 1;
}

static __always_inline void gs_py_cache_thread(struct task_struct *task, __u32 tgid, __u64 tstate)
{
	struct gs_py_proc pp = {}, *proc = &pp;
	struct gs_py_thread *th;

	if (!tstate || !gs_py_proc_of(task, tgid, proc))
		return;
	th = bpf_task_storage_get(&py_threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (th) {
		th->tstate = tstate;
		th->runtime = proc->runtime;
	}
}

/* Capture the stack into the per-CPU scratch buffer; NULL when not wanted.
 * `full` says whether it holds a full stack to emit; either way h.site names
 * the call's site (0 when it has none), for its event. */
static __always_inline struct gs_stack_buf *gs_stack_capture(struct pt_regs *ctx, __u32 op, __u64 pid_tgid)
{
	__u32 zero = 0, slot = GS_SCRATCH_PROBE, key = op & (GS_OP_MAX - 1);
	struct gs_stack_buf *b;
	struct task_struct *task;
	struct gs_vma_ctx vc = {};
	struct gs_site *site;
	__u64 fp[2] = {}, fp_addr;
	__u32 *every;
	int cheap = 1;
	long n;

	if (!stack_mode)
		return 0;
	every = bpf_map_lookup_elem(&stack_policy, &key);
	if (!every || *every == 0)
		return 0;
	b = bpf_map_lookup_elem(&stack_scratch, &slot);
	if (!b)
		return 0;
	task = bpf_get_current_task_btf();
	b->h.pid = pid_tgid >> 32;
	b->h.tid = (__u32)pid_tgid;
	b->h.op = op;
	b->h.n_native = 0;
	b->h.n_py = 0;
	b->h.py_status = GS_PY_NONE;
	b->h.ret_ino = 0;
	b->h.ret_off = 0;
	b->h.site = 0;
	b->full = 1;
	b->sp = PT_REGS_SP(ctx);
	fp_addr = PT_REGS_FP(ctx);
	barrier_var(fp_addr); /* read here, from ctx itself: the verifier refuses a derived ctx pointer */
	b->tstate = 0;
	b->new_site = 0;
	/* One read for the return address and the stack arguments the call's
	 * record needs (gs_read_args): a user read costs ~140 ns. */
	if (bpf_probe_read_user(b->sp_words, sizeof(b->sp_words), (void *)b->sp))
		__builtin_memset(b->sp_words, 0, sizeof(b->sp_words));
	vc.addr = GS_ENTRY_RET_ADDR(ctx, b->sp_words);
	b->h.ret_ip = vc.addr;

	/* The site: entry runs before the callee's prologue, so the frame
	 * pointer (rbp, x29) is still the caller's and [fp + 8] its return
	 * address. */
	__builtin_memset(&b->site_key, 0, sizeof(b->site_key));
	b->site_key.tgid = pid_tgid >> 32;
	b->site_key.tid = (__u32)pid_tgid;
	b->site_key.op = op;
	b->site_key.ret = vc.addr;
	if (stack_mode >= 2)
		cheap = gs_py_innermost(&b->site_key, task, pid_tgid >> 32);
	/* The innermost Python frame already tells a Python caller's sites
	 * apart (and [rbp] there is the FFI's frame): the caller's caller is
	 * read for native callers only, and only when rbp points into the stack
	 * just above sp. Code built without frame pointers keeps any value in
	 * rbp, and a read that faults costs the call ~0.8 us. */
	if (!b->site_key.py_code && GS_FP_ABOVE_SP(fp_addr, b->sp) && fp_addr - b->sp < GS_FP_REACH &&
	    !bpf_probe_read_user(fp, sizeof(fp), (void *)fp_addr))
		b->site_key.ret2 = fp[1];
	site = bpf_map_lookup_elem(&stack_sites, &b->site_key);
	if (site) {
		__u64 calls = __sync_fetch_and_add(&site->calls, 1) + 1;
		b->h.site = site->id;
		if (cheap && *every > 1 && calls % *every) {
			b->full = 0;
			return b;
		}
	} else if (cheap) {
		__u64 *ids = bpf_map_lookup_elem(&stack_site_ids, &zero);
		if (ids) {
			b->h.site = __sync_fetch_and_add(ids, 1) + 1;
			b->new_site = 1;
		}
	}

	n = bpf_get_stack(ctx, b->native, sizeof(b->native), BPF_F_USER_STACK | BPF_F_USER_BUILD_ID);
	b->h.n_native = n > 0 ? n / sizeof(struct gs_native_frame) : 0;
	bpf_find_vma(task, vc.addr, gs_vma_cb, &vc, 0);
	b->h.ret_ino = vc.ino;
	b->h.ret_off = vc.off;
	if (stack_mode >= 2) {
		b->h.py_status = gs_py_walk(b, pid_tgid >> 32, (__u32)pid_tgid, task, GS_SCRATCH_PROBE);
		if ((b->h.py_status & 0xff) == GS_PY_OK)
			gs_py_cache_thread(task, pid_tgid >> 32, b->tstate);
	}
	return b;
}

/* Python frames follow the native frames actually captured: move them
 * down so the record is dense. The destination never passes the source
 * (it starts at or before b->py), so the copy is safe in ascending order. */
static __always_inline void gs_stack_pack_py(struct gs_stack_buf *b)
{
	if (b->h.n_py && b->h.n_native < GS_STACK_MAX_NATIVE) {
		__u32 base = (b->h.n_native & (GS_STACK_MAX_NATIVE - 1)) * sizeof(struct gs_native_frame);
		for (int i = 0; i < GS_STACK_MAX_PY; i++) {
			if (i >= b->h.n_py)
				break;
			__u32 at = base + i * sizeof(struct gs_py_frame);
			if (at > sizeof(b->native) + sizeof(b->py) - sizeof(struct gs_py_frame))
				break;
			*(struct gs_py_frame *)((void *)b->native + at) = b->py[i];
		}
	}
}

/* Emit a captured stack for the call that entered at ts_ns; return the
 * site its event names (0: none, or its own stack went out). */
static __always_inline __u64 gs_stack_emit(struct gs_stack_buf *b, __u64 ts_ns, __u64 pid_tgid, __u32 op)
{
	__u64 size;
	__u32 frames;

	/* The slot is another call's now: a kernel that preempts programs ran
	 * another thread's probe on this CPU meanwhile. Counted, not emitted. */
	if (b->h.tid != (__u32)pid_tgid || b->h.pid != pid_tgid >> 32 || b->h.op != op) {
		gs_count(GS_STAT_DROP_STACK);
		return 0;
	}
	if (!b->full)
		return b->h.site;
	b->h.ts_ns = ts_ns;
	frames = (b->h.n_native & 63) * sizeof(struct gs_native_frame) + (b->h.n_py & 63) * sizeof(struct gs_py_frame);
	size = sizeof(b->h) + frames;
	gs_stack_pack_py(b);
	/* The window goes right after the frames; its length is the record's
	 * remainder. The bound on `frames` keeps the verifier's view of the
	 * destination inside b->window. The top of the main thread's stack can
	 * be closer than the whole window: then try a quarter of it. */
	if (stack_scan && frames <= sizeof(b->native) + sizeof(b->py)) {
		void *dst = (void *)b->native + frames;
		if (!bpf_probe_read_user(dst, sizeof(b->window), (void *)b->sp))
			size += sizeof(b->window);
		else if (!bpf_probe_read_user(dst, sizeof(b->window) / 4, (void *)b->sp))
			size += sizeof(b->window) / 4;
	}
	if (size > offsetof(struct gs_stack_buf, sp))
		size = offsetof(struct gs_stack_buf, sp);
	/* Lost to a full ring: counted, and the call takes its site's stack
	 * when a native caller names the site. Not when a Python one does: its
	 * code object may have been freed and its address taken by another
	 * function's, whose call then has no stack rather than the wrong one. */
	if (bpf_ringbuf_output(&stack_events, b, size, BPF_RB_NO_WAKEUP)) {
		gs_count(GS_STAT_DROP_STACK);
		return b->site_key.py_code ? 0 : b->h.site;
	}
	/* Known only once its stack is out: a site whose first record was
	 * lost takes a full stack again at its next call. */
	if (b->new_site) {
		struct gs_site v = {.id = b->h.site, .calls = 1};
		bpf_map_update_elem(&stack_sites, &b->site_key, &v, BPF_NOEXIST);
	}
	/* The call is linked by its own record: naming its site too would let
	 * user space give it the site's previous stack first, which is another
	 * function's when a freed code object's address was reused. */
	return 0;
}

#endif /* GPUSCOPE_STACKS_BPF_H */
