/* A training-loop stand-in for the demo: each step allocates, copies,
 * launches kernels and synchronizes on the stand-in CUDA runtime.
 * Usage: demo_train STEPS */
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *d, const void *s, size_t n, int kind);
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);
int cudaStreamSynchronize(void *s);

static void forward(void) {}
static void backward(void) {}

int main(int argc, char **argv)
{
	long steps = argc > 1 ? atol(argv[1]) : 200;
	static char batch[1 << 16];
	void *stream = (void *)0x1;
	for (long i = 0; i < steps; i++) {
		void *buf = NULL;
		cudaMalloc(&buf, sizeof(batch));
		cudaMemcpy(buf, batch, sizeof(batch), 1);
		dim3 g = {1024, 1, 1}, b = {256, 1, 1};
		for (int k = 0; k < 8; k++)
			cudaLaunchKernel((const void *)(k & 1 ? backward : forward), g, b, NULL, 0, stream);
		cudaStreamSynchronize(stream);
		cudaFree(buf);
	}
	printf("trained %ld steps\n", steps);
	return 0;
}
