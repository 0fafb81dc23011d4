// USDT programs whose sections name their probes, for the test of
// "probeopt run": built with -DUSDT_PATH='"/path/to/usdtwork"'.
// regs keeps, per first argument of usdtwork:regs, the calls and the
// second and last arguments; guarded, per first argument of
// usdtwork:guarded, its second (the probe's semaphore).
#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

char LICENSE[] SEC("license") = "GPL";

struct regs_value {
	__u64 calls;
	long uc, ul;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, long);
	__type(value, struct regs_value);
} by_c SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, long);
	__type(value, long);
} by_k SEC(".maps");

SEC("usdt/" USDT_PATH ":usdtwork:regs")
int BPF_USDT(regs, long c, long uc, long s, long us, long x, long ux, long l, long ul)
{
	struct regs_value v = {.uc = uc, .ul = ul}, *p = bpf_map_lookup_elem(&by_c, &c);
	if (!p) {
		// Threads may insert the key at once: one insert wins.
		bpf_map_update_elem(&by_c, &c, &v, BPF_NOEXIST);
		p = bpf_map_lookup_elem(&by_c, &c);
		if (!p)
			return 0;
	}
	__sync_fetch_and_add(&p->calls, 1);
	return 0;
}

SEC("usdt/" USDT_PATH ":usdtwork:guarded")
int BPF_USDT(guarded, long k, int sema)
{
	long v = sema;
	bpf_map_update_elem(&by_k, &k, &v, BPF_ANY);
	return 0;
}
