/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Call cudaLaunchKernel at a fixed rate: a steady load the tracer keeps up with.
 *
 *   cudapace CALLS_PER_SEC DURATION_S LIBRARY
 *
 * The library is dlopen()ed by path (the stand-in or the real libcudart).
 * Pacing as in gen.c: wake every millisecond, catch up to rate * elapsed,
 * sleep again, so a late wake-up does not lower the rate. Prints
 * "calls N" at the end (the bench usually kills it first).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct { unsigned int x, y, z; } dim3;
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void kernel_stub(void) {}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s CALLS_PER_SEC DURATION_S LIBRARY\n", argv[0]);
		return 2;
	}
	double rate = strtod(argv[1], NULL);
	double duration = strtod(argv[2], NULL);
	void *h = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	launch_fn launch = (launch_fn)dlsym(h, "cudaLaunchKernel");
	if (!launch) {
		fprintf(stderr, "dlsym cudaLaunchKernel: %s\n", dlerror());
		return 1;
	}
	dim3 grid = {1, 1, 1}, block = {32, 1, 1};
	uint64_t total = (uint64_t)(rate * duration);
	uint64_t t0 = now_ns(), calls = 0;
	struct timespec tick = {0, 1000000};
	while (calls < total) {
		uint64_t due = (uint64_t)(rate * (double)(now_ns() - t0) / 1e9) + 1;
		if (due > total)
			due = total;
		while (calls < due) {
			launch((const void *)kernel_stub, grid, block, NULL, 0, NULL);
			calls++;
		}
		nanosleep(&tick, NULL);
	}
	printf("calls %llu\n", (unsigned long long)calls);
	return 0;
}
