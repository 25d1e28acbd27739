/* The demo's "training loop", on gpuscope's stand-in CUDA library.
 * Compiled at run time by `gpuscope demo --live` (src/gpuscope/demo/live.py).
 * Usage: demo_workload MODE N [ARG]
 *   steady   N = milliseconds: launch, copy 64 KiB, launch, synchronize
 *            (latencies from GPUSCOPE_STANDIN_LATENCY)
 *   cold     N = iterations: the first cudaMalloc (context creation, 60 ms) and
 *            the first launch of each of 8 kernels (5 ms) are slow; steady
 *            state is launch 30 us, cudaMalloc 300 us
 *   memcpy   N = iterations: H2D copy, 3 launches, host work, D2H copy, sync
 *            (copy latencies from the environment)
 *   spikes   N = iterations: cudaMalloc 100 us, every 200th 5 ms (50x), then
 *            launch, synchronize, cudaFree
 *   contend  N = milliseconds, ARG = a file standing for one shared GPU:
 *            synchronize waits the base latency times the number of
 *            processes waiting at once, like a time-sliced GPU
 * standin_set_latency() changes the stand-in's latency at run time. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *d, const void *s, size_t n, int kind);
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);
int cudaStreamSynchronize(void *s);
void standin_set_latency(const char *name, long ns, int sleep_mode);

#define NKERNELS 8
static void k0(void) {}
static void k1(void) {}
static void k2(void) {}
static void k3(void) {}
static void k4(void) {}
static void k5(void) {}
static void k6(void) {}
static void k7(void) {}
static void (*const kernels[NKERNELS])(void) = {k0, k1, k2, k3, k4, k5, k6, k7};
static void *const stream = (void *)0x5151;
static char host[1 << 16];

static long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void spin_ns(long ns)
{
	long end = now_ns() + ns;
	while (now_ns() < end)
		;
}

static void launch(int k)
{
	dim3 g = {64, 1, 1}, b = {128, 1, 1};
	cudaLaunchKernel((const void *)kernels[k % NKERNELS], g, b, NULL, 0, stream);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s MODE N [ARG]\n", argv[0]);
		return 2;
	}
	const char *mode = argv[1];
	long n = atol(argv[2]);
	const char *arg = argc > 3 ? argv[3] : NULL;
	void *dev = NULL;
	long iters = 0;

	if (strcmp(mode, "steady") == 0) {
		long end = now_ns() + n * 1000000L;
		cudaMalloc(&dev, sizeof(host));
		while (now_ns() < end) {
			launch(0);
			cudaMemcpy(dev, host, sizeof(host), 1);
			launch(1);
			cudaStreamSynchronize(stream);
			iters++;
		}
		cudaFree(dev);
	} else if (strcmp(mode, "cold") == 0) {
		standin_set_latency("cudaMalloc", 60000000, 0);
		cudaMalloc(&dev, 1 << 20);
		standin_set_latency("cudaMalloc", 300000, 0);
		for (; iters < n; iters++) {
			void *p;
			int k = (int)(iters % NKERNELS);
			standin_set_latency("cudaLaunchKernel", iters < NKERNELS ? 5000000 : 30000, 0);
			launch(k);
			cudaMalloc(&p, 4096);
			cudaMemcpy(dev, host, 4096, 1);
			cudaStreamSynchronize(stream);
			cudaFree(p);
		}
		cudaFree(dev);
	} else if (strcmp(mode, "memcpy") == 0) {
		cudaMalloc(&dev, sizeof(host));
		for (; iters < n; iters++) {
			cudaMemcpy(dev, host, sizeof(host), 1);
			spin_ns(300000); /* host-side batch preparation */
			launch(0);
			launch(1);
			launch(2);
			cudaMemcpy(host, dev, sizeof(host), 2);
			cudaStreamSynchronize(stream);
		}
		cudaFree(dev);
	} else if (strcmp(mode, "spikes") == 0) {
		for (; iters < n; iters++) {
			void *p;
			standin_set_latency("cudaMalloc", iters % 200 == 100 ? 5000000 : 100000, 0);
			cudaMalloc(&p, 1 << 20);
			launch(0);
			cudaStreamSynchronize(stream);
			cudaFree(p);
		}
	} else if (strcmp(mode, "contend") == 0) {
		int fd = open(arg, O_RDWR | O_CREAT, 0600);
		if (fd < 0 || ftruncate(fd, 4096) != 0)
			return 1;
		unsigned seed = (unsigned)getpid();
		int *active = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (active == MAP_FAILED)
			return 1;
		long end = now_ns() + n * 1000000L;
		while (now_ns() < end) {
			launch(0);
			launch(1);
			int waiting = __atomic_add_fetch(active, 1, __ATOMIC_SEQ_CST);
			standin_set_latency("cudaStreamSynchronize", 6000000L * waiting, 1);
			cudaStreamSynchronize(stream);
			__atomic_sub_fetch(active, 1, __ATOMIC_SEQ_CST);
			usleep((useconds_t)(100 + rand_r(&seed) % 1000));
			iters++;
		}
	} else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	printf("done %s %ld\n", mode, iters);
	return 0;
}
