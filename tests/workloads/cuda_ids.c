/* cuda_calls.c's per-iteration call mix, reporting who made the calls.
 * Usage: cuda_ids N [threads]   (each thread makes N iterations)
 * Prints "pid P" once and "tid T" once per worker thread (gettid), so a test
 * can compare the recorded pid/tid with the real ones. Per iteration:
 * cudaMalloc(1 MiB), cudaMemcpy(256 B, H2D), cudaLaunchKernel(grid 128,2,1,
 * block 256,1,1, shmem 48, stream 0x5151), cudaMemcpyAsync(D2H),
 * cudaStreamSynchronize, cudaFree, cuLaunchKernel(grid 64,1,1, block 128,1,1,
 * stream 0x5151), cuMemAlloc_v2, cuMemFree_v2, cuCtxSynchronize. Once per
 * thread at the end: cudaDeviceSynchronize. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <stddef.h>
#include <unistd.h>
#include <sys/syscall.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *d, const void *s, size_t n, int kind);
int cudaMemcpyAsync(void *d, const void *s, size_t n, int kind, void *stream);
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);
int cudaStreamSynchronize(void *s);
int cudaDeviceSynchronize(void);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		   unsigned shmem, void *s, void **p, void **e);
int cuMemAlloc_v2(uint64_t *d, size_t n);
int cuMemFree_v2(uint64_t d);
int cuCtxSynchronize(void);

static long iters;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void kernel_fn(void) {}

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&out_lock);
	printf("tid %ld\n", (long)syscall(SYS_gettid));
	pthread_mutex_unlock(&out_lock);
	char host[256];
	void *stream = (void *)0x5151;
	for (long i = 0; i < iters; i++) {
		void *p = NULL;
		uint64_t d = 0;
		cudaMalloc(&p, 1 << 20);
		cudaMemcpy(p, host, sizeof(host), 1);
		dim3 g = {128, 2, 1}, b = {256, 1, 1};
		cudaLaunchKernel((const void *)kernel_fn, g, b, NULL, 48, stream);
		cudaMemcpyAsync(host, p, sizeof(host), 2, stream);
		cudaStreamSynchronize(stream);
		cudaFree(p);
		cuLaunchKernel((void *)kernel_fn, 64, 1, 1, 128, 1, 1, 0, stream, NULL, NULL);
		cuMemAlloc_v2(&d, 4096);
		cuMemFree_v2(d);
		cuCtxSynchronize();
	}
	cudaDeviceSynchronize();
	return NULL;
}

int main(int argc, char **argv)
{
	iters = argc > 1 ? atol(argv[1]) : 100;
	int nthreads = argc > 2 ? atoi(argv[2]) : 1;
	pthread_t th[64];
	printf("pid %ld\n", (long)getpid());
	fflush(stdout);
	for (int i = 0; i < nthreads && i < 64; i++)
		pthread_create(&th[i], NULL, worker, NULL);
	for (int i = 0; i < nthreads && i < 64; i++)
		pthread_join(th[i], NULL);
	fflush(stdout);
	return 0;
}
