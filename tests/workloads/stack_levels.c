/* Calls the stand-in libcudart through three named call levels, so a test can
 * check that the recorded stack names every level (built with and without
 * frame pointers).
 *
 * Usage: stack_levels N   (N iterations of main -> stack_level1 -> stack_level2
 *                          -> stack_level3 -> cudaMalloc + cudaStreamSynchronize)
 */
#include <stdio.h>
#include <stdlib.h>

typedef int cudaError_t;
extern cudaError_t cudaMalloc(void **ptr, size_t size);
extern cudaError_t cudaStreamSynchronize(void *stream);

static volatile int sink;

/* noinline and work after each call: no inlining, no tail calls, so every
 * level really is a frame. */
__attribute__((noinline)) int stack_level3(int i)
{
	void *p = 0;
	int r = cudaMalloc(&p, 4096 + (size_t)i);
	r += cudaStreamSynchronize((void *)0x77);
	sink += r;
	return r + 1;
}

__attribute__((noinline)) int stack_level2(int i)
{
	int r = stack_level3(i);
	sink += r;
	return r + 2;
}

__attribute__((noinline)) int stack_level1(int i)
{
	int r = stack_level2(i);
	sink += r;
	return r + 3;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 10;
	int total = 0;
	for (int i = 0; i < n; i++)
		total += stack_level1(i);
	printf("{\"total\": %d}\n", total);
	return 0;
}
