/*
 * tracee: the program the live-probe tests trace. Every mode prints
 * results that depend only on its arguments, so that a traced run can be
 * compared byte for byte with an untraced one.
 *
 *   tracee work N          call every kind N times, print a checksum
 *   tracee threads T N     T threads run "work N" at once
 *   tracee signals N       "work N" on the stepped kinds under a 200 us
 *                          interval timer (SIGALRM during single steps)
 *   tracee fork N          fork; parent and child each run "work N"
 *   tracee forks N         N times: fork, the child runs "work 1" and
 *                          exits 0 if its checksum is right, the parent
 *                          runs "work 1" too; print how many were wrong
 *   tracee vfork N         N times: vfork, the child calls k_push and
 *                          k_sse (sharing the parent's memory) and exits
 *   tracee exec N          exec itself as "work N"
 *   tracee dlopen LIB N    dlopen LIB and call its lib_work(N)
 *   tracee serve           print "ready", then for each line N of stdin
 *                          run "work N" and print the checksum
 *   tracee tserve T        as serve, with T threads (started once) running
 *                          "work N" at once for each line; prints every
 *                          thread's checksum
 *   tracee sserve T        as tserve T under a 200 us interval timer
 *                          (SIGALRM, handled, in any thread at any time)
 *   tracee sigslot         print "ready", read a line; a thread calls
 *                          k_sigslot on a page it cannot read: the fault's
 *                          handler prints "in handler", makes the page
 *                          readable and waits (16 KiB further down its
 *                          stack) for the next line before it returns;
 *                          then "value V" and "done"
 *   tracee fserve T        print "ready", read a line, fork: the child
 *                          prints "child PID" and serves as tserve T; the
 *                          parent waits for it and exits with its status
 *   tracee sigtrap [own]   (with "own": SIGTRAP handled by the program
 *                          first) print "ready", then for each line:
 *                          "query" prints SIGTRAP's disposition (default,
 *                          ignored, own or other), a number N runs "work
 *                          N", "raise" raises SIGTRAP, "int3" runs an int3
 *                          (the own handler prints "own handler" and the
 *                          program goes on)
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

long k_push(long, long), k_nop(long, long), k_mov(long, long), k_sse(long, long);
long k_riprel(long, long), k_global(long, long), k_lock(long, long), k_redzone(long, long);
long k_jmp(long, long), k_ret(void), k_syscall(void);
void k_rep(char *, long);
extern long k_counter;

__attribute__((noinline)) static unsigned long mix(unsigned long h, long v)
{
	h ^= (unsigned long)v + 0x9e3779b97f4a7c15UL + (h << 6) + (h >> 2);
	return h;
}

__attribute__((noinline)) unsigned long c_fib(unsigned n)
{
	return n < 2 ? n : c_fib(n - 1) + c_fib(n - 2);
}

__attribute__((noinline)) long c_sum(const long *v, int n)
{
	long s = 0;
	for (int i = 0; i < n; i++)
		s += v[i];
	return s;
}

/* work runs every kind n times and returns a checksum of the results. */
__attribute__((noinline)) unsigned long work(long n, int stepped_only)
{
	unsigned long h = 1469598103934665603UL;
	char buf[64];
	long v[8];
	for (long i = 0; i < n; i++) {
		if (!stepped_only) {
			h = mix(h, k_push(i, 1));
			h = mix(h, k_nop(i, 2));
			h = mix(h, k_mov(i, 3));
			h = mix(h, k_redzone(i, 4));
			h = mix(h, k_jmp(i, 5));
			k_ret();
			for (int j = 0; j < 8; j++)
				v[j] = i * j;
			h = mix(h, c_sum(v, 8));
			h = mix(h, (long)c_fib(i % 10));
		}
		h = mix(h, k_sse(i, 6));
		h = mix(h, k_riprel(i, 7));
		h = mix(h, k_lock(1, 8) & 0xff);
		k_rep(buf, 1 + i % 40);
		h = mix(h, buf[i % 40]);
	}
	return h;
}

struct job {
	long n;
	unsigned long h;
};

static void *run(void *arg)
{
	struct job *j = arg;
	j->h = work(j->n, 0);
	return NULL;
}

/* tserve: T threads, started once, each run "work N" per request. */
static struct job tserve_jobs[64];
static pthread_barrier_t tserve_start, tserve_done;

static void *tserve_worker(void *arg)
{
	struct job *j = arg;
	for (;;) {
		pthread_barrier_wait(&tserve_start);
		j->h = work(j->n, 0);
		pthread_barrier_wait(&tserve_done);
	}
	return NULL;
}

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

static volatile sig_atomic_t sigslot_release;
static char *sigslot_page;

extern long k_sigslot(long *p);

/* start_alarms sends SIGALRM every 200 us, handled by on_alarm. */
static void start_alarms(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = {{0, 200}, {0, 200}};
	setitimer(ITIMER_REAL, &it, NULL);
}

/* sigslot_wait waits for the release 16 KiB further down the stack than
 * the signal frame. */
__attribute__((noinline)) static void sigslot_wait(void)
{
	volatile char deep[16384];
	deep[0] = 1;
	while (!sigslot_release) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	deep[sizeof deep - 1] = deep[0];
}

static void on_sigslot_fault(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if ((char *)si->si_addr < sigslot_page || (char *)si->si_addr >= sigslot_page + 4096) {
		signal(sig, SIG_DFL); /* not ours: die of it */
		return;
	}
	mprotect(sigslot_page, 4096, PROT_READ | PROT_WRITE);
	static const char msg[] = "in handler\n";
	write(1, msg, sizeof msg - 1);
	sigslot_wait();
}

static void *sigslot_thread(void *arg)
{
	(void)arg;
	long v = k_sigslot((long *)sigslot_page);
	printf("value %ld\n", v);
	fflush(stdout);
	return NULL;
}

/* tserve is "tracee tserve T". */
static int tserve(int t)
{
	char line[64];
	pthread_t th;
	if (t < 1 || t > 64)
		return 2;
	pthread_barrier_init(&tserve_start, NULL, t + 1);
	pthread_barrier_init(&tserve_done, NULL, t + 1);
	for (int i = 0; i < t; i++)
		if (pthread_create(&th, NULL, tserve_worker, &tserve_jobs[i]) != 0)
			return 1;
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof line, stdin)) {
		long n = atol(line);
		for (int i = 0; i < t; i++)
			tserve_jobs[i].n = n;
		pthread_barrier_wait(&tserve_start);
		pthread_barrier_wait(&tserve_done);
		printf("work %ld", n);
		for (int i = 0; i < t; i++)
			printf(" %016lx", tserve_jobs[i].h);
		printf("\n");
		fflush(stdout);
	}
	return 0;
}

static void own_sigtrap(int sig)
{
	(void)sig;
	write(1, "own handler\n", 12);
}

static int sigtrap_serve(int own)
{
	char line[64];
	if (own)
		signal(SIGTRAP, own_sigtrap);
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof line, stdin)) {
		if (strncmp(line, "query", 5) == 0) {
			struct sigaction sa;
			sigaction(SIGTRAP, NULL, &sa);
			printf("%s\n", sa.sa_handler == SIG_DFL ? "default" : sa.sa_handler == SIG_IGN ? "ignored" : sa.sa_handler == own_sigtrap ? "own" : "other");
		} else if (strncmp(line, "raise", 5) == 0) {
			fflush(stdout);
			raise(SIGTRAP);
		} else if (strncmp(line, "int3", 4) == 0) {
			fflush(stdout);
			__asm__ volatile("int3");
		} else {
			long n = atol(line);
			printf("work %ld %016lx\n", n, work(n, 0));
		}
		fflush(stdout);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "work") == 0) {
		long n = atol(argv[2]);
		printf("work %ld %016lx %ld\n", n, work(n, 0), k_global(0, 0) != -1 ? 1L : 0L);
		return 0;
	}
	if (argc >= 4 && strcmp(argv[1], "threads") == 0) {
		int t = atoi(argv[2]);
		long n = atol(argv[3]);
		pthread_t th[64];
		struct job jobs[64];
		if (t < 1 || t > 64)
			return 2;
		for (int i = 0; i < t; i++) {
			jobs[i].n = n;
			if (pthread_create(&th[i], NULL, run, &jobs[i]) != 0)
				return 1;
		}
		for (int i = 0; i < t; i++) {
			pthread_join(th[i], NULL);
			printf("thread %d %016lx\n", i, jobs[i].h);
		}
		printf("counter %ld\n", k_counter);
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "signals") == 0) {
		long n = atol(argv[2]);
		start_alarms();
		unsigned long h = work(n, 1);
		struct itimerval off = {{0, 0}, {0, 0}};
		setitimer(ITIMER_REAL, &off, NULL);
		printf("signals %ld %016lx\n", n, h);
		fprintf(stderr, "alarms %d\n", (int)alarms);
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "forks") == 0) {
		long n = atol(argv[2]), bad = 0;
		unsigned long want = work(1, 0);
		fflush(stdout);
		for (long i = 0; i < n; i++) {
			pid_t pid = fork();
			if (pid < 0)
				return 1;
			if (pid == 0)
				_exit(work(1, 0) == want ? 0 : 1);
			int st;
			if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
				bad++;
			if (work(1, 0) != want)
				bad++;
		}
		printf("forks %ld bad %ld\n", n, bad);
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "fork") == 0) {
		long n = atol(argv[2]);
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			printf("child %016lx\n", work(n, 0));
			return 0;
		}
		int st;
		waitpid(pid, &st, 0);
		printf("parent %016lx child-status %d\n", work(n, 0), st);
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "vfork") == 0) {
		long n = atol(argv[2]), ok = 0;
		for (long i = 0; i < n; i++) {
			long want = k_push(i, 1) + k_sse(i, 2);
			pid_t pid = vfork();
			if (pid < 0)
				return 1;
			if (pid == 0)
				_exit(k_push(i, 1) + k_sse(i, 2) == want ? 0 : 1);
			int st;
			if (waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
				ok++;
		}
		printf("vfork %ld ok %ld\n", n, ok);
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "exec") == 0) {
		printf("before exec %016lx\n", work(atol(argv[2]), 0));
		fflush(stdout);
		execl("/proc/self/exe", argv[0], "work", argv[2], (char *)NULL);
		return 1;
	}
	if (argc >= 4 && strcmp(argv[1], "dlopen") == 0) {
		void *h = dlopen(argv[2], RTLD_NOW);
		if (!h) {
			fprintf(stderr, "%s\n", dlerror());
			return 1;
		}
		unsigned long (*f)(long) = (unsigned long (*)(long))dlsym(h, "lib_work");
		if (!f)
			return 1;
		printf("dlopen %016lx\n", f(atol(argv[3])));
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "serve") == 0) {
		char line[64];
		printf("ready\n");
		fflush(stdout);
		while (fgets(line, sizeof line, stdin)) {
			long n = atol(line);
			printf("work %ld %016lx\n", n, work(n, 0));
			fflush(stdout);
		}
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "tserve") == 0)
		return tserve(atoi(argv[2]));
	if (argc >= 2 && strcmp(argv[1], "sigslot") == 0) {
		char line[64];
		pthread_t th;
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_sigaction = on_sigslot_fault;
		sa.sa_flags = SA_SIGINFO;
		sigaction(SIGSEGV, &sa, NULL);
		sigslot_page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (sigslot_page == MAP_FAILED)
			return 1;
		printf("ready\n");
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			return 1;
		/* Written while the page is readable: the handler makes it so. */
		if (pthread_create(&th, NULL, sigslot_thread, NULL) != 0)
			return 1;
		if (!fgets(line, sizeof line, stdin))
			return 1;
		sigslot_release = 1;
		pthread_join(th, NULL);
		printf("done\n");
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "sserve") == 0) {
		start_alarms();
		return tserve(atoi(argv[2]));
	}
	if (argc >= 2 && strcmp(argv[1], "sigtrap") == 0)
		return sigtrap_serve(argc >= 3 && strcmp(argv[2], "own") == 0);
	if (argc >= 3 && strcmp(argv[1], "fserve") == 0) {
		char line[64];
		printf("ready\n");
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			return 1;
		pid_t pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			printf("child %d\n", (int)getpid());
			return tserve(atoi(argv[2]));
		}
		int st;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
			return 1;
		return WEXITSTATUS(st);
	}
	fprintf(stderr, "usage: tracee work|threads|signals|fork|exec|dlopen|serve|tserve ...\n");
	return 2;
}
