// The thread-scaling workload.
//
//   scale THREADS CALLS [signal | turns | RATE]
//
// starts THREADS threads that each call hot() and hot2() CALLS times and
// prints, per thread, its thread id, how often it called each and the CPU
// time of its loop (which other work on the machine does not inflate),
// then the time the calls took (untraced, this is the cost of the loop;
// traced, the loop plus the probe hits). hot and hot2 begin with a 5-byte NOP
// on x86-64 and a nop on aarch64, where a trampoline replaces nothing but
// the NOP.
//
// With "signal", a timer of each thread's own (timer_create, delivered
// to the thread) interrupts it every 100 us; the handler calls hot() too
// and counts, per thread, its calls and how often it interrupted the
// thread outside the program's own text
// (inside a probe's slot, when hot is probed by a trampoline: the loop
// runs nothing else outside the text). Each thread prints those counts.
//
// With "turns", the threads take turns: the k-th call of hot in the whole
// process, hot(k), is made by thread k % THREADS, after thread k-1 % THREADS
// made hot(k-1), so that the order of the calls across threads is known
// (hot2 is not called).
//
// With a RATE, each thread paces its loop to RATE iterations per second
// (sleeping every 1024 iterations until the next is due).
//
// With SCALE_STOP=1 in the environment, the process stops itself
// (SIGSTOP) once its threads exist and before they start, so that a
// tracer can count each thread's hits with kernel uprobes from the first;
// the threads start when it continues (SIGCONT).
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__x86_64__)
#define SITE_NOP ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00" // nopl 0x0(%rax,%rax,1)
#define SIGNAL_PC(uc) ((uc)->uc_mcontext.gregs[REG_RIP])
#else
#define SITE_NOP "nop"
#define SIGNAL_PC(uc) ((uc)->uc_mcontext.pc)
#endif

__attribute__((noinline)) long hot(long x) {
	__asm__ volatile(SITE_NOP ::: "memory");
	return x + 1;
}

__attribute__((noinline)) long hot2(long x) {
	__asm__ volatile(SITE_NOP ::: "memory");
	return x ^ 3;
}

extern char __executable_start[], etext[];

static long calls, rate;
static int with_signal, turns;
static long nthreads;
static volatile long turn; // the next call of hot in "turns"
static int stop_first;
static pthread_barrier_t start;
static __thread volatile long sig_calls, sig_outside;
static volatile long sink;

static void on_prof(int sig, siginfo_t *si, void *ctx) {
	(void)sig;
	(void)si;
	ucontext_t *uc = ctx;
	uintptr_t pc = (uintptr_t)SIGNAL_PC(uc);
	if (pc < (uintptr_t)__executable_start || pc >= (uintptr_t)etext)
		sig_outside++;
	sink += hot(-1);
	sig_calls++;
}

struct result {
	long idx, tid, calls, sig_calls, sig_outside;
	long long cpu_ns; // the thread's CPU time in its loop
};

static long long cpu_now(void) {
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

static void *worker(void *arg) {
	struct result *r = arg;
	long s = 0;
	timer_t timer;
	if (with_signal) {
		struct sigevent sev;
		memset(&sev, 0, sizeof sev);
		sev.sigev_notify = SIGEV_THREAD_ID;
		sev.sigev_signo = SIGPROF;
		sev.sigev_notify_thread_id = gettid();
		struct itimerspec its = {{0, 100000}, {0, 100000}};
		if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0 || timer_settime(timer, 0, &its, NULL) != 0) {
			perror("scale: timer");
			exit(1);
		}
	}
	if (stop_first)
		pthread_barrier_wait(&start);
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long long c0 = cpu_now();
	for (long i = 0; turns && i < calls; i++) {
		long k = i * nthreads + r->idx;
		for (int spins = 0; __atomic_load_n(&turn, __ATOMIC_ACQUIRE) != k; spins++)
			if (spins > 1000)
				sched_yield();
		s += hot(k);
		__atomic_store_n(&turn, k + 1, __ATOMIC_RELEASE);
	}
	for (long i = 0; !turns && i < calls; i++) {
		s += hot(i);
		s += hot2(i);
		if (rate > 0 && (i & 1023) == 1023) {
			// Sleep until the next call is due: the CPU stays free for
			// the tracer (a spin would take it on a small machine).
			long long due = (long long)t0.tv_sec * 1000000000LL + t0.tv_nsec + (long long)((double)(i + 1) * 1e9 / (double)rate);
			struct timespec d = {due / 1000000000LL, due % 1000000000LL};
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL) != 0) {
			}
		}
	}
	r->cpu_ns = cpu_now() - c0;
	if (with_signal)
		timer_delete(timer);
	sink += s;
	r->tid = gettid();
	r->calls = calls;
	r->sig_calls = sig_calls;
	r->sig_outside = sig_outside;
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: scale THREADS CALLS [signal | turns | RATE]\n");
		return 2;
	}
	int n = atoi(argv[1]);
	calls = atol(argv[2]);
	nthreads = n;
	with_signal = argc > 3 && strcmp(argv[3], "signal") == 0;
	turns = argc > 3 && strcmp(argv[3], "turns") == 0;
	if (argc > 3 && !with_signal && !turns)
		rate = atol(argv[3]);
	if (n < 1 || n > 1024 || calls < 0) {
		fprintf(stderr, "scale: bad arguments\n");
		return 2;
	}
	if (with_signal) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_sigaction = on_prof;
		sa.sa_flags = SA_SIGINFO | SA_RESTART;
		sigaction(SIGPROF, &sa, NULL);
	}
	pthread_t th[1024];
	struct result res[1024];
	struct timespec t0, t1;
	stop_first = getenv("SCALE_STOP") != NULL && strcmp(getenv("SCALE_STOP"), "1") == 0;
	if (stop_first)
		pthread_barrier_init(&start, NULL, n + 1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++) {
		res[i].idx = i;
		int err = pthread_create(&th[i], NULL, worker, &res[i]);
		if (err != 0) {
			fprintf(stderr, "scale: pthread_create: %s\n", strerror(err));
			return 1;
		}
	}
	if (stop_first) {
		raise(SIGSTOP);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		pthread_barrier_wait(&start);
	}
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	for (int i = 0; i < n; i++)
		printf("thread %ld calls %ld signal_calls %ld signal_outside %ld cpu_ns %lld\n", res[i].tid, res[i].calls, res[i].sig_calls,
		       res[i].sig_outside, res[i].cpu_ns);
	printf("elapsed_ns %lld\n", (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
	return 0;
}
