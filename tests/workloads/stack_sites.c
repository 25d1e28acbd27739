/* Calls cudaMalloc from two call sites that share their direct caller, so a
 * test can check that calls are counted per site exactly.
 *
 * Usage: stack_sites N   (N calls: call i comes through site_a when i % 3 == 0,
 *                         else through site_b; both call alloc_from)
 * Prints {"site_a": A, "site_b": B}.
 */
#include <stdio.h>
#include <stdlib.h>

typedef int cudaError_t;
extern cudaError_t cudaMalloc(void **ptr, size_t size);

static volatile int sink;

/* noinline and work after each call: every level is a real frame. */
__attribute__((noinline)) int alloc_from(int i)
{
	void *p = 0;
	int r = cudaMalloc(&p, 4096 + (size_t)i);
	sink += r;
	return r + 1;
}

__attribute__((noinline)) int site_a(int i)
{
	int r = alloc_from(i);
	sink += r;
	return r + 2;
}

__attribute__((noinline)) int site_b(int i)
{
	int r = alloc_from(i);
	sink += r;
	return r + 3;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 10;
	int a = 0, b = 0;
	for (int i = 0; i < n; i++) {
		if (i % 3 == 0) {
			site_a(i);
			a++;
		} else {
			site_b(i);
			b++;
		}
	}
	printf("{\"site_a\": %d, \"site_b\": %d}\n", a, b);
	return 0;
}
