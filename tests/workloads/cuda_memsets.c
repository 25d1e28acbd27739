/* Driver API memsets with known arguments.
 * Usage: cuda_memsets N   (N iterations on the main thread)
 * Per iteration, each with its own destination and element count:
 *   cuMemsetD8_v2(0x7e0000010000, 0xab, 1000)
 *   cuMemsetD8_v2_ptds(0x7e0000010000, 0xab, 1000)      per-thread twin
 *   cuMemsetD16_v2(0x7e0000020000, 0xabcd, 300)
 *   cuMemsetD32_v2(0x7e0000030000, 7, 50)
 *   cuMemsetD8Async(0x7e0000040000, 0, 4096, stream 0x5151)
 *   cuMemsetD16Async(0x7e0000050000, 0, 2048, stream 0x5252)
 *   cuMemsetD32Async(0x7e0000060000, 0, 1024, stream 0x5353)
 *   cuMemsetD32Async_ptsz(0x7e0000060000, 0, 1024, stream 0x5353)  per-thread twin */
#include <stdint.h>
#include <stdlib.h>
#include <stddef.h>

int cuMemsetD8_v2(uint64_t dst, unsigned char v, size_t n);
int cuMemsetD8_v2_ptds(uint64_t dst, unsigned char v, size_t n);
int cuMemsetD16_v2(uint64_t dst, unsigned short v, size_t n);
int cuMemsetD32_v2(uint64_t dst, unsigned int v, size_t n);
int cuMemsetD8Async(uint64_t dst, unsigned char v, size_t n, void *s);
int cuMemsetD16Async(uint64_t dst, unsigned short v, size_t n, void *s);
int cuMemsetD32Async(uint64_t dst, unsigned int v, size_t n, void *s);
int cuMemsetD32Async_ptsz(uint64_t dst, unsigned int v, size_t n, void *s);

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 10;
	for (long i = 0; i < iters; i++) {
		cuMemsetD8_v2(0x7e0000010000ull, 0xab, 1000);
		cuMemsetD8_v2_ptds(0x7e0000010000ull, 0xab, 1000);
		cuMemsetD16_v2(0x7e0000020000ull, 0xabcd, 300);
		cuMemsetD32_v2(0x7e0000030000ull, 7, 50);
		cuMemsetD8Async(0x7e0000040000ull, 0, 4096, (void *)0x5151);
		cuMemsetD16Async(0x7e0000050000ull, 0, 2048, (void *)0x5252);
		cuMemsetD32Async(0x7e0000060000ull, 0, 1024, (void *)0x5353);
		cuMemsetD32Async_ptsz(0x7e0000060000ull, 0, 1024, (void *)0x5353);
	}
	return 0;
}
