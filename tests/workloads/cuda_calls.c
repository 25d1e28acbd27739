/* A workload calling the stand-in CUDA libraries a known number of times.
 * Usage: cuda_calls N [threads]   (each thread makes N iterations)
 * Per iteration: cudaMalloc, cudaMemcpy(H2D), cudaLaunchKernel,
 * cudaMemcpyAsync(D2H), cudaStreamSynchronize, cudaFree, cuLaunchKernel,
 * cuMemAlloc_v2, cuMemFree_v2, cuCtxSynchronize. Once per thread at the end:
 * cudaDeviceSynchronize. Linked against libcudart.so.12 and libcuda.so.1. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <stddef.h>

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

static void kernel_fn(void) {}

static void *worker(void *arg)
{
	(void)arg;
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
	for (int i = 0; i < nthreads && i < 64; i++)
		pthread_create(&th[i], NULL, worker, NULL);
	for (int i = 0; i < nthreads && i < 64; i++)
		pthread_join(th[i], NULL);
	printf("done %ld x %d\n", iters, nthreads);
	return 0;
}
