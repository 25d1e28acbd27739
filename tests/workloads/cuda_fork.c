/* Process lifecycle: a parent that forks a child which calls CUDA and execs.
 * Usage: cuda_fork PARENT_EXIT CHILD_EXIT
 * Parent: 3 cudaMalloc, fork, wait for the child, exit PARENT_EXIT.
 * Child: 5 cudaLaunchKernel, then exec itself as "cuda_fork --exec CHILD_EXIT",
 * which makes 7 cudaStreamSynchronize and exits CHILD_EXIT.
 * Prints "parent P" and "child C". */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <unistd.h>
#include <sys/wait.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaMalloc(void **p, size_t n);
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);
int cudaStreamSynchronize(void *s);

static void kernel_fn(void) {}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--exec") == 0) {
		for (int i = 0; i < 7; i++)
			cudaStreamSynchronize(NULL);
		return atoi(argv[2]);
	}
	int parent_exit = argc > 1 ? atoi(argv[1]) : 0;
	const char *child_exit = argc > 2 ? argv[2] : "0";
	for (int i = 0; i < 3; i++) {
		void *p;
		cudaMalloc(&p, 4096);
	}
	printf("parent %ld\n", (long)getpid());
	fflush(stdout);
	pid_t c = fork();
	if (c < 0) {
		perror("fork");
		return 100;
	}
	if (c == 0) {
		dim3 g = {1, 1, 1}, b = {1, 1, 1};
		for (int i = 0; i < 5; i++)
			cudaLaunchKernel((const void *)kernel_fn, g, b, NULL, 0, NULL);
		execl("/proc/self/exe", argv[0], "--exec", child_exit, (char *)NULL);
		perror("execl");
		_exit(101);
	}
	printf("child %ld\n", (long)c);
	fflush(stdout);
	int status = 0;
	waitpid(c, &status, 0);
	return parent_exit;
}
