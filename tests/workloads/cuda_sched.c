/* One worker thread, pinned to CPU 0, calling cudaStreamSynchronize N times.
 * Usage: cuda_sched N
 * The stand-in's latency (GPUSCOPE_STANDIN_LATENCY) decides whether each call
 * spins on the CPU or sleeps. Prints "pid P" and "tid T" (the worker's tid,
 * never the main thread's). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

int cudaStreamSynchronize(void *s);

static long iters;

static void *worker(void *arg)
{
	(void)arg;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) {
		perror("pthread_setaffinity_np");
		exit(2);
	}
	printf("tid %ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	for (long i = 0; i < iters; i++)
		cudaStreamSynchronize((void *)0x5151);
	return NULL;
}

int main(int argc, char **argv)
{
	iters = argc > 1 ? atol(argv[1]) : 30;
	printf("pid %ld\n", (long)getpid());
	fflush(stdout);
	pthread_t th;
	pthread_create(&th, NULL, worker, NULL);
	pthread_join(th, NULL);
	return 0;
}
