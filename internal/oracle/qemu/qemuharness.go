package qemu

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The arm64 oracle's harness is a small static aarch64 program, built
// from qemuHarnessSource with a cross compiler and run under
// qemu-aarch64. It maps the windows of an ARM64Image, then for each case
// installs the case's instruction words, enters the case's register file
// through a signal return, and reports the state of the first signal that
// follows: the trap word that fills the code windows, a fault, or the
// CPU-time interval timer for a case that loops.

// qemuHarnessFlags are the compiler flags of the harness.
var qemuHarnessFlags = []string{"-static", "-O2", "-Wall", "-Wextra", "-Werror"}

// QEMUHarnessCC is the default cross compiler for the harness.
const QEMUHarnessCC = "aarch64-linux-gnu-gcc"

// ErrNoToolchain is returned (wrapped) when the cross compiler or
// qemu-aarch64 the arm64 oracle needs is not installed.
var ErrNoToolchain = errors.New("arm64 oracle tool not found")

// BuildQEMUHarness returns the path of the harness executable, compiling
// it with cc (QEMUHarnessCC when empty) unless a build with the same
// source, flags and compiler is cached under cacheDir (a directory under
// os.TempDir() when empty). Concurrent builds are safe: each writes a
// temporary file and renames it into place.
func BuildQEMUHarness(cc, cacheDir string) (string, error) {
	if cc == "" {
		cc = QEMUHarnessCC
	}
	ccPath, err := exec.LookPath(cc)
	if err != nil {
		return "", fmt.Errorf("%s: %w", cc, ErrNoToolchain)
	}
	ver, err := exec.Command(ccPath, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", cc, err)
	}
	h := sha256.New()
	for _, s := range []string{qemuHarnessSource, strings.Join(qemuHarnessFlags, " "), ccPath, string(ver)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	key := hex.EncodeToString(h.Sum(nil))[:20]
	if cacheDir == "" {
		cacheDir = filepath.Join(os.TempDir(), "probeopt-qemu-harness")
	}
	dir := filepath.Join(cacheDir, key)
	exe := filepath.Join(dir, "harness")
	if st, err := os.Stat(exe); err == nil && st.Mode().IsRegular() {
		return exe, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("harness cache: %w", err)
	}
	src := filepath.Join(dir, "harness.c")
	if err := os.WriteFile(src, []byte(qemuHarnessSource), 0o644); err != nil {
		return "", fmt.Errorf("harness source: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "harness-*.tmp")
	if err != nil {
		return "", fmt.Errorf("harness cache: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	args := append(append([]string{}, qemuHarnessFlags...), "-o", tmp.Name(), src)
	var stderr bytes.Buffer
	cmd := exec.Command(ccPath, args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build the harness: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := os.Rename(tmp.Name(), exe); err != nil {
		return "", fmt.Errorf("harness cache: %w", err)
	}
	return exe, nil
}

// qemuHarnessSource is the C source of the harness.
const qemuHarnessSource = `/*
 * The arm64 oracle's harness: runs cases (an initial register file, NZCV,
 * FP/SIMD registers and instruction words placed in code windows) and
 * reports the state at the first signal that follows, with the changed
 * quadwords of the restorable data windows.
 *
 * stdin: a setup message, then batches of cases; stdout: a batch of
 * results for each batch of cases. All integers little-endian.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>
#include <asm/sigcontext.h>

#define MAGIC_SETUP 0x36344853u /* "SH64" */
#define MAGIC_BATCH 0x36344842u /* "BH64" */
#define MAGIC_RES 0x36344852u   /* "RH64" */

#define WIN_RESERVE 0 /* PROT_NONE area */
#define WIN_CODE 1    /* read+execute, patched per case */
#define WIN_DATA 2    /* restored after each case, diffs reported */
#define WIN_CONST 3   /* mapped with given content and protection */

#define MAXWIN 32
#define MAXPATCH 64
#define MAXDIFF 64
#define PAGE 4096u

struct win {
	uint64_t addr, size;
	uint32_t kind, prot;
	uint8_t *pristine;
};

static struct win wins[MAXWIN];
static uint32_t nwin;

struct case_hdr {
	uint32_t flags, npatch;
	uint64_t x[31], sp, pc, nzcv;
};

struct res_hdr {
	uint32_t signo, code;
	uint64_t addr;
	uint64_t x[31], sp, pc, pstate;
	uint32_t flags, ndiff;
};

struct patch {
	uint64_t addr;
	uint32_t word, pad;
};

static volatile int armed;
static volatile uint64_t case_seq, tick_seq;
static struct case_hdr *cur;
static uint64_t *cur_v;
static struct res_hdr *res;
static uint64_t *res_v;

static struct {
	uint64_t regs[31], sp, pc, pstate;
	__uint128_t v[32];
} saved;

static void die(const char *m)
{
	write(2, "harness: ", 9);
	write(2, m, strlen(m));
	write(2, "\n", 1);
	_exit(3);
}

static void readall(void *p, size_t n)
{
	uint8_t *b = p;
	while (n > 0) {
		ssize_t r = read(0, b, n);
		if (r == 0)
			_exit(0);
		if (r < 0)
			die("read");
		b += r;
		n -= (size_t)r;
	}
}

static void writeall(const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n > 0) {
		ssize_t r = write(1, b, n);
		if (r <= 0)
			die("write");
		b += r;
		n -= (size_t)r;
	}
}

static struct fpsimd_context *fpctx(mcontext_t *mc)
{
	uint8_t *p = (uint8_t *)mc->__reserved;
	uint8_t *end = p + sizeof(mc->__reserved);
	while (p + sizeof(struct _aarch64_ctx) <= end) {
		struct _aarch64_ctx *h = (struct _aarch64_ctx *)p;
		if (h->magic == 0 || h->size == 0)
			break;
		if (h->magic == FPSIMD_MAGIC)
			return (struct fpsimd_context *)p;
		p += h->size;
	}
	return 0;
}

static void handler(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;
	mcontext_t *mc = &uc->uc_mcontext;
	struct fpsimd_context *fp = fpctx(mc);
	if (fp == 0)
		die("no fpsimd record in the signal frame");
	if (armed == 1) {
		if (sig != SIGTRAP)
			die("harness fault");
		memcpy(saved.regs, mc->regs, sizeof saved.regs);
		saved.sp = mc->sp;
		saved.pc = mc->pc;
		saved.pstate = mc->pstate;
		memcpy(saved.v, fp->vregs, sizeof saved.v);
		memcpy(mc->regs, cur->x, sizeof cur->x);
		mc->sp = cur->sp;
		mc->pc = cur->pc;
		mc->pstate = (mc->pstate & ~0xF0000000ull) | (cur->nzcv & 0xF0000000ull);
		if (cur->flags & 1)
			memcpy(fp->vregs, cur_v, sizeof fp->vregs);
		else
			memset(fp->vregs, 0, sizeof fp->vregs);
		armed = 2;
		return;
	}
	if (armed != 2)
		die("unexpected signal");
	res->signo = (uint32_t)sig;
	res->code = (uint32_t)si->si_code;
	res->addr = (uint64_t)si->si_addr;
	memcpy(res->x, mc->regs, sizeof res->x);
	res->sp = mc->sp;
	res->pc = mc->pc;
	res->pstate = mc->pstate;
	if (cur->flags & 1)
		memcpy(res_v, fp->vregs, sizeof fp->vregs);
	memcpy(mc->regs, saved.regs, sizeof saved.regs);
	mc->sp = saved.sp;
	mc->pc = saved.pc + 4;
	mc->pstate = saved.pstate;
	memcpy(fp->vregs, saved.v, sizeof saved.v);
	armed = 0;
}

/* A case still running after two ticks of the interval timer (a loop)
 * ends with SIGVTALRM. The timer counts the process's CPU time, so a
 * busy machine does not end a case early. */
static void alarm_handler(int sig, siginfo_t *si, void *ucv)
{
	if (armed == 2 && case_seq == tick_seq) {
		handler(sig, si, ucv);
		return;
	}
	tick_seq = case_seq;
}

static void __attribute__((noinline)) run_case(void)
{
	case_seq++;
	armed = 1;
	__asm__ volatile("brk #0x7a" ::: "memory");
	if (armed != 0)
		die("case did not end");
}

static struct win *find_code(uint64_t a)
{
	for (uint32_t i = 0; i < nwin; i++)
		if (wins[i].kind == WIN_CODE && a >= wins[i].addr && a - wins[i].addr < wins[i].size)
			return &wins[i];
	return 0;
}

/* Pages made writable for patching, as page addresses. */
static uint64_t open_pages[2 * MAXPATCH];
static uint32_t nopen;

static void open_page(uint64_t pg)
{
	for (uint32_t i = 0; i < nopen; i++)
		if (open_pages[i] == pg)
			return;
	if (mprotect((void *)pg, PAGE, PROT_READ | PROT_WRITE) != 0)
		die("mprotect rw");
	open_pages[nopen++] = pg;
}

static void close_pages(uint32_t prot)
{
	for (uint32_t i = 0; i < nopen; i++) {
		__builtin___clear_cache((char *)open_pages[i], (char *)open_pages[i] + PAGE);
		if (mprotect((void *)open_pages[i], PAGE, prot) != 0)
			die("mprotect rx");
	}
	nopen = 0;
}

static struct patch old_patches[MAXPATCH];
static uint32_t nold;

static void apply(struct patch *p, uint32_t n)
{
	for (uint32_t i = 0; i < nold; i++)
		open_page(old_patches[i].addr & ~(uint64_t)(PAGE - 1));
	for (uint32_t i = 0; i < n; i++) {
		if (find_code(p[i].addr) == 0 || (p[i].addr & 3) != 0)
			die("patch outside the code windows");
		open_page(p[i].addr & ~(uint64_t)(PAGE - 1));
	}
	for (uint32_t i = 0; i < nold; i++) {
		struct win *w = find_code(old_patches[i].addr);
		uint64_t off = old_patches[i].addr - w->addr;
		memcpy((void *)old_patches[i].addr, w->pristine + off, 4);
	}
	for (uint32_t i = 0; i < n; i++)
		memcpy((void *)p[i].addr, &p[i].word, 4);
	memcpy(old_patches, p, n * sizeof *p);
	nold = n;
	close_pages(PROT_READ | PROT_EXEC);
}

static uint32_t diff_data(uint64_t *out)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < nwin; i++) {
		if (wins[i].kind != WIN_DATA)
			continue;
		uint64_t *m = (uint64_t *)wins[i].addr, *p = (uint64_t *)wins[i].pristine;
		uint64_t q = wins[i].size / 8;
		for (uint64_t j = 0; j < q; j++) {
			if (m[j] == p[j])
				continue;
			if (n < MAXDIFF) {
				out[2 * n] = wins[i].addr + 8 * j;
				out[2 * n + 1] = m[j];
			}
			n++;
			m[j] = p[j];
		}
	}
	return n;
}

static void setup(void)
{
	uint32_t h[4];
	readall(h, sizeof h);
	if (h[0] != MAGIC_SETUP || h[1] > MAXWIN)
		die("bad setup");
	nwin = h[1];
	for (uint32_t i = 0; i < nwin; i++) {
		uint64_t d[3];
		readall(d, sizeof d);
		struct win *w = &wins[i];
		w->addr = d[0];
		w->size = d[1];
		w->kind = (uint32_t)d[2];
		w->prot = (uint32_t)(d[2] >> 32);
		int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
		if (w->kind != WIN_RESERVE)
			flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED; /* inside a reservation */
		void *m = mmap((void *)w->addr, w->size, w->kind == WIN_RESERVE ? PROT_NONE : PROT_READ | PROT_WRITE, flags, -1, 0);
		if (m != (void *)w->addr)
			die("mmap");
		if (w->kind == WIN_RESERVE)
			continue;
		readall(m, w->size);
		w->pristine = malloc(w->size);
		if (w->pristine == 0)
			die("malloc");
		memcpy(w->pristine, m, w->size);
		__builtin___clear_cache((char *)m, (char *)m + w->size);
		if (mprotect(m, w->size, w->prot) != 0)
			die("mprotect");
	}
}

int main(void)
{
	/* Linux user space ignores the top byte of data addresses; ask qemu for
	 * the same (the tagged address ABI). */
	prctl(55 /* PR_SET_TAGGED_ADDR_CTRL */, 1, 0, 0, 0);
	static uint8_t altstack[1 << 16];
	stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack};
	if (sigaltstack(&ss, 0) != 0)
		die("sigaltstack");
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = handler;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
	sigfillset(&sa.sa_mask);
	int sigs[] = {SIGTRAP, SIGSEGV, SIGBUS, SIGILL, SIGFPE};
	for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		if (sigaction(sigs[i], &sa, 0) != 0)
			die("sigaction");
	struct sigaction sal;
	memset(&sal, 0, sizeof sal);
	sal.sa_sigaction = alarm_handler;
	sal.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	sigfillset(&sal.sa_mask);
	if (sigaction(SIGVTALRM, &sal, 0) != 0)
		die("sigaction");
	struct itimerval it = {{0, 100000}, {0, 100000}};
	if (setitimer(ITIMER_VIRTUAL, &it, 0) != 0)
		die("setitimer");
	setup();
	uint32_t ok = MAGIC_RES;
	writeall(&ok, 4);

	size_t incap = 0, outcap = 0;
	uint8_t *in = 0, *out = 0;
	for (;;) {
		uint32_t h[4];
		readall(h, sizeof h);
		if (h[0] != MAGIC_BATCH)
			die("bad batch");
		uint32_t n = h[1], bytes = h[2];
		if (bytes > incap) {
			incap = bytes;
			in = realloc(in, incap);
		}
		size_t need = (size_t)n * (sizeof(struct res_hdr) + 512 + 16 * MAXDIFF) + 16;
		if (need > outcap) {
			outcap = need;
			out = realloc(out, outcap);
		}
		if (in == 0 || out == 0)
			die("malloc");
		readall(in, bytes);
		uint8_t *ip = in, *op = out + 16;
		for (uint32_t k = 0; k < n; k++) {
			cur = (struct case_hdr *)ip;
			ip += sizeof *cur;
			cur_v = 0;
			if (cur->flags & 1) {
				cur_v = (uint64_t *)ip;
				ip += 512;
			}
			if (cur->npatch > MAXPATCH)
				die("too many patches");
			struct patch *p = (struct patch *)ip;
			ip += cur->npatch * sizeof *p;
			apply(p, cur->npatch);
			res = (struct res_hdr *)op;
			memset(res, 0, sizeof *res);
			res->flags = cur->flags & 1;
			op += sizeof *res;
			res_v = 0;
			if (cur->flags & 1) {
				res_v = (uint64_t *)op;
				op += 512;
			}
			run_case();
			uint32_t nd = diff_data((uint64_t *)op);
			res->ndiff = nd;
			if (nd > MAXDIFF)
				nd = MAXDIFF;
			op += 16 * nd;
		}
		uint32_t *oh = (uint32_t *)out;
		oh[0] = MAGIC_RES;
		oh[1] = n;
		oh[2] = (uint32_t)(op - out - 16);
		oh[3] = 0;
		writeall(out, (size_t)(op - out));
	}
}
`
