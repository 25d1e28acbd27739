/* SPDX-License-Identifier: Apache-2.0 */
/* A stand-in libcuda.so.1: CUDA Driver API entry points with real names and
 * signatures, including the versioned (_v2) and per-thread-stream (_ptsz,
 * _ptds) variants the real driver exports. */
#include <stddef.h>
#include "standin_common.h"

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUfunction;
typedef void *CUstream;
typedef struct {
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	void *attrs;
	unsigned int numAttrs;
} CUlaunchConfig;

static uint64_t next_dptr = 0x7e0000000000ull;

__attribute__((constructor)) static void standin_init(void)
{
	standin_parse(getenv("GPUSCOPE_STANDIN_LATENCY"), 0);
	standin_parse(getenv("GPUSCOPE_STANDIN_RESULT"), 1);
}

static CUresult alloc(const char *name, CUdeviceptr *dptr, size_t n)
{
	int r = standin_work(name);
	if (r == 0)
		*dptr = __atomic_fetch_add(&next_dptr, (n + 0xfff) & ~0xfffull, __ATOMIC_RELAXED);
	return r;
}

STANDIN_EXPORT CUresult cuInit(unsigned int flags) { (void)flags; return 0; }
STANDIN_EXPORT CUresult cuDriverGetVersion(int *v) { *v = 12040; return 0; }
STANDIN_EXPORT CUresult cuMemAlloc(CUdeviceptr *dptr, unsigned int n) { return alloc("cuMemAlloc", dptr, n); }
STANDIN_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n) { return alloc("cuMemAlloc", dptr, n); }
STANDIN_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned int flags)
{
	(void)flags;
	return alloc("cuMemAllocManaged", dptr, n);
}
STANDIN_EXPORT CUresult cuMemFree_v2(CUdeviceptr d) { (void)d; return standin_work("cuMemFree"); }
STANDIN_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	(void)dst; (void)src; (void)n;
	return standin_work("cuMemcpyHtoD");
}
STANDIN_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	(void)dst; (void)src; (void)n;
	return standin_work("cuMemcpyDtoH");
}
STANDIN_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	(void)dst; (void)src; (void)n; (void)s;
	return standin_work("cuMemcpyAsync");
}
STANDIN_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	(void)dst; (void)src; (void)n; (void)s;
	return standin_work("cuMemcpyAsync");
}
STANDIN_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
				       unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
				       void **extra)
{
	(void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)s;
	(void)params; (void)extra;
	return standin_work("cuLaunchKernel");
}
STANDIN_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
					    unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
					    void **extra)
{
	(void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)s;
	(void)params; (void)extra;
	return standin_work("cuLaunchKernel");
}
STANDIN_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
	(void)config; (void)f; (void)params; (void)extra;
	return standin_work("cuLaunchKernelEx");
}
STANDIN_EXPORT CUresult cuCtxSynchronize(void) { return standin_work("cuCtxSynchronize"); }
STANDIN_EXPORT CUresult cuStreamSynchronize(CUstream s) { (void)s; return standin_work("cuStreamSynchronize"); }
STANDIN_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { (void)s; return standin_work("cuStreamSynchronize"); }
