/* CUDA Graph lifecycle on the stand-in runtime and driver.
 * Usage: graphs LAUNCHES RECAPTURES
 * Captures a graph, instantiates it and launches it LAUNCHES times; then
 * re-captures and re-instantiates RECAPTURES times (as on a batch-size
 * change), launching each new exec once. One driver capture at the end. */
#include <stdio.h>
#include <stdlib.h>

int cudaStreamBeginCapture(void *s, int mode);
int cudaStreamEndCapture(void *s, void **graph);
int cudaGraphInstantiate(void **exec, void *graph, unsigned long long flags);
int cudaGraphLaunch(void *exec, void *s);
int cudaGraphExecDestroy(void *e);
int cudaGraphDestroy(void *g);
int cuStreamBeginCapture_v2(void *s, int mode);
int cuStreamEndCapture(void *s, void **graph);
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
int cuGraphLaunch(void *exec, void *s);

int main(int argc, char **argv)
{
	long launches = argc > 1 ? atol(argv[1]) : 20;
	long recaptures = argc > 2 ? atol(argv[2]) : 3;
	void *stream = (void *)0x99, *graph = NULL, *exec = NULL;
	cudaStreamBeginCapture(stream, 0);
	cudaStreamEndCapture(stream, &graph);
	cudaGraphInstantiate(&exec, graph, 0);
	printf("graph %p exec %p\n", graph, exec);
	for (long i = 0; i < launches; i++)
		cudaGraphLaunch(exec, stream);
	for (long r = 0; r < recaptures; r++) {
		cudaGraphExecDestroy(exec);
		cudaGraphDestroy(graph);
		cudaStreamBeginCapture(stream, 2);
		cudaStreamEndCapture(stream, &graph);
		cudaGraphInstantiate(&exec, graph, 0);
		cudaGraphLaunch(exec, stream);
	}
	void *dg = NULL, *de = NULL;
	cuStreamBeginCapture_v2(stream, 1);
	cuStreamEndCapture(stream, &dg);
	cuGraphInstantiateWithFlags(&de, dg, 0);
	cuGraphLaunch(de, stream);
	printf("driver graph %p exec %p\n", dg, de);
	return 0;
}
