// The USDT workload of the end-to-end BPF tests: once a line arrives on
// stdin, "usdtwork N THREADS" runs N rounds in each of THREADS threads,
// each round hitting USDT probes whose arguments are constants,
// registers of every size and sign, memory off %rbp and off %rsp (in the
// red zone), a rip-relative symbol (which libbpf's usdt.bpf.h does not
// read) and a probe with a semaphore, all values functions of the round
// number modulo 8; then it prints "done" and waits for the end of its
// input. It prints "ready" first, so that the probes are attached before
// the rounds start; with a third argument "now" it reads no input.
//
// The sites are "nop; nop5", what newer <sys/sdt.h> emits: a 6-byte run
// of NOPs that a trampoline can replace (after the site's own nop, the
// note's address, as libbpf finds it).
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#undef _SDT_NOP
#define _SDT_NOP nop; .nops 5
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define SEMAPHORE(provider, name) \
	__extension__ unsigned short provider##_##name##_semaphore \
		__attribute__((unused)) __attribute__((section(".probes")))
SEMAPHORE(usdtwork, regs);
SEMAPHORE(usdtwork, consts);
SEMAPHORE(usdtwork, mem);
SEMAPHORE(usdtwork, global);
SEMAPHORE(usdtwork, guarded);

static long n;
long global_counter;
signed char gsc = -3;

__attribute__((noinline)) void regs(long k)
{
	signed char c = (signed char)(-100 - k);
	unsigned char uc = (unsigned char)(200 + k);
	short s = (short)(-1000 - k);
	unsigned short us = (unsigned short)(60000 + k);
	int x = (int)(-100000 - k);
	unsigned int ux = (unsigned int)(4000000000u + k);
	long l = -5000000000L - k;
	unsigned long ul = 0xfedcba9876543210UL + k;
	STAP_PROBE8(usdtwork, regs, c, uc, s, us, x, ux, l, ul);
}

__attribute__((noinline)) void consts(void)
{
	STAP_PROBE4(usdtwork, consts, 5, -1, 70000, -9);
}

__attribute__((noinline, optimize("no-omit-frame-pointer"))) void frame(long k)
{
	volatile int a = (int)(-7 - k);
	volatile long b = 123456789L * k;
	volatile short c = (short)(k - 4);
	STAP_PROBE3(usdtwork, mem, a, b, c);
}

__attribute__((noinline, optimize("omit-frame-pointer"))) void noframe(long k)
{
	volatile int a = (int)(-70 - k);
	volatile long b = -123456789L * k;
	volatile short c = (short)(k - 40);
	STAP_PROBE3(usdtwork, mem, a, b, c);
}

__attribute__((noinline)) void global(long k)
{
	global_counter = k;
	STAP_PROBE2(usdtwork, global, global_counter, gsc);
}

__attribute__((noinline)) void guarded(long k)
{
	if (usdtwork_guarded_semaphore)
		STAP_PROBE2(usdtwork, guarded, k, (int)usdtwork_guarded_semaphore);
}

static void *run(void *arg)
{
	(void)arg;
	for (long i = 0; i < n; i++) {
		long k = i % 8;
		regs(k);
		consts();
		frame(k);
		noframe(k);
		global(k);
		guarded(k);
	}
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
	int now = argc > 3 && argv[3][0] == 'n';
	if (!now && !fgets(line, sizeof line, stdin))
		return 3;
	pthread_t t[64];
	for (int i = 0; i < threads && i < 64; i++)
		pthread_create(&t[i], NULL, run, NULL);
	for (int i = 0; i < threads && i < 64; i++)
		pthread_join(t[i], NULL);
	printf("done\n");
	fflush(stdout);
	while (!now && fgets(line, sizeof line, stdin))
		;
	return 0;
}
