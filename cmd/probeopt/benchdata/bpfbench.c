// The workload of "probeopt bench bpf".
//
//   bpfbench FUNC THREADS CALLS
//
// prints "ready", waits for a line on stdin (the probes are attached
// meanwhile), then starts THREADS threads that each call FUNC (emulated
// or stepped) CALLS times with the loop index as its argument, and prints
// per thread "cpu_ns N", the CPU time of its loop, then "elapsed_ns N".
// emulated() begins with push %rbp, an instruction Linux's uprobes
// emulate at the int3; stepped() with mov %rdi,%rax, which they
// single-step out of line.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__attribute__((naked, noinline)) long emulated(long x)
{
	__asm__ volatile("push %rbp\n\tmov %rsp,%rbp\n\tlea 1(%rdi),%rax\n\tpop %rbp\n\tret\n");
}

__attribute__((naked, noinline)) long stepped(long x)
{
	__asm__ volatile("mov %rdi,%rax\n\tadd $1,%rax\n\tnop\n\tnop\n\tret\n");
}

static long calls;
static long (*fn)(long);
static pthread_barrier_t start;
static volatile long sink;

static long long now(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *run(void *arg)
{
	long long *cpu = arg;
	pthread_barrier_wait(&start);
	long long c0 = now(CLOCK_THREAD_CPUTIME_ID);
	long s = 0;
	for (long i = 0; i < calls; i++)
		s += fn(i);
	*cpu = now(CLOCK_THREAD_CPUTIME_ID) - c0;
	sink = s;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	fn = strcmp(argv[1], "stepped") == 0 ? stepped : emulated;
	int threads = atoi(argv[2]);
	calls = atol(argv[3]);
	if (threads < 1 || threads > 64)
		return 2;
	char line[16];
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		return 3;
	pthread_t t[64];
	long long cpu[64];
	pthread_barrier_init(&start, NULL, threads + 1);
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, run, &cpu[i]);
	long long e0 = now(CLOCK_MONOTONIC);
	pthread_barrier_wait(&start);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	long long elapsed = now(CLOCK_MONOTONIC) - e0;
	for (int i = 0; i < threads; i++)
		printf("cpu_ns %lld\n", cpu[i]);
	printf("elapsed_ns %lld\n", elapsed);
	return 0;
}
