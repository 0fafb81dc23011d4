/* Switch statements of several shapes, each case exercised, for the jump
 * table recovery of package plan. The test builds this file with gcc and
 * clang, -O2 and -Os, PIE (tables of offsets) and non-PIE (tables of
 * addresses), and compares the tables it recovers with the targets the CPU
 * takes at every indirect jump. Every value of each switch's range is
 * passed, the gaps too, so every table entry runs. Each case calls a
 * function of its own, so that no compiler turns the switch into a lookup
 * of values.
 *
 *   gcc -O2 -Wall -fno-pie -no-pie -o switches switches.c
 */
#include <stdio.h>

#define H(n) __attribute__((noinline)) long h##n(long x) { __asm__ volatile("" : "+r"(x)); return x * (n) + (n); }
H(0) H(1) H(2) H(3) H(4) H(5) H(6) H(7) H(8) H(9) H(10) H(11) H(12) H(13) H(14) H(15) H(16) H(17)

/* dense: cases 0-9. */
__attribute__((noinline)) long dense(int v, long x)
{
	switch (v) {
	case 0: return h0(x);
	case 1: return h1(x);
	case 2: return h2(x);
	case 3: return h3(x);
	case 4: return h4(x);
	case 5: return h5(x);
	case 6: return h6(x);
	case 7: return h7(x);
	case 8: return h8(x);
	case 9: return h9(x);
	}
	return h17(x);
}

/* offset: cases 100-111, the index shifted first. */
__attribute__((noinline)) long offset(int v, long x)
{
	switch (v) {
	case 100: return h10(x);
	case 101: return h11(x);
	case 102: return h12(x);
	case 103: return h13(x);
	case 104: return h14(x);
	case 105: return h15(x);
	case 106: return h16(x);
	case 107: return h0(x + 1);
	case 108: return h1(x + 2);
	case 109: return h2(x + 3);
	case 110: return h3(x + 4);
	case 111: return h4(x + 5);
	}
	return h17(x + 1);
}

/* sparse: gaps in the range lead to the default. */
__attribute__((noinline)) long sparse(unsigned v, long x)
{
	switch (v) {
	case 1: return h1(x);
	case 3: return h3(x);
	case 4: return h4(x);
	case 7: return h7(x);
	case 8: return h8(x);
	case 12: return h12(x);
	case 13: return h13(x);
	case 15: return h15(x);
	case 20: return h2(x);
	case 21: return h5(x);
	}
	return h17(x + 2);
}

/* bytes: a switch on a byte loaded from memory. */
__attribute__((noinline)) long bytes(const unsigned char *p, long x)
{
	switch (*p) {
	case 'a': return h1(x);
	case 'e': return h2(x);
	case 'i': return h3(x);
	case 'o': return h4(x);
	case 'u': return h5(x);
	case 'y': return h6(x);
	case 'b': return h7(x);
	case 'c': return h8(x);
	case 'd': return h9(x);
	}
	return h17(x + 3);
}

/* run: an interpreter loop, a switch per byte of code. */
__attribute__((noinline)) long run(const unsigned char *code, long x)
{
	for (;;) {
		switch (*code++) {
		case 0: x = h0(x); break;
		case 1: x = h1(x); break;
		case 2: x = h2(x); break;
		case 3: x = h3(x); break;
		case 4: x = h4(x); break;
		case 5: x = h5(x); break;
		case 6: x = h6(x); break;
		case 7: return x;
		default: x = h17(x); break;
		}
	}
}

/* two: two switches in one function. */
__attribute__((noinline)) long two(int a, int b, long x)
{
	switch (a) {
	case 0: x = h0(x); break;
	case 1: x = h1(x); break;
	case 2: x = h2(x); break;
	case 3: x = h3(x); break;
	case 4: x = h4(x); break;
	case 5: x = h5(x); break;
	}
	switch (b) {
	case 10: return h10(x);
	case 11: return h11(x);
	case 12: return h12(x);
	case 13: return h13(x);
	case 14: return h14(x);
	case 15: return h15(x);
	case 16: return h16(x);
	}
	return x;
}

/* viahook: a tail call through a pointer loaded from memory. */
long (*hook)(long) = h5;
__attribute__((noinline)) long viahook(long x)
{
	return hook(x + 1);
}

/* computed: a computed goto through a pointer loaded from memory, to its
 * own labels, whose addresses its table holds: a jump through a pointer
 * that lands inside the function. */
void *volatile next;
__attribute__((noinline)) long computed(const unsigned char *code, long x)
{
	static void *const labels[] = {&&add, &&mul, &&out};
	next = labels[*code++];
	goto *next;
add:
	x = h1(x);
	next = labels[*code++];
	goto *next;
mul:
	x = h2(x);
	next = labels[*code++];
	goto *next;
out:
	return x;
}

int main(void)
{
	long sum = 0;
	for (int v = -2; v <= 11; v++)
		sum += dense(v, v);
	for (int v = 98; v <= 113; v++)
		sum += offset(v, v);
	for (unsigned v = 0; v <= 23; v++)
		sum += sparse(v, v);
	for (int c = 0; c < 256; c++) {
		unsigned char b = c;
		sum += bytes(&b, c);
	}
	static const unsigned char code[] = {0, 1, 2, 3, 4, 5, 6, 8, 9, 200, 7};
	sum += run(code, 1);
	for (int a = -1; a <= 6; a++)
		for (int b = 9; b <= 17; b++)
			sum += two(a, b, a + b);
	sum += viahook(3);
	static const unsigned char prog[] = {0, 1, 0, 1, 2};
	sum += computed(prog, 5);
	printf("%ld\n", sum);
	return 0;
}
