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
 * the probes: records expected = WARMUP + calls (ITERATIONS rounded down to
 * whole chunks).
 *
 * The timed calls run in chunks of CHUNK calls. Prints one line:
 * "calls=N warmup=W ns_per_call=MEAN ns_per_call_p50=MEDIAN_CHUNK rc=R".
 * The median chunk is the robust figure on a shared machine: a chunk in which
 * another task took the CPU is an outlier, not a shift of the mean.
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
#define CHUNK 1000

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

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

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
	long nchunks = iters / CHUNK;
	uint64_t *chunk_ns = calloc(nchunks > 0 ? (size_t)nchunks : 1, sizeof(uint64_t));

	for (long i = 0; i < WARMUP; i++)
		rc = launch ? lf((const void *)kernel_stub, grid, block, args, 0, 0) : sf(0);
	uint64_t t0 = now_ns(), tc = t0;
	for (long c = 0; c < nchunks; c++) {
		for (long i = 0; i < CHUNK; i++)
			rc = launch ? lf((const void *)kernel_stub, grid, block, args, 0, 0) : sf(0);
		uint64_t t = now_ns();
		chunk_ns[c] = t - tc;
		tc = t;
	}
	long done = nchunks * CHUNK;
	qsort(chunk_ns, (size_t)nchunks, sizeof(uint64_t), cmp_u64);
	double p50 = nchunks > 0 ? (double)chunk_ns[nchunks / 2] / CHUNK : 0.0;
	printf("calls=%ld warmup=%d ns_per_call=%.2f ns_per_call_p50=%.2f rc=%d\n", done, WARMUP,
	       done > 0 ? (double)(tc - t0) / (double)done : 0.0, p50, rc);
	free(chunk_ns);
	return 0;
}
