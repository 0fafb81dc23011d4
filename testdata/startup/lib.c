// libstartup.so runs code of its own while the dynamic linker loads it,
// before its initialisers: its data holds a pointer to the IFUNC pick, so
// relocating it calls pick's resolver, which calls choose. Its constructor
// calls choose again. Preloaded into any program (LD_PRELOAD), choose runs
// twice and resolve_pick once.
__attribute__((visibility("hidden"), noinline)) int choose(void)
{
	__asm__ volatile("" ::: "memory");
	return 1;
}

static int pick_a(int x) { return x + 1; }
static int pick_b(int x) { return x + 2; }

static void *resolve_pick(void) { return choose() ? (void *)pick_a : (void *)pick_b; }

int pick(int) __attribute__((ifunc("resolve_pick")));

int (*volatile pick_ptr)(int) = pick;

__attribute__((constructor)) static void at_load(void) { choose(); }
