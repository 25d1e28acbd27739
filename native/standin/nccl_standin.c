/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A stand-in libnccl.so.2: the real names and C signatures of the NCCL calls
 * gpuscope probes. No GPU and no network: collectives take the configured
 * latency (standin_common.h). Communicators are small heap objects.
 */
#include <stddef.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include "standin_common.h"

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
/* With GPUSCOPE_STANDIN_NCCL_BARRIER=FILE, every collective waits until all
 * nranks ranks of the communicator have entered it, as real NCCL does (a
 * counter in FILE, shared by every rank that names it; the ranks may run in
 * separate traces). Without it, collectives do not wait for each other. */
struct standin_barrier { uint64_t count, generation; };
typedef struct standin_comm { int rank, nranks; struct standin_barrier *barrier; } *ncclComm_t;
typedef void *cudaStream_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef struct { size_t size; unsigned magic, version; int blocking; } ncclConfig_t;

__attribute__((constructor)) static void standin_init(void)
{
	standin_parse(getenv("GPUSCOPE_STANDIN_LATENCY"), 0);
	standin_parse(getenv("GPUSCOPE_STANDIN_RESULT"), 1);
}

STANDIN_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	for (int i = 0; i < 128; i++)
		id->internal[i] = (char)(i * 7 + 1);
	return 0;
}

static struct standin_barrier *barrier_map(void)
{
	const char *path = getenv("GPUSCOPE_STANDIN_NCCL_BARRIER");
	if (!path || !*path)
		return NULL;
	int fd = open(path, O_RDWR | O_CREAT, 0600);
	if (fd < 0 || ftruncate(fd, sizeof(struct standin_barrier)) != 0)
		return NULL;
	void *p = mmap(NULL, sizeof(struct standin_barrier), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

/* A sense-reversing barrier: the last rank in resets the count, then opens the generation. */
static void barrier_wait(ncclComm_t comm)
{
	struct standin_barrier *b = comm ? comm->barrier : NULL;
	if (!b || comm->nranks < 2)
		return;
	uint64_t gen = __atomic_load_n(&b->generation, __ATOMIC_ACQUIRE);
	if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == (uint64_t)comm->nranks) {
		__atomic_store_n(&b->count, 0, __ATOMIC_RELEASE);
		__atomic_add_fetch(&b->generation, 1, __ATOMIC_ACQ_REL);
		return;
	}
	struct timespec nap = {0, 20000};
	while (__atomic_load_n(&b->generation, __ATOMIC_ACQUIRE) == gen)
		nanosleep(&nap, NULL);
}

static ncclResult_t init(const char *name, ncclComm_t *comm, int nranks, int rank)
{
	int r = standin_work(name);
	if (r == 0) {
		*comm = malloc(sizeof(**comm));
		(*comm)->rank = rank;
		(*comm)->nranks = nranks;
		(*comm)->barrier = barrier_map();
	}
	return r;
}

STANDIN_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	(void)id;
	return init("ncclCommInitRank", comm, nranks, rank);
}
STANDIN_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
						   ncclConfig_t *config)
{
	(void)id; (void)config;
	return init("ncclCommInitRankConfig", comm, nranks, rank);
}
STANDIN_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) { free(comm); return standin_work("ncclCommDestroy"); }
STANDIN_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) { free(comm); return standin_work("ncclCommAbort"); }
STANDIN_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) { *count = comm->nranks; return 0; }
STANDIN_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) { *rank = comm->rank; return 0; }

STANDIN_EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t dt, ncclRedOp_t op,
					  ncclComm_t comm, cudaStream_t stream)
{
	(void)s; (void)r; (void)count; (void)dt; (void)op; (void)comm; (void)stream;
	barrier_wait(comm);
	return standin_work("ncclAllReduce");
}
STANDIN_EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t count, ncclDataType_t dt, ncclRedOp_t op,
				       int root, ncclComm_t comm, cudaStream_t stream)
{
	(void)s; (void)r; (void)count; (void)dt; (void)op; (void)root; (void)comm; (void)stream;
	barrier_wait(comm);
	return standin_work("ncclReduce");
}
STANDIN_EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t count, ncclDataType_t dt, int root,
					  ncclComm_t comm, cudaStream_t stream)
{
	(void)s; (void)r; (void)count; (void)dt; (void)root; (void)comm; (void)stream;
	barrier_wait(comm);
	return standin_work("ncclBroadcast");
}
STANDIN_EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t count, ncclDataType_t dt, ncclComm_t comm,
					  cudaStream_t stream)
{
	(void)s; (void)r; (void)count; (void)dt; (void)comm; (void)stream;
	barrier_wait(comm);
	return standin_work("ncclAllGather");
}
STANDIN_EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t count, ncclDataType_t dt,
					      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	(void)s; (void)r; (void)count; (void)dt; (void)op; (void)comm; (void)stream;
	barrier_wait(comm);
	return standin_work("ncclReduceScatter");
}
STANDIN_EXPORT ncclResult_t ncclSend(const void *b, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
				     cudaStream_t stream)
{
	(void)b; (void)count; (void)dt; (void)peer; (void)comm; (void)stream;
	return standin_work("ncclSend");
}
STANDIN_EXPORT ncclResult_t ncclRecv(void *b, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
				     cudaStream_t stream)
{
	(void)b; (void)count; (void)dt; (void)peer; (void)comm; (void)stream;
	return standin_work("ncclRecv");
}
STANDIN_EXPORT ncclResult_t ncclGroupStart(void) { return standin_work("ncclGroupStart"); }
STANDIN_EXPORT ncclResult_t ncclGroupEnd(void) { return standin_work("ncclGroupEnd"); }
