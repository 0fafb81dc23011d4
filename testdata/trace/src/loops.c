/*
 * Small functions of several instruction kinds (calls, loops, a jump
 * table, floating point, recursion, stores to globals, division, an
 * atomic), called in a loop: the trap tests probe every instruction of
 * them on each architecture and count the hits against the kernel's
 * uprobes. Usage: loops [N [T]] (100 rounds by default). With T threads,
 * each runs the N rounds, and the program prints only the atomic counter
 * (T*N: the other results race on the table). Built by the tests
 * (internal/fixture) with the Makefile's flags.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

unsigned long table[16];
static int counter;

__attribute__((noinline)) int leaf(int a, int b)
{
	return a * b + 7;
}

__attribute__((noinline)) unsigned long sum(const unsigned long *p, int n)
{
	unsigned long s = 0;

	for (int i = 0; i < n; i++)
		s += p[i];
	return s;
}

__attribute__((noinline)) int pick(int op, int x)
{
	switch (op) {
	case 0: return x + 1;
	case 1: return x * 3;
	case 2: return leaf(x, x);
	case 3: return x ^ 0x55;
	case 4: return x << 2;
	case 5: return leaf(x, 2);
	case 6: return -x;
	default: return 0;
	}
}

__attribute__((noinline)) double scale(double x, int k)
{
	return x * k / 3.0;
}

__attribute__((noinline)) int rec(int n)
{
	return n <= 0 ? 0 : 1 + rec(n - 1);
}

__attribute__((noinline)) void store(int i, unsigned long v)
{
	table[i & 15] += v;
}

__attribute__((noinline)) unsigned divmod(unsigned a, unsigned b)
{
	return a / b + a % b;
}

__attribute__((noinline)) int bump(void)
{
	return __atomic_add_fetch(&counter, 1, __ATOMIC_SEQ_CST);
}

static unsigned long rounds(int n)
{
	unsigned long acc = 0;

	for (int i = 0; i < n; i++) {
		acc += leaf(i, 3);
		store(i, acc);
		acc += sum(table, 16) & 0xffff;
		acc += pick(i & 7, i);
		acc += (unsigned long)scale(i, 5);
		acc += rec(i & 15);
		acc += divmod(i + 100, (i & 7) + 1);
		acc += bump();
	}
	return acc;
}

static void *worker(void *arg)
{
	rounds(*(int *)arg);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	int nthreads = argc > 2 ? atoi(argv[2]) : 0;
	pthread_t th[64];

	if (nthreads <= 0) {
		unsigned long acc = rounds(n);

		printf("%lu %d\n", acc, counter);
		return 0;
	}
	if (nthreads > 64)
		nthreads = 64;
	for (int i = 0; i < nthreads; i++)
		if (pthread_create(&th[i], NULL, worker, &n) != 0)
			return 1;
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	printf("%d\n", counter);
	return 0;
}
