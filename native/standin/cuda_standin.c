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
/* Memsets: the synchronous ones are exported as _v2 (cuda.h maps cuMemsetD8
 * to cuMemsetD8_v2), the per-thread-stream twins as _v2_ptds and _ptsz. */
STANDIN_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n)
{
	(void)dst; (void)v; (void)n;
	return standin_work("cuMemsetD8");
}
STANDIN_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char v, size_t n)
{
	(void)dst; (void)v; (void)n;
	return standin_work("cuMemsetD8");
}
STANDIN_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short v, size_t n)
{
	(void)dst; (void)v; (void)n;
	return standin_work("cuMemsetD16");
}
STANDIN_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n)
{
	(void)dst; (void)v; (void)n;
	return standin_work("cuMemsetD32");
}
STANDIN_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
	(void)dst; (void)v; (void)n; (void)s;
	return standin_work("cuMemsetD8Async");
}
STANDIN_EXPORT CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s)
{
	(void)dst; (void)v; (void)n; (void)s;
	return standin_work("cuMemsetD16Async");
}
STANDIN_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s)
{
	(void)dst; (void)v; (void)n; (void)s;
	return standin_work("cuMemsetD32Async");
}
STANDIN_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int v, size_t n, CUstream s)
{
	(void)dst; (void)v; (void)n; (void)s;
	return standin_work("cuMemsetD32Async");
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

/* CUDA Graph driver twins. */
static uint64_t next_cugraph = 0x5a0000;
STANDIN_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode)
{
	(void)s; (void)mode;
	return standin_work("cuStreamBeginCapture");
}
STANDIN_EXPORT CUresult cuStreamEndCapture(CUstream s, void **graph)
{
	(void)s;
	int r = standin_work("cuStreamEndCapture");
	if (r == 0)
		*graph = (void *)__atomic_add_fetch(&next_cugraph, 0x100, __ATOMIC_RELAXED);
	return r;
}
STANDIN_EXPORT CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags)
{
	(void)flags;
	int r = standin_work("cuGraphInstantiate");
	if (r == 0)
		*exec = (void *)((uintptr_t)graph | 0x8);
	return r;
}
STANDIN_EXPORT CUresult cuGraphLaunch(void *exec, CUstream s) { (void)exec; (void)s; return standin_work("cuGraphLaunch"); }
STANDIN_EXPORT CUresult cuGraphExecUpdate_v2(void *exec, void *graph, void *info)
{
	(void)exec; (void)graph; (void)info;
	return standin_work("cuGraphExecUpdate");
}
STANDIN_EXPORT CUresult cuGraphDestroy(void *g) { (void)g; return standin_work("cuGraphDestroy"); }
STANDIN_EXPORT CUresult cuGraphExecDestroy(void *e) { (void)e; return standin_work("cuGraphExecDestroy"); }
