/*
 * pause: the workload of "probeopt bench patch --patches": threads that
 * call NSITES generated functions (pausesites.S) in a loop while the
 * tracer patches them in bounded passes, and a thread that measures its
 * own worst stall.
 *
 *   pause THREADS
 *
 * Each of the THREADS workers calls every function in turn and counts the
 * results that are neither the old value (x + K) nor the patched one
 * (x + 64 + K). The stall thread, at the highest priority it can get,
 * reads CLOCK_MONOTONIC, sleeps 100 us and reads it again, forever, and
 * keeps the longest time it could not run beyond the sleep it asked for
 * (the tracer resets it by writing 0). At start the program prints the
 * line the command parses:
 *
 *   target base=0x... n=NSITES bad=0x... stall=0x...
 *
 * and then waits to be killed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern char pause_sites[];

static volatile long bad;   /* wrong results */
static volatile long worst; /* the stall thread's worst stall, in ns */

typedef long (*fn)(long);

static void *worker(void *arg)
{
	long x = (long)arg * 1000;
	for (;;) {
		for (long i = 0; i < NSITES; i++) {
			long d = ((fn)(pause_sites + 16 * i))(x) - x;
			long k = i & 63;
			if (d != k && d != 64 + k)
				__atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
			x = (x + 7) & 0xffff;
		}
	}
	return NULL;
}

static long now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void *staller(void *arg)
{
	(void)arg;
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), -20);
	const long period = 100000;
	struct timespec ts = {0, period};
	for (;;) {
		long t0 = now();
		nanosleep(&ts, NULL);
		long d = now() - t0 - period;
		if (d > worst)
			worst = d;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 2;
	if (threads < 1) {
		fprintf(stderr, "usage: pause THREADS\n");
		return 2;
	}
	pthread_t th;
	for (long t = 0; t < threads; t++)
		if (pthread_create(&th, NULL, worker, (void *)t) != 0)
			return 1;
	if (pthread_create(&th, NULL, staller, NULL) != 0)
		return 1;
	printf("target base=%p n=%d bad=%p stall=%p\n", (void *)pause_sites, NSITES, (void *)&bad, (void *)&worst);
	fflush(stdout);
	for (;;)
		pause();
}
