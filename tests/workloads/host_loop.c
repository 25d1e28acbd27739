/* A host-bound training step: the framework's own CPU work between many small CUDA calls.
 *
 *   host_loop SECONDS [WORK_NS [SKIP_S]]
 *
 * Each step makes CALLS calls, each after WORK_NS (default 10000) of pure CPU work:
 * 80 % cudaLaunchKernel, 10 % cudaMemcpyAsync, 10 % cudaMemsetAsync, then one
 * cudaStreamSynchronize. It runs whole steps until SECONDS have passed and prints one line:
 *
 *   steps=N launches=L memcpy_async=C memset_async=M syncs=S step_ns_p50=P steady_steps=K
 *
 * The counts are the calls it made, exactly. step_ns_p50 is the median step time of the
 * steps that started at least SKIP_S (default 0) seconds after the loop began, so a
 * tracer's first seconds can be left out of the figure. The work is a fixed number of
 * arithmetic iterations calibrated once before the loop (not a spin on the clock), so a
 * slower step means the calls, or something else on the CPU, cost more.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CALLS 1000
#define MAX_STEPS 1000000

typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);
int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream);
int cudaMemsetAsync(void *dst, int value, size_t n, void *stream);
int cudaStreamSynchronize(void *stream);

static void kernel_a(void) {}
static void kernel_b(void) {}
static volatile uint64_t sink;
static uint64_t steps_ns[MAX_STEPS];

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void work(uint64_t iters)
{
	uint64_t x = sink;
	for (uint64_t i = 0; i < iters; i++)
		x = x * 6364136223846793005ull + 1442695040888963407ull;
	sink = x;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5.0;
	uint64_t work_ns = argc > 2 ? strtoull(argv[2], NULL, 10) : 10000;
	double skip_s = argc > 3 ? atof(argv[3]) : 0.0;

	/* Calibrate: the fastest of five runs of 2M iterations. */
	uint64_t best = UINT64_MAX;
	for (int r = 0; r < 5; r++) {
		uint64_t t = now_ns();
		work(2000000);
		t = now_ns() - t;
		if (t < best)
			best = t;
	}
	uint64_t iters = (uint64_t)((double)work_ns * 2000000.0 / (double)(best ? best : 1));

	static char host[4096], dev[4096];
	dim3 g = {128, 1, 1}, b = {256, 1, 1};
	long launches = 0, copies = 0, sets = 0, syncs = 0, steps = 0, steady = 0;
	uint64_t t0 = now_ns(), end = t0 + (uint64_t)(seconds * 1e9), skip = t0 + (uint64_t)(skip_s * 1e9);
	while (now_ns() < end && steps < MAX_STEPS) {
		uint64_t s0 = now_ns();
		for (int i = 0; i < CALLS; i++) {
			work(iters);
			switch (i % 10) {
			case 8:
				cudaMemcpyAsync(dev, host, sizeof(host), 1, 0);
				copies++;
				break;
			case 9:
				cudaMemsetAsync(dev, 0, sizeof(dev), 0);
				sets++;
				break;
			default:
				cudaLaunchKernel((const void *)(i & 1 ? kernel_a : kernel_b), g, b, NULL, 0, NULL);
				launches++;
			}
		}
		cudaStreamSynchronize(0);
		syncs++;
		steps++;
		if (s0 >= skip)
			steps_ns[steady++] = now_ns() - s0;
	}
	qsort(steps_ns, (size_t)steady, sizeof(steps_ns[0]), cmp_u64);
	printf("steps=%ld launches=%ld memcpy_async=%ld memset_async=%ld syncs=%ld step_ns_p50=%llu steady_steps=%ld\n",
	       steps, launches, copies, sets, syncs, (unsigned long long)(steady ? steps_ns[steady / 2] : 0), steady);
	return 0;
}
