/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A training-step-shaped CUDA Runtime workload against a (stand-in) library.
 *
 *   mixloop STEPS LIBRARY
 *
 * Each step calls cudaMalloc, cudaMemcpy, LAUNCHES x cudaLaunchKernel,
 * cudaStreamSynchronize and cudaFree (CALLS_PER_STEP calls), after WARMUP
 * cudaStreamSynchronize calls that are not timed. The library is dlopen()ed
 * by path, so a private copy of it can be probed by every tool alike.
 *
 * Prints one line: "calls=N warmup=W loop_ns=T" where T is the wall time of
 * the timed steps only, so a tracer's start-up and teardown are not in it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define WARMUP 100
#define LAUNCHES 28
#define CALLS_PER_STEP (LAUNCHES + 4)

typedef struct { unsigned int x, y, z; } dim3;
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*sync_fn)(void *);
typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
typedef int (*memcpy_fn)(void *, const void *, size_t, int);

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void kernel_a(void) {}
static void kernel_b(void) {}

static void *need(void *h, const char *name)
{
	void *p = dlsym(h, name);
	if (!p) {
		fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
		exit(1);
	}
	return p;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s STEPS LIBRARY\n", argv[0]);
		return 2;
	}
	long steps = strtol(argv[1], NULL, 10);
	void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	launch_fn launch = (launch_fn)need(h, "cudaLaunchKernel");
	sync_fn sync = (sync_fn)need(h, "cudaStreamSynchronize");
	malloc_fn alloc = (malloc_fn)need(h, "cudaMalloc");
	free_fn release = (free_fn)need(h, "cudaFree");
	memcpy_fn copy = (memcpy_fn)need(h, "cudaMemcpy");

	dim3 grid = {128, 1, 1}, block = {256, 1, 1};
	void *args[1] = {0};
	static char host[4096];
	int rc = 0;

	for (int i = 0; i < WARMUP; i++)
		rc |= sync(0);
	uint64_t t0 = now_ns();
	for (long s = 0; s < steps; s++) {
		void *dev = 0;
		rc |= alloc(&dev, sizeof(host));
		rc |= copy(dev, host, sizeof(host), 1);
		for (int i = 0; i < LAUNCHES; i++)
			rc |= launch((const void *)(i & 1 ? kernel_a : kernel_b), grid, block, args, 0, 0);
		rc |= sync(0);
		rc |= release(dev);
	}
	uint64_t t1 = now_ns();
	printf("calls=%ld warmup=%d loop_ns=%llu rc=%d\n", steps * CALLS_PER_STEP, WARMUP,
	       (unsigned long long)(t1 - t0), rc);
	fflush(stdout);
	return 0;
}
