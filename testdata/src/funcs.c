/*
 * A few ordinary functions, built with several sets of flags (see the
 * Makefile): PIE and not, stripped and not, with a nop5 at every entry
 * (-pg -mfentry -mnop-mcount, which gcc allows only without PIC), and with CET (-fcf-protection).
 */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int leaf(int a, int b)
{
	return a * b + 7;
}

int leaf_alias(int a, int b) __attribute__((weak, alias("leaf")));

__attribute__((noinline)) long sum(const long *p, int n)
{
	long s = 0;

	for (int i = 0; i < n; i++)
		s += p[i];
	return s;
}

__attribute__((noinline)) static int helper(int x)
{
	return x > 3 ? leaf(x, x) : x - 1;
}

__attribute__((noinline)) int dispatch(int op, int x)
{
	switch (op) {
	case 0: return x + 1;
	case 1: return x * 3;
	case 2: return helper(x);
	case 3: return x ^ 0x55;
	case 4: return x << 2;
	case 5: return leaf(x, 2);
	case 6: return -x;
	default: return 0;
	}
}

int main(int argc, char **argv)
{
	long v[4] = {argc, 2, 3, 4};
	int r = dispatch(argc, (int)sum(v, 4));

	if (argc > 1)
		r += atoi(argv[1]);
	printf("%d\n", helper(r));
	return 0;
}
