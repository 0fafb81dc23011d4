/*
 * USDT probes through systemtap's <sys/sdt.h>, without semaphores (see
 * usdt_sema.c for probes with one). The arguments are chosen so that the
 * compiler writes each operand form: registers, immediates, memory through
 * a base register, through base and index, and RIP-relative globals.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

long counter = 41;
int table[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

void sema_probes(int n);

__attribute__((noinline)) static long work(const int *p, long i, char c, short s)
{
	long x = p[i] * 3 + c;

	DTRACE_PROBE(demo, noargs);
	STAP_PROBE1(demo, one_reg, x);
	STAP_PROBE2(demo, imm, 7, -1);
	STAP_PROBE3(demo, mixed, c, s, x);
	STAP_PROBE2(demo, indexed, p[i], table[i & 15]);
	STAP_PROBE1(demo, global, counter);
	STAP_PROBE6(demo, six, x, i, c, s, counter, p);
	counter += x;
	return x;
}

int main(int argc, char **argv)
{
	int v[8] = {0};
	long r = 0;

	for (int i = 0; i < argc; i++)
		v[i & 7] = atoi(argv[i]);
	for (long i = 0; i < 8; i++) {
		r += work(v, i, (char)argc, (short)i);
		STAP_PROBE2(demo, loop, i, r);
	}
	sema_probes(argc);
	printf("%ld\n", r);
	return 0;
}
