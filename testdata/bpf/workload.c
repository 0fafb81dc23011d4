// The deterministic workload of the end-to-end BPF tests: once a line
// arrives on stdin, "workload N THREADS" calls work(i % 37, i * i) and
// allocates (i % 100) * 13 + 1 bytes, N times in each of THREADS
// threads, then prints "done" and exits. It prints "ready" first, so
// that the probes are attached before the workload starts; with a third
// argument "now" it does not wait for the line. Without "now" it waits
// for the end of its input before it exits (the tests read its mappings
// meanwhile). Built with frame pointers, for the user stacks.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static long n;

__attribute__((noinline)) long mix(long v)
{
	__asm__ volatile("" ::: "memory");
	return v % 11;
}

// work calls mix, so that it has a frame: it starts with push %rbp.
__attribute__((noinline)) long work(long key, long value)
{
	long r = mix(key * 7 + value);
	__asm__ volatile("" : "+r"(r)); // no tail call
	return r;
}

static void *run(void *arg)
{
	(void)arg;
	long sum = 0;
	for (long i = 0; i < n; i++) {
		sum += work(i % 37, i * i);
		void *volatile p = malloc((size_t)(i % 100) * 13 + 1);
		free(p);
	}
	return (void *)sum;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	n = atol(argv[1]);
	int threads = atoi(argv[2]);
	char line[16];
	// stdin's buffer is static: a buffer fgets allocated would be a
	// malloc racing with the attach that "ready" starts.
	static char inbuf[BUFSIZ];
	setvbuf(stdin, inbuf, _IOFBF, sizeof inbuf);
	printf("ready\n");
	fflush(stdout);
	if ((argc < 4 || argv[3][0] != 'n') && !fgets(line, sizeof line, stdin))
		return 3;
	pthread_t t[64];
	for (int i = 0; i < threads && i < 64; i++)
		pthread_create(&t[i], NULL, run, NULL);
	for (int i = 0; i < threads && i < 64; i++)
		pthread_join(t[i], NULL);
	printf("done\n");
	fflush(stdout);
	if (argc < 4 || argv[3][0] != 'n')
		while (fgets(line, sizeof line, stdin))
			;
	return 0;
}
