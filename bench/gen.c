/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The paced trigger for bench/drain: call getppid() CALLS_PER_SEC times a
 * second for DURATION_S seconds, pinned to CPU. Each call makes
 * producer.bpf.c emit a burst of records. Waits for one byte on stdin before
 * starting, so user space can register this pid with the producer first.
 *
 *   gen CALLS_PER_SEC DURATION_S [CPU]
 *
 * Pacing: wake every millisecond, catch up to rate * elapsed, sleep again.
 * Prints "calls=N elapsed_ns=T".
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s CALLS_PER_SEC DURATION_S [CPU]\n", argv[0]);
		return 2;
	}
	double rate = strtod(argv[1], NULL);
	double duration = strtod(argv[2], NULL);
	int cpu = argc > 3 ? atoi(argv[3]) : 0;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		perror("sched_setaffinity");

	char go;
	if (read(0, &go, 1) != 1)
		return 1;

	uint64_t total = (uint64_t)(rate * duration);
	uint64_t t0 = now_ns(), calls = 0;
	struct timespec tick = {0, 1000000};
	while (calls < total) {
		uint64_t due = (uint64_t)(rate * (double)(now_ns() - t0) / 1e9) + 1;
		if (due > total)
			due = total;
		while (calls < due) {
			syscall(SYS_getppid);
			calls++;
		}
		nanosleep(&tick, NULL);
	}
	printf("calls=%llu elapsed_ns=%llu\n", (unsigned long long)calls,
	       (unsigned long long)(now_ns() - t0));
	return 0;
}
