/* A training loop starved by its data loader: a quick step on the GPU, then the CUDA thread blocks on a
 * condition variable until a loader thread, busy preparing the next batch on the CPU, hands it over.
 * Usage: cuda_feeder STEPS PREPARE_US */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);
int cudaStreamSynchronize(void *s);

static void kernel(void) {}
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready = PTHREAD_COND_INITIALIZER;
static int batches, steps;
static long prepare_us;

static long now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

static void *loader(void *arg)
{
	(void)arg;
	for (int i = 0; i < steps; i++) {
		long end = now_us() + prepare_us;
		while (now_us() < end) { /* decode, augment, collate: CPU work */
		}
		pthread_mutex_lock(&lock);
		batches++;
		pthread_cond_signal(&ready);
		pthread_mutex_unlock(&lock);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	steps = argc > 1 ? atoi(argv[1]) : 100;
	prepare_us = argc > 2 ? atol(argv[2]) : 5000;
	pthread_t t;
	pthread_create(&t, NULL, loader, NULL);
	dim3 g = {64, 1, 1}, b = {128, 1, 1};
	for (int i = 0; i < steps; i++) {
		pthread_mutex_lock(&lock);
		while (batches == 0)
			pthread_cond_wait(&ready, &lock);
		batches--;
		pthread_mutex_unlock(&lock);
		cudaLaunchKernel((const void *)kernel, g, b, NULL, 0, (void *)0x5151);
		cudaStreamSynchronize((void *)0x5151);
	}
	pthread_join(t, NULL);
	return 0;
}
