/* A long-running workload for attaching by pid: batches of calls with pauses.
 * Usage: cuda_loop MAX_SECONDS
 * Prints "pid P" and "ready" (flushed) once it has made its first batch, then
 * every 10 ms makes one batch (cudaLaunchKernel, cudaStreamSynchronize) until
 * killed or MAX_SECONDS pass (so it never outlives a failed test by long).
 * Exits 0 on SIGINT/SIGTERM too. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <time.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);
int cudaStreamSynchronize(void *s);

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }
static void kernel_fn(void) {}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double max_s = argc > 1 ? atof(argv[1]) : 30;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	double end = now_s() + max_s;
	dim3 g = {1, 1, 1}, b = {32, 1, 1};
	long batches = 0;
	printf("pid %ld\n", (long)getpid());
	while (!stop && now_s() < end) {
		cudaLaunchKernel((const void *)kernel_fn, g, b, NULL, 0, NULL);
		cudaStreamSynchronize(NULL);
		if (batches++ == 0) {
			printf("ready\n");
			fflush(stdout);
		}
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	printf("batches %ld\n", batches);
	return 0;
}
