/*
 * Driver of the arm64 trampoline tests: calls probed() N times (in the
 * main thread, or in T threads each) and prints the results, then writes
 * the probes' data area to a file.
 *
 * usage: prog DATAFILE [THREADS]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define N 1000

uint64_t probed(uint64_t x);

/* The data area of the probes: page-aligned, in the file (not .bss) so
 * that the test writes its header into the image. */
__attribute__((section(".data.probes"), aligned(4096))) unsigned char probe_data[1048576];

static void *worker(void *arg)
{
	uint64_t s = 0;
	for (uint64_t i = 0; i < N; i++)
		s = s * 31 + probed(i);
	*(uint64_t *)arg = s;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s DATAFILE [THREADS]\n", argv[0]);
		return 2;
	}
	int threads = argc > 2 ? atoi(argv[2]) : 0;
	if (threads <= 0) {
		for (uint64_t i = 0; i < N; i++)
			printf("%llu %llu\n", (unsigned long long)i, (unsigned long long)probed(i));
	} else {
		pthread_t t[64];
		uint64_t sums[64];
		if (threads > 64)
			threads = 64;
		for (int i = 0; i < threads; i++)
			if (pthread_create(&t[i], NULL, worker, &sums[i]) != 0)
				return 3;
		for (int i = 0; i < threads; i++) {
			pthread_join(t[i], NULL);
			printf("thread %d %llu\n", i, (unsigned long long)sums[i]);
		}
	}
	FILE *f = fopen(argv[1], "wb");
	if (f == NULL || fwrite(probe_data, 1, sizeof probe_data, f) != sizeof probe_data || fclose(f) != 0)
		return 4;
	return 0;
}
