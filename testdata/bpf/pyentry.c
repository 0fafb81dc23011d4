// pyentry: CPython's USDT probe python:function__entry as CPython's
// Include/pydtrace.h declares it (the code's file name, the function's
// name, the line number; a semaphore the interpreter tests before each
// hit), for the pyfunc example's test. "pyentry N THREADS" prints
// "ready", waits for a line on stdin, then in each thread N times
// "enters" the functions of a small script (main once, mid once, leaf
// twice, and a function of a library file whose name is longer than the
// example's 64-byte buffers), prints "done" and waits for the end of its
// input. The site is "nop; nop5", as newer <sys/sdt.h> emits it.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#undef _SDT_NOP
#define _SDT_NOP nop; .nops 5
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

__extension__ unsigned short python_function__entry_semaphore __attribute__((section(".probes")));

struct frame {
	const char *file, *func;
	int line;
};

static const struct frame script[] = {
	{"calls.py", "main", 20},
	{"calls.py", "mid", 13},
	{"calls.py", "leaf", 9},
	{"calls.py", "leaf", 9},
	{"/usr/lib/python3.11/site-packages/a/rather/long/package/path/module.py", "helper", 1234},
};

static long n;

__attribute__((noinline)) static void enter(const struct frame *f)
{
	if (python_function__entry_semaphore)
		STAP_PROBE3(python, function__entry, f->file, f->func, f->line);
}

static void *run(void *arg)
{
	(void)arg;
	for (long i = 0; i < n; i++)
		for (unsigned j = 0; j < sizeof script / sizeof script[0]; j++)
			enter(&script[j]);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	n = atol(argv[1]);
	int threads = atoi(argv[2]);
	char line[16];
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		return 3;
	pthread_t t[64];
	for (int i = 0; i < threads && i < 64; i++)
		pthread_create(&t[i], NULL, run, NULL);
	for (int i = 0; i < threads && i < 64; i++)
		pthread_join(t[i], NULL);
	printf("done\n");
	fflush(stdout);
	while (fgets(line, sizeof line, stdin))
		;
	return 0;
}
