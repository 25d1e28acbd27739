/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Processes whose Python frames are walked: tgid -> where its _PyRuntime is.
 *
 * Written by user space (from a process's maps), by the CUDA object when a
 * registered libpython starts (gs_py_start), and by the host object at a
 * fork (the child has the parent's memory, so its runtime). The host object
 * removes a process at its exec (another program) and at its exit: the map
 * never holds a pid that another process may reuse, and never fills up on a
 * machine that runs Python all day. LRU besides, for an entry user space
 * wrote after the process was gone.
 */
#ifndef GPUSCOPE_PY_PROCS_BPF_H
#define GPUSCOPE_PY_PROCS_BPF_H

#include "common.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct gs_py_proc);
} py_procs SEC(".maps");

#endif /* GPUSCOPE_PY_PROCS_BPF_H */
