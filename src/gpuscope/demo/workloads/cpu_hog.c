/* A CPU hog for the demo's contention scenarios.
 * Usage: cpu_hog [BUSY_US IDLE_US]: spin forever, or spin BUSY_US then sleep
 * IDLE_US in a loop (a bursty neighbour such as log rotation or compression).
 * It exits once its parent is gone: a demo killed with SIGKILL cannot stop its
 * hogs, and a hog that outlived it would spin on CPU 0 for good. */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

int main(int argc, char **argv)
{
	long busy = argc > 2 ? atol(argv[1]) : 0;
	long idle = argc > 2 ? atol(argv[2]) : 0;
	volatile unsigned long x = 0;
	pid_t parent = getppid();
	while (getppid() == parent) {
		long end = now_us() + (busy > 0 ? busy : 1000000);
		while (now_us() < end)
			x++;
		if (idle > 0)
			usleep((useconds_t)idle);
	}
	return 0;
}
