/* coexist: loads libcoexist.so (argv[1]) with dlopen and calls its
 * functions from two threads for argv[2] milliseconds, checking every
 * result against the same formula computed here. SIGUSR1 stops the calls
 * of cx_args (it prints "args off"), SIGUSR2 starts them again ("args
 * on"), SIGINT ends the calls before the time. At the end it prints how many times each function was called and
 * exits 0, or 3 at the first wrong result.
 *
 * "coexist LIB rec N K" calls cx_rec(N) K times instead (N+1 nested calls
 * each) and prints "rec N K ok". */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef long (*fn)(long);
static fn cx_push, cx_test, cx_args;
static volatile sig_atomic_t args_on = 1, toggled, stop;
static long deadline_ms;

struct counts { long push, test, args; };

static long now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fail(const char *f, long x, long got) {
	printf("bad %s(%ld) = %ld\n", f, x, got);
	fflush(stdout);
	_exit(3);
}

static void run(struct counts *c, long until) {
	for (long i = 0; !stop && now_ms() < until; i++) {
		for (int k = 0; k < 1000; k++, i++) {
			long x = i & 1023, r;
			if ((r = cx_push(x)) != 3 * x + 1) fail("cx_push", x, r);
			c->push++;
			if ((r = cx_test(x)) != (x ? x + 7 : 7)) fail("cx_test", x, r);
			c->test++;
			if (args_on) {
				if ((r = cx_args(x)) != x + 5) fail("cx_args", x, r);
				c->args++;
			}
		}
	}
}

static void *work(void *arg) {
	run(arg, deadline_ms);
	return NULL;
}

static void onsig(int s) { args_on = s == SIGUSR2; toggled = 1; }

static void onint(int s) { (void)s; stop = 1; }

int main(int argc, char **argv) {
	if (argc != 3 && !(argc == 5 && strcmp(argv[2], "rec") == 0)) {
		fprintf(stderr, "usage: coexist LIB MILLISECONDS | coexist LIB rec N K\n");
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "coexist: %s\n", dlerror());
		return 2;
	}
	cx_push = (fn)dlsym(h, "cx_push");
	cx_test = (fn)dlsym(h, "cx_test");
	cx_args = (fn)dlsym(h, "cx_args");
	if (!cx_push || !cx_test || !cx_args) {
		fprintf(stderr, "coexist: a function is missing\n");
		return 2;
	}
	if (argc == 5) {
		fn rec = (fn)dlsym(h, "cx_rec");
		long n = atol(argv[3]), k = atol(argv[4]);
		for (long i = 0; rec && i < k; i++)
			if (rec(n) != n) fail("cx_rec", n, rec(n));
		printf("rec %ld %ld %s\n", n, k, rec ? "ok" : "missing");
		return rec ? 0 : 3;
	}
	signal(SIGUSR1, onsig);
	signal(SIGUSR2, onsig);
	signal(SIGINT, onint);
	deadline_ms = now_ms() + atol(argv[2]);
	printf("started\n");
	fflush(stdout);
	struct counts c[2] = {{0}};
	pthread_t t;
	pthread_create(&t, NULL, work, &c[1]);
	/* The main thread reports the toggles as it works. */
	while (!stop && now_ms() < deadline_ms) {
		long stop = now_ms() + 5;
		run(&c[0], stop < deadline_ms ? stop : deadline_ms);
		if (toggled) {
			toggled = 0;
			printf("args %s\n", args_on ? "on" : "off");
			fflush(stdout);
		}
	}
	pthread_join(t, NULL);
	printf("calls cx_push %ld cx_test %ld cx_args %ld\n", c[0].push + c[1].push, c[0].test + c[1].test, c[0].args + c[1].args);
	return 0;
}
