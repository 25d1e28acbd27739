/* One rank of a data-parallel job on the stand-in NCCL.
 * Usage: nccl_ranks STEPS      (RANK and WORLD_SIZE from the environment)
 * Per step: ncclAllReduce(1024 floats), a grouped ncclSend/ncclRecv with the
 * next/previous rank, and every 10th step an ncclBroadcast from rank 0.
 * SLOW_RANK=r makes rank r do ~2 ms of extra host work before each collective
 * (a straggler). HANG_RANK=r makes rank r's last allreduce never return
 * (for HANG_SECONDS, default 30). STEP_WORK_US=n makes every rank do n µs of host
 * work (CPU time: a rank kept off its CPU takes longer) before each allreduce; STEP_IDLE_US=n makes it
 * sleep n µs after each step (off-CPU, as a rank waiting on its GPU is). Prints "pid N rank R" first. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
int ncclGetUniqueId(ncclUniqueId *id);
int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, ncclComm_t c, void *stream);
int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, ncclComm_t c, void *stream);
int ncclSend(const void *b, size_t n, int dt, int peer, ncclComm_t c, void *stream);
int ncclRecv(void *b, size_t n, int dt, int peer, ncclComm_t c, void *stream);
int ncclGroupStart(void);
int ncclGroupEnd(void);
int ncclCommDestroy(ncclComm_t c);

/* Every stand-in exports standin_set_latency, and a plain call binds to the
 * first library linked (libcudart): take libnccl's own. */
static void nccl_set_latency(const char *name, long ns, int sleep_mode)
{
	void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
	void (*set)(const char *, long, int) = lib ? (void (*)(const char *, long, int))dlsym(lib, "standin_set_latency") : NULL;
	if (set)
		set(name, ns, sleep_mode);
}

static void spin_on(clockid_t clock, long ns)
{
	struct timespec a, b;
	clock_gettime(clock, &a);
	do
		clock_gettime(clock, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}

static void spin_ns(long ns) { spin_on(CLOCK_MONOTONIC, ns); }

int main(int argc, char **argv)
{
	long steps = argc > 1 ? atol(argv[1]) : 50;
	int rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
	int world = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
	int slow = getenv("SLOW_RANK") ? atoi(getenv("SLOW_RANK")) : -1;
	int hang = getenv("HANG_RANK") ? atoi(getenv("HANG_RANK")) : -1;
	long hang_s = getenv("HANG_SECONDS") ? atol(getenv("HANG_SECONDS")) : 30;
	long work_ns = getenv("STEP_WORK_US") ? atol(getenv("STEP_WORK_US")) * 1000L : 0;
	long idle_ns = getenv("STEP_IDLE_US") ? atol(getenv("STEP_IDLE_US")) * 1000L : 0;
	printf("pid %d rank %d\n", getpid(), rank);
	fflush(stdout);
	ncclUniqueId id;
	ncclComm_t comm;
	static float buf[1024];
	void *stream = (void *)0x77;
	ncclGetUniqueId(&id);
	if (ncclCommInitRank(&comm, world, id, rank) != 0)
		return 2;
	for (long i = 0; i < steps; i++) {
		if (rank == slow)
			spin_ns(2000000);
		if (work_ns)
			spin_on(CLOCK_THREAD_CPUTIME_ID, work_ns);
		if (rank == hang && i == steps - 1)
			nccl_set_latency("ncclAllReduce", hang_s * 1000000000L, 1);
		ncclAllReduce(buf, buf, 1024, 7 /* float32 */, 0 /* sum */, comm, stream);
		ncclGroupStart();
		ncclSend(buf, 256, 7, (rank + 1) % world, comm, stream);
		ncclRecv(buf, 256, 7, (rank + world - 1) % world, comm, stream);
		ncclGroupEnd();
		if (i % 10 == 0)
			ncclBroadcast(buf, buf, 64, 4 /* int64 */, 0, comm, stream);
		if (idle_ns) {
			struct timespec idle = {idle_ns / 1000000000L, idle_ns % 1000000000L};
			nanosleep(&idle, NULL);
		}
	}
	ncclCommDestroy(comm);
	return 0;
}
