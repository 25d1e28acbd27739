/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A stand-in libcudart.so.12: the real exported names and C signatures of the
 * CUDA Runtime API calls gpuscope probes, with configurable latency and
 * result (standin_common.h). No GPU involved. With GPUSCOPE_STANDIN_NEST=1,
 * allocation, copy and launch calls forward to the stand-in libcuda.so.1 like
 * the real runtime does, so nested runtime -> driver calls can be tested.
 */
#include <dlfcn.h>

/*
 * dlopen and dlsym bound to the versions glibc has always had. glibc 2.34 moved
 * them into libc.so.6 under a new version (GLIBC_2.34), and a library that names
 * that version does not load under an older glibc: the wheel would need
 * manylinux_2_34 for these two calls alone. The old versions are still in
 * libc.so.6 here; on RHEL 8 (2.28) or Ubuntu 20.04 (2.31) libdl.so.2 has them,
 * which is why the library names libdl.so.2 as needed (-l:libdl.so.2, --no-as-needed).
 */
#if defined(__x86_64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
#endif
#include <stddef.h>
#include "standin_common.h"

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef struct { unsigned int x, y, z; } dim3;
typedef struct {
	dim3 gridDim;
	dim3 blockDim;
	size_t dynamicSmemBytes;
	cudaStream_t stream;
	void *attrs;
	unsigned int numAttrs;
} cudaLaunchConfig_t;

static uintptr_t next_ptr = 0x7f0000000000ull;
static int (*drv_alloc)(uint64_t *, size_t);
static int (*drv_free)(uint64_t);
static int (*drv_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			 unsigned, void *, void **, void **);

__attribute__((constructor)) static void standin_init(void)
{
	standin_parse(getenv("GPUSCOPE_STANDIN_LATENCY"), 0);
	standin_parse(getenv("GPUSCOPE_STANDIN_RESULT"), 1);
	const char *nest = getenv("GPUSCOPE_STANDIN_NEST");
	if (nest && *nest == '1') {
		void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
		if (h) {
			drv_alloc = dlsym(h, "cuMemAlloc_v2");
			drv_free = dlsym(h, "cuMemFree_v2");
			drv_launch = dlsym(h, "cuLaunchKernel");
		}
	}
}

static void *fresh_ptr(size_t size)
{
	uintptr_t p = __atomic_fetch_add(&next_ptr, (size + 0xfff) & ~0xfffull, __ATOMIC_RELAXED);
	return (void *)p;
}

STANDIN_EXPORT cudaError_t cudaGetDeviceCount(int *count) { *count = 1; return standin_work("cudaGetDeviceCount"); }
STANDIN_EXPORT cudaError_t cudaGetLastError(void) { return 0; }
STANDIN_EXPORT const char *cudaGetErrorString(cudaError_t e) { return e ? "stand-in error" : "no error"; }

STANDIN_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	if (drv_alloc) {
		uint64_t d;
		drv_alloc(&d, size);
	}
	int r = standin_work("cudaMalloc");
	if (r == 0)
		*devPtr = fresh_ptr(size);
	return r;
}
STANDIN_EXPORT cudaError_t cudaFree(void *devPtr)
{
	if (drv_free)
		drv_free((uint64_t)devPtr);
	return standin_work("cudaFree");
}
STANDIN_EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	(void)flags;
	int r = standin_work("cudaMallocManaged");
	if (r == 0)
		*devPtr = fresh_ptr(size);
	return r;
}
STANDIN_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	int r = standin_work("cudaMallocHost");
	if (r == 0)
		*ptr = fresh_ptr(size);
	return r;
}
STANDIN_EXPORT cudaError_t cudaFreeHost(void *ptr) { (void)ptr; return standin_work("cudaFreeHost"); }
STANDIN_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, int kind)
{
	(void)dst; (void)src; (void)count; (void)kind;
	return standin_work("cudaMemcpy");
}
STANDIN_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind, cudaStream_t s)
{
	(void)dst; (void)src; (void)count; (void)kind; (void)s;
	return standin_work("cudaMemcpyAsync");
}
STANDIN_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, int kind, cudaStream_t s)
{
	(void)dst; (void)src; (void)count; (void)kind; (void)s;
	return standin_work("cudaMemcpyAsync");
}
STANDIN_EXPORT cudaError_t cudaMemset(void *p, int v, size_t count) { (void)p; (void)v; (void)count; return standin_work("cudaMemset"); }
STANDIN_EXPORT cudaError_t cudaMemsetAsync(void *p, int v, size_t count, cudaStream_t s)
{
	(void)p; (void)v; (void)count; (void)s;
	return standin_work("cudaMemsetAsync");
}
STANDIN_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
					   cudaStream_t stream)
{
	if (drv_launch)
		drv_launch((void *)func, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shmem, stream,
			   args, NULL);
	return standin_work("cudaLaunchKernel");
}
STANDIN_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args,
						size_t shmem, cudaStream_t stream)
{
	(void)func; (void)grid; (void)block; (void)args; (void)shmem; (void)stream;
	return standin_work("cudaLaunchKernel");
}
STANDIN_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	(void)config; (void)func; (void)args;
	return standin_work("cudaLaunchKernelExC");
}
STANDIN_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return standin_work("cudaStreamSynchronize"); }
STANDIN_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { (void)s; return standin_work("cudaStreamSynchronize"); }
STANDIN_EXPORT cudaError_t cudaDeviceSynchronize(void) { return standin_work("cudaDeviceSynchronize"); }
STANDIN_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return standin_work("cudaEventSynchronize"); }
STANDIN_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
	(void)s; (void)e; (void)flags;
	return standin_work("cudaStreamWaitEvent");
}

/* CUDA Graph entry points (CUDA 12 signatures). */
typedef void *cudaGraph_t;
typedef void *cudaGraphExec_t;
static uintptr_t next_graph = 0x6a0000;

STANDIN_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode)
{
	(void)s; (void)mode;
	return standin_work("cudaStreamBeginCapture");
}
STANDIN_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph)
{
	(void)s;
	int r = standin_work("cudaStreamEndCapture");
	if (r == 0)
		*graph = (cudaGraph_t)__atomic_add_fetch(&next_graph, 0x100, __ATOMIC_RELAXED);
	return r;
}
STANDIN_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
	(void)flags;
	int r = standin_work("cudaGraphInstantiate");
	if (r == 0)
		*exec = (cudaGraphExec_t)((uintptr_t)graph | 0x8);
	return r;
}
STANDIN_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
							 unsigned long long flags)
{
	return cudaGraphInstantiate(exec, graph, flags);
}
STANDIN_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
	(void)exec; (void)s;
	return standin_work("cudaGraphLaunch");
}
STANDIN_EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, void *info)
{
	(void)exec; (void)graph; (void)info;
	return standin_work("cudaGraphExecUpdate");
}
STANDIN_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t g) { (void)g; return standin_work("cudaGraphDestroy"); }
STANDIN_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { (void)e; return standin_work("cudaGraphExecDestroy"); }
