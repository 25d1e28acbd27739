/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared machinery of the stand-in CUDA libraries: per-function latency and
 * result, configured from the environment or at run time.
 *
 * GPUSCOPE_STANDIN_LATENCY="cudaMalloc=200us,cudaStreamSynchronize=2ms:sleep"
 *   DURATION is a number with ns|us|ms|s; ":spin" (default) busy-waits on the
 *   CPU like a spinning synchronize, ":sleep" blocks in nanosleep.
 * GPUSCOPE_STANDIN_RESULT="cudaMalloc=2" makes a function return that code.
 * standin_set_latency()/standin_set_result() change them while running.
 */
#ifndef GPUSCOPE_STANDIN_COMMON_H
#define GPUSCOPE_STANDIN_COMMON_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STANDIN_MAX_FNS 64
#define STANDIN_EXPORT __attribute__((visibility("default"), noinline))

struct standin_fn {
	char name[48];
	volatile long latency_ns;
	volatile int sleep_mode;
	volatile int result;
};

static struct standin_fn standin_fns[STANDIN_MAX_FNS];
static int standin_nfns;

static struct standin_fn *standin_slot(const char *name, int create)
{
	for (int i = 0; i < standin_nfns; i++)
		if (strcmp(standin_fns[i].name, name) == 0)
			return &standin_fns[i];
	if (!create || standin_nfns >= STANDIN_MAX_FNS)
		return NULL;
	struct standin_fn *f = &standin_fns[standin_nfns];
	strncpy(f->name, name, sizeof(f->name) - 1);
	__atomic_store_n(&standin_nfns, standin_nfns + 1, __ATOMIC_RELEASE);
	return f;
}

static long standin_parse_ns(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	if (strncmp(end, "ns", 2) == 0)
		return (long)v;
	if (strncmp(end, "us", 2) == 0)
		return (long)(v * 1e3);
	if (strncmp(end, "ms", 2) == 0)
		return (long)(v * 1e6);
	if (*end == 's')
		return (long)(v * 1e9);
	return (long)v;
}

/* Parse "name=value[:mode],..." and apply `fn` to each entry. */
static void standin_parse(const char *spec, int is_result)
{
	if (!spec)
		return;
	char *copy = strdup(spec), *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq)
			continue;
		*eq = 0;
		struct standin_fn *f = standin_slot(tok, 1);
		if (!f)
			continue;
		if (is_result) {
			f->result = atoi(eq + 1);
		} else {
			char *mode = strchr(eq + 1, ':');
			f->sleep_mode = mode && strcmp(mode + 1, "sleep") == 0;
			f->latency_ns = standin_parse_ns(eq + 1);
		}
	}
	free(copy);
}

static uint64_t standin_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Simulate the call's cost; return its configured result code. */
static int standin_work(const char *name)
{
	struct standin_fn *f = standin_slot(name, 0);
	if (!f)
		return 0;
	long ns = f->latency_ns;
	if (ns > 0) {
		if (f->sleep_mode) {
			struct timespec ts = {ns / 1000000000l, ns % 1000000000l};
			while (nanosleep(&ts, &ts) != 0) {
			}
		} else {
			uint64_t end = standin_now() + (uint64_t)ns;
			while (standin_now() < end) {
			}
		}
	}
	return f->result;
}

STANDIN_EXPORT void standin_set_latency(const char *name, long ns, int sleep_mode)
{
	struct standin_fn *f = standin_slot(name, 1);
	if (f) {
		f->sleep_mode = sleep_mode;
		f->latency_ns = ns;
	}
}

STANDIN_EXPORT void standin_set_result(const char *name, int result)
{
	struct standin_fn *f = standin_slot(name, 1);
	if (f)
		f->result = result;
}

#endif
