/* A library loaded at run time from a path given on the command line, and
 * called at once: the case of `import torch` loading libcudart from a wheel.
 * Usage: dlopen_calls LIBRARY CALLS [LINGER_SECONDS]
 * dlopen(LIBRARY), then CALLS cudaLaunchKernel calls through dlsym, then exit
 * (after LINGER_SECONDS of sleep, when given).
 * Prints "pid P" and "calls N". Linked against no CUDA library. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);

static void kernel_fn(void) {}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: dlopen_calls LIBRARY CALLS\n");
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	launch_fn launch = (launch_fn)dlsym(lib, "cudaLaunchKernel");
	if (!launch) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
	long n = atol(argv[2]);
	dim3 g = {1, 1, 1}, b = {32, 1, 1};
	for (long i = 0; i < n; i++)
		launch((const void *)kernel_fn, g, b, NULL, 0, NULL);
	printf("pid %ld\ncalls %ld\n", (long)getpid(), n);
	fflush(stdout);
	if (argc > 3)
		usleep((useconds_t)(atof(argv[3]) * 1e6));
	return 0;
}
