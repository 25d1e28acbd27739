/* Fault-injection workloads for `gpuscope explain`, on the stand-in CUDA libraries.
 * Usage: explain_scenarios MODE ITERS [ARG]
 *   sync     launch + cudaStreamSynchronize per iteration (latency from the
 *            environment); ARG = microseconds to sleep between iterations
 *   cold     first cudaMalloc and the first launch of each of 4 kernels are
 *            slow (30 ms), steady state is fast
 *   memcpy   cudaMemcpy (latency from the environment) dominates each step
 *   churn    cudaMalloc + cudaFree per step; every 20th cudaMalloc takes 15 ms
 *   leak     cudaMalloc per step, never freed
 *   contend  synchronize on a "GPU" shared through ARG (a file): the wait is
 *            the base latency times the number of processes waiting at once,
 *            like a time-sliced GPU
 * standin_set_latency() changes the stand-in's latency at run time. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *d, const void *s, size_t n, int kind);
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);
int cudaStreamSynchronize(void *s);
void standin_set_latency(const char *name, long ns, int sleep_mode);

static void k0(void) {}
static void k1(void) {}
static void k2(void) {}
static void k3(void) {}
static void (*const kernels[4])(void) = {k0, k1, k2, k3};
static void *const stream = (void *)0x5151;

static void launch(int k)
{
	dim3 g = {64, 1, 1}, b = {128, 1, 1};
	cudaLaunchKernel((const void *)kernels[k], g, b, NULL, 0, stream);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s MODE ITERS [ARG]\n", argv[0]);
		return 2;
	}
	const char *mode = argv[1];
	long iters = atol(argv[2]);
	const char *arg = argc > 3 ? argv[3] : NULL;
	static char host[1 << 16];

	if (strcmp(mode, "sync") == 0) {
		long gap_us = arg ? atol(arg) : 0;
		for (long i = 0; i < iters; i++) {
			launch(0);
			cudaStreamSynchronize(stream);
			if (gap_us)
				usleep((useconds_t)gap_us);
		}
	} else if (strcmp(mode, "cold") == 0) {
		void *p;
		standin_set_latency("cudaMalloc", 30000000, 0);
		cudaMalloc(&p, 1 << 20);
		standin_set_latency("cudaMalloc", 20000, 0);
		for (long i = 0; i < iters; i++) {
			int k = (int)(i % 4);
			standin_set_latency("cudaLaunchKernel", i < 4 ? 30000000 : 10000, 0);
			launch(k);
			cudaMalloc(&p, 4096);
			cudaFree(p);
			cudaStreamSynchronize(stream);
		}
	} else if (strcmp(mode, "memcpy") == 0) {
		void *p;
		cudaMalloc(&p, sizeof(host));
		for (long i = 0; i < iters; i++) {
			cudaMemcpy(p, host, sizeof(host), 1);
			launch(0);
			cudaMemcpy(host, p, sizeof(host), 2);
			cudaStreamSynchronize(stream);
		}
		cudaFree(p);
	} else if (strcmp(mode, "churn") == 0) {
		for (long i = 0; i < iters; i++) {
			void *p;
			standin_set_latency("cudaMalloc", i % 20 == 10 ? 15000000 : 20000, 0);
			cudaMalloc(&p, 1 << 20);
			launch(0);
			cudaStreamSynchronize(stream);
			cudaFree(p);
		}
	} else if (strcmp(mode, "leak") == 0) {
		for (long i = 0; i < iters; i++) {
			void *p;
			cudaMalloc(&p, 1 << 20);
			launch(0);
			cudaStreamSynchronize(stream);
		}
	} else if (strcmp(mode, "contend") == 0) {
		int fd = open(arg, O_RDWR | O_CREAT, 0600);
		if (fd < 0 || ftruncate(fd, 4096) != 0)
			return 1;
		unsigned seed = (unsigned)getpid();
		int *active = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (active == MAP_FAILED)
			return 1;
		for (long i = 0; i < iters; i++) {
			launch(0);
			int n = __atomic_add_fetch(active, 1, __ATOMIC_SEQ_CST);
			standin_set_latency("cudaStreamSynchronize", 1000000L * n, 1);
			cudaStreamSynchronize(stream);
			__atomic_sub_fetch(active, 1, __ATOMIC_SEQ_CST);
			usleep((useconds_t)(100 + rand_r(&seed) % 1000));
		}
	} else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	printf("done %s %ld\n", mode, iters);
	return 0;
}
