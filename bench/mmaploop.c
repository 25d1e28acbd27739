/* mmap + munmap in a loop, without MAP_FIXED: the path bpf/loads.bpf.c watches.
 * Usage: mmaploop N FILE. Prints "anon NS file NS": the cost of one pair,
 * anonymous and of FILE (private, read-only), in ns. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	int fd = open(argc > 2 ? argv[2] : "/etc/passwd", O_RDONLY);
	if (fd < 0)
		return 1;
	double a = now();
	for (long i = 0; i < n; i++) {
		void *p = mmap(0, 65536, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		munmap(p, 65536);
	}
	double b = now();
	for (long i = 0; i < n; i++) {
		void *p = mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
		munmap(p, 4096);
	}
	double c = now();
	printf("anon %.0f file %.0f\n", (b - a) / n * 1e9, (c - b) / n * 1e9);
	return 0;
}
