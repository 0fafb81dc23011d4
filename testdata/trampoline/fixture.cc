// The traced fixture of the trampoline tests (trampoline/fixture_linux_amd64_test.go).
//
// It prints the addresses of its probe sites, then runs workloads on
// command: eight threads calling a six-argument function, a recursive
// function, setjmp/longjmp out of recursion, C++ exceptions through
// recursion with destructors, a red-zone leaf and a USDT-shaped site, and
// prints what it counted itself. The test rewrites the sites into jumps to
// trampolines between two runs; every result must be the same.
//
// Build: see Makefile (g++ -O2 -g -pthread -fno-omit-frame-pointer
// -fno-optimize-sibling-calls).
#include <atomic>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdexcept>
#include <time.h>
#include <string>
#include <unistd.h>

extern "C" {
long rz_leaf(long a, long b);
extern char rz_leaf_site[];
long usdt_like(long a);
extern char usdt_like_site[];

std::atomic<long> work_calls, fib_calls, lj_deep_calls, thrower_calls, dtor_calls;

__attribute__((noinline)) long work(long a, long b, long c, long d, long e, long f) {
	work_calls.fetch_add(1, std::memory_order_relaxed);
	return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f;
}

__attribute__((noinline)) long fibr(long n) {
	fib_calls.fetch_add(1, std::memory_order_relaxed);
	if (n < 2)
		return n;
	return fibr(n - 1) + fibr(n - 2);
}

__attribute__((noinline)) void lj_deep(long n, jmp_buf *b) {
	lj_deep_calls.fetch_add(1, std::memory_order_relaxed);
	if (n == 0)
		longjmp(*b, 1);
	lj_deep(n - 1, b);
	asm volatile("" ::: "memory");
}

__attribute__((noinline)) long lj_top(long n) {
	jmp_buf b;
	if (setjmp(b))
		return 100 + n;
	lj_deep(n, &b);
	return -1;
}
}

struct Guard {
	long *p;
	~Guard() {
		dtor_calls.fetch_add(1, std::memory_order_relaxed);
		(*p)++;
	}
};

extern "C" __attribute__((noinline)) long thrower(long n, long *unwound) {
	thrower_calls.fetch_add(1, std::memory_order_relaxed);
	Guard g{unwound};
	if (n == 0)
		throw std::runtime_error("bottom");
	long r = thrower(n - 1, unwound);
	asm volatile("" : "+r"(r));
	return r + 1;
}

extern "C" __attribute__((noinline)) long catcher(long n) {
	long unwound = 0;
	try {
		return thrower(n, &unwound);
	} catch (const std::exception &) {
		return -unwound;
	}
}

// rz_expect computes what rz_leaf returns.
static long rz_expect(long a, long b) {
	long w[16];
	w[0] = a, w[1] = b, w[2] = a + 1, w[3] = b + 2, w[4] = a + b + 3, w[5] = a + b + 3;
	for (int i = 6; i < 16; i++)
		w[i] = (i % 2 == 0) ? a : b;
	unsigned long h = 0;
	for (int i = 0; i < 16; i++)
		h = h * 31 + (unsigned long)w[i];
	return (long)h;
}

struct Result {
	long sum, fib, lj, exc, rzbad, usdt;
};

static long iters;
static Result results[8];
static void *tps[8];

// Signals: with "run N sig", every worker has a timer that sends it
// SIGUSR1 every 20 microseconds; the signal lands at any instruction, and
// the handler itself calls the probed functions, so that it interrupts
// trampolines and return probes anywhere.
static std::atomic<long> sig_count, sig_bad;
static std::atomic<int> finished;
static bool sig;
static pthread_t workers[8];

static void on_sig(int) {
	if (fibr(6) != 8)
		sig_bad.fetch_add(1, std::memory_order_relaxed);
	if (lj_top(2) != 102)
		sig_bad.fetch_add(1, std::memory_order_relaxed);
	sig_count.fetch_add(1, std::memory_order_relaxed);
}

static std::atomic<int> started;

static void *worker(void *arg) {
	long t = (long)arg;
	tps[t] = (void *)pthread_self();
	started.fetch_add(1);
	while (started.load() < 8)
		sched_yield();
	timer_t timer;
	if (sig) {
		struct sigevent sev{};
		sev.sigev_notify = SIGEV_THREAD_ID;
		sev.sigev_signo = SIGUSR1;
		sev._sigev_un._tid = gettid();
		struct itimerspec its{};
		its.it_value.tv_nsec = 20000;
		its.it_interval.tv_nsec = 20000;
		if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0 || timer_settime(timer, 0, &its, nullptr) != 0) {
			perror("timer");
			exit(2);
		}
	}
	Result r{};
	for (long i = 0; i < iters; i++) {
		r.sum += work(t, i, i * 3, -i, (t << 32) | i, 0x5555);
		if (i % 100 == 0) {
			r.fib += fibr(12);
			r.lj += lj_top(i % 9);
			r.exc += catcher(i % 7);
		}
		if (rz_leaf(i, t) != rz_expect(i, t))
			r.rzbad++;
		r.usdt += usdt_like(i);
	}
	if (sig)
		timer_delete(timer);
	results[t] = r;
	finished.fetch_add(1);
	return nullptr;
}

int main() {
	setvbuf(stdout, nullptr, _IONBF, 0);
	void *raise = dlsym(RTLD_DEFAULT, "_Unwind_RaiseException");
	void *resume = dlsym(RTLD_DEFAULT, "_Unwind_Resume");
	void *rethrow = dlsym(RTLD_DEFAULT, "_Unwind_Resume_or_Rethrow");
	void *catch_ = dlsym(RTLD_DEFAULT, "__cxa_begin_catch");
	printf("ready pid=%d work=%p fibr=%p lj_top=%p lj_deep=%p thrower=%p catcher=%p rz_site=%p usdt_site=%p raise=%p resume=%p rethrow=%p begin_catch=%p\n",
	       getpid(), (void *)work, (void *)fibr, (void *)lj_top, (void *)lj_deep, (void *)thrower, (void *)catcher,
	       (void *)rz_leaf_site, (void *)usdt_like_site, raise, resume, rethrow, catch_);
	char line[128];
	while (fgets(line, sizeof line, stdin)) {
		if (strncmp(line, "quit", 4) == 0)
			break;
		if (sscanf(line, "run %ld", &iters) != 1)
			continue;
		sig = strstr(line, "sig") != nullptr;
		work_calls = fib_calls = lj_deep_calls = thrower_calls = dtor_calls = 0;
		sig_count = sig_bad = 0;
		finished = started = 0;
		if (sig) {
			struct sigaction sa{};
			sa.sa_handler = on_sig;
			sa.sa_flags = SA_RESTART;
			sigaction(SIGUSR1, &sa, nullptr);
		}
		for (long t = 0; t < 8; t++)
			pthread_create(&workers[t], nullptr, worker, (void *)t);
		while (finished.load() < 8)
			usleep(100);
		for (int t = 0; t < 8; t++)
			pthread_join(workers[t], nullptr);
		Result s{};
		for (auto &r : results) {
			s.sum += r.sum, s.fib += r.fib, s.lj += r.lj, s.exc += r.exc, s.rzbad += r.rzbad, s.usdt += r.usdt;
		}
		std::string tp;
		for (auto p : tps) {
			char b[32];
			snprintf(b, sizeof b, "%s%p", tp.empty() ? "" : ",", p);
			tp += b;
		}
		printf("result sum=%ld fib=%ld lj=%ld exc=%ld rzbad=%ld usdt=%ld work_calls=%ld fib_calls=%ld lj_deep_calls=%ld thrower_calls=%ld dtor_calls=%ld sig_count=%ld sig_bad=%ld tps=%s\n",
		       s.sum, s.fib, s.lj, s.exc, s.rzbad, s.usdt, work_calls.load(), fib_calls.load(), lj_deep_calls.load(),
		       thrower_calls.load(), dtor_calls.load(), sig_count.load(), sig_bad.load(), tp.c_str());
	}
	printf("bye\n");
	return 0;
}
