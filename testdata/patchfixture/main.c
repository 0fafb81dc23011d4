/*
 * patchfixture: a multi-threaded process whose functions are patched live.
 *
 *   patchfixture [park] [fork]
 *
 * Eight worker threads call every function of fx_a_base and fx_b_base in a
 * loop and count results that are neither the old nor the new value
 * (x + K or x + M, see sites.S). With "park", one more thread blocks in
 * pause() at fx_park_site + 2 until it gets SIGUSR1. With "fork", one more
 * thread forks in a loop; each child exits at once.
 *
 * SIGUSR1 and SIGUSR2 are counted. SIGTERM stops the workers; the program
 * then prints a summary and exits with status 0 if no result was wrong.
 *
 * At start it prints one line the tests parse:
 *   fixture a=0x... b=0x... n=4096 shared=0x... park=0x... pid=N
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NSITES 4096
#define NWORKERS 8

extern char fx_a_base[], fx_b_base[], fx_park_site[];
extern void fx_park_call(void);

/* Read and written by the tests through the process's memory. */
struct shared {
	volatile long calls[NWORKERS]; /* calls made by each worker */
	volatile long bad;             /* results neither old nor new */
	volatile long sig1, sig2;      /* SIGUSR1, SIGUSR2 handled */
	volatile long forks;           /* children forked */
	volatile long parked;          /* 1 while the park thread is in pause */
	volatile int stop;             /* set by SIGTERM */
	volatile int unpark;           /* set by SIGUSR1 */
	volatile int park_tid;
	volatile int worker_tid[NWORKERS];
} shared;

typedef int (*fn)(int);

static void on_usr1(int sig) { (void)sig; shared.sig1++; shared.unpark = 1; }
static void on_usr2(int sig) { (void)sig; shared.sig2++; }
static void on_wake(int sig) { (void)sig; }
static void on_term(int sig)
{
	(void)sig;
	shared.stop = 1;
	if (shared.park_tid) /* wake the park thread from pause */
		syscall(SYS_tgkill, getpid(), shared.park_tid, SIGWINCH);
}

static void *worker(void *arg)
{
	long w = (long)arg;
	shared.worker_tid[w] = (int)syscall(SYS_gettid);
	int x = (int)w * 1000;
	while (!shared.stop) {
		for (int i = 0; i < NSITES && !shared.stop; i++) {
			int k = i & 63, m = 64 + (i & 63);
			int ra = ((fn)(fx_a_base + 16 * i))(x);
			int rb = ((fn)(fx_b_base + 16 * i))(x);
			if ((ra - x != k && ra - x != m) || (rb - x != k && rb - x != m))
				__atomic_add_fetch(&shared.bad, 1, __ATOMIC_RELAXED);
			x = (x + 7) & 0xffff;
		}
		shared.calls[w]++;
	}
	return NULL;
}

static void *parker(void *arg)
{
	(void)arg;
	shared.park_tid = (int)syscall(SYS_gettid);
	while (!shared.unpark && !shared.stop) {
		shared.parked = 1;
		fx_park_call();
	}
	shared.parked = 0;
	while (!shared.stop)
		usleep(1000);
	return NULL;
}

static void *forker(void *arg)
{
	(void)arg;
	struct timespec ts = {0, 500 * 1000};
	while (!shared.stop) {
		pid_t pid = fork();
		if (pid == 0)
			_exit(0);
		if (pid > 0) {
			shared.forks++;
			while (waitpid(pid, NULL, 0) < 0 && !shared.stop)
				;
		}
		nanosleep(&ts, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int park = 0, forks = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "park") == 0)
			park = 1;
		else if (strcmp(argv[i], "fork") == 0)
			forks = 1;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_flags = SA_RESTART;
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = on_usr2;
	sigaction(SIGUSR2, &sa, NULL);
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = on_wake;
	sigaction(SIGWINCH, &sa, NULL);

	printf("fixture a=%p b=%p n=%d shared=%p park=%p pid=%d\n",
	       (void *)fx_a_base, (void *)fx_b_base, NSITES, (void *)&shared,
	       (void *)fx_park_site, (int)getpid());
	fflush(stdout);

	pthread_t th[NWORKERS + 2];
	int n = 0;
	for (long w = 0; w < NWORKERS; w++)
		pthread_create(&th[n++], NULL, worker, (void *)w);
	if (park)
		pthread_create(&th[n++], NULL, parker, NULL);
	if (forks)
		pthread_create(&th[n++], NULL, forker, NULL);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);

	long calls = 0;
	for (int w = 0; w < NWORKERS; w++)
		calls += shared.calls[w];
	printf("done calls=%ld bad=%ld sig1=%ld sig2=%ld forks=%ld\n",
	       calls, shared.bad, shared.sig1, shared.sig2, shared.forks);
	return shared.bad ? 1 : 0;
}
