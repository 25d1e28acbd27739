/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Call one CUDA Runtime API in a tight loop and print the cost per call.
 *
 *   callloop ITERATIONS LIBRARY [FUNCTION [CPU]]
 *
 * FUNCTION is cudaLaunchKernel (default) or cudaStreamSynchronize. The
 * library is dlopen()ed by path so the stand-in and the real libcudart can be
 * measured by the same binary; the call goes through a function pointer (like
 * a PLT call, one indirect jump). The process pins itself to CPU (default 1)
 * and runs WARMUP calls before the timed ones, so every call it makes hits
 * the probes: records expected = WARMUP + ITERATIONS.
 *
 * Prints one line: "calls=N warmup=W ns_per_call=X rc=R".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WARMUP 1000

typedef struct { unsigned int x, y, z; } dim3;
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*sync_fn)(void *);

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void kernel_stub(void) {}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s ITERATIONS LIBRARY [FUNCTION [CPU]]\n", argv[0]);
		return 2;
	}
	long iters = strtol(argv[1], NULL, 10);
	const char *fn = argc > 3 ? argv[3] : "cudaLaunchKernel";
	int cpu = argc > 4 ? atoi(argv[4]) : 1;

	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		perror("sched_setaffinity");

	void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	void *sym = dlsym(h, fn);
	if (!sym) {
		fprintf(stderr, "dlsym %s: %s\n", fn, dlerror());
		return 1;
	}

	int rc = 0;
	int launch = strcmp(fn, "cudaLaunchKernel") == 0;
	launch_fn lf = (launch_fn)sym;
	sync_fn sf = (sync_fn)sym;
	dim3 grid = {128, 1, 1}, block = {256, 1, 1};
	void *args[1] = {0};
	uint64_t t0 = 0;
	for (long i = -WARMUP; i < iters; i++) {
		if (i == 0)
			t0 = now_ns();
		if (launch)
			rc = lf((const void *)kernel_stub, grid, block, args, 0, 0);
		else
			rc = sf(0);
	}
	uint64_t t1 = now_ns();
	printf("calls=%ld warmup=%d ns_per_call=%.2f rc=%d\n", iters, WARMUP,
	       iters > 0 ? (double)(t1 - t0) / (double)iters : 0.0, rc);
	return 0;
}
