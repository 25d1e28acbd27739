/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuscope's calibration library: what one probed call costs on this machine.
 *
 * The kernel handles a uprobe in one of two ways, by the probed function's
 * first instruction: it emulates a few (push of a register: the frame-pointer
 * prologue `push %rbp` of libcudart) and single-steps the rest out of line,
 * which costs about four times as much. gs_calib_emulated and
 * gs_calib_stepped begin with one of each; gs_calib_loop calls one of them N
 * times and returns the nanoseconds the calls took, so the agent can time
 * them with and without its probes attached (gpuscope.agent.calibration).
 */
#include <stdint.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

__attribute__((visibility("hidden"))) volatile uint64_t gs_calib_sink;

#if defined(__x86_64__)
/* Written in assembly so that the first instruction is the one named. */
__asm__(".text\n"
	".globl gs_calib_emulated\n"
	".type gs_calib_emulated, @function\n"
	"gs_calib_emulated:\n"
	"  push %rbp\n"
	"  mov %rsp, %rbp\n"
	"  pop %rbp\n"
	"  ret\n"
	".size gs_calib_emulated, .-gs_calib_emulated\n"
	".globl gs_calib_stepped\n"
	".type gs_calib_stepped, @function\n"
	"gs_calib_stepped:\n"
	"  lea gs_calib_sink(%rip), %rax\n"
	"  ret\n"
	".size gs_calib_stepped, .-gs_calib_stepped\n");
#else
/* Other architectures: the kernel's choice does not follow this pattern;
 * both functions are ordinary ones. */
EXPORT __attribute__((noinline)) void gs_calib_emulated(void) { __asm__ volatile("" ::: "memory"); }
EXPORT __attribute__((noinline)) void gs_calib_stepped(void) { gs_calib_sink++; }
#endif

void gs_calib_emulated(void);
void gs_calib_stepped(void);

EXPORT uint64_t gs_calib_loop(int stepped, uint64_t n)
{
	void (*volatile fn)(void) = stepped ? gs_calib_stepped : gs_calib_emulated;
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (uint64_t i = 0; i < n; i++)
		fn();
	clock_gettime(CLOCK_MONOTONIC, &b);
	return (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull + (uint64_t)(b.tv_nsec - a.tv_nsec);
}
