/* Overload: threads calling cudaLaunchKernel as fast as they can.
 * Usage: cuda_hammer CALLS_PER_THREAD THREADS
 * Prints "calls TOTAL", the exact number of cudaLaunchKernel calls made. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);

static long per_thread;
static void kernel_fn(void) {}

static void *worker(void *arg)
{
	long *made = arg;
	dim3 g = {1, 1, 1}, b = {32, 1, 1};
	for (long i = 0; i < per_thread; i++) {
		cudaLaunchKernel((const void *)kernel_fn, g, b, NULL, 0, NULL);
		(*made)++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	per_thread = argc > 1 ? atol(argv[1]) : 100000;
	int n = argc > 2 ? atoi(argv[2]) : 2;
	pthread_t th[64];
	long made[64] = {0};
	if (n > 64)
		n = 64;
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, worker, &made[i]);
	long total = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		total += made[i];
	}
	printf("calls %ld\n", total);
	return 0;
}
