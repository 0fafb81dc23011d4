// The USDT arguments of the end-to-end tests, with libbpf's usdt.bpf.h:
// for every hit of a USDT probe the program is attached to, the number
// of arguments, each argument's value and bpf_usdt_arg's result for all
// 12 argument numbers, and the attachment's USDT cookie, counted per
// distinct combination. Built by the tests with the flags of the
// Makefile; attached by libbpf's own loader and by probeopt.
#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

char LICENSE[] SEC("license") = "GPL";

struct hit {
	__u64 cookie;
	__s64 cnt;
	__s64 ret[BPF_USDT_MAX_ARG_CNT];
	long val[BPF_USDT_MAX_ARG_CNT];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hit);
	__type(value, __u64);
} hits SEC(".maps");

// scratch holds the key being built (too large for the stack beside the
// helpers' frames).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hit);
} scratch SEC(".maps");

SEC("usdt")
int on_usdt(struct pt_regs *ctx)
{
	__u32 zero = 0;
	struct hit *h = bpf_map_lookup_elem(&scratch, &zero);
	if (!h)
		return 0;
	h->cookie = bpf_usdt_cookie(ctx);
	h->cnt = bpf_usdt_arg_cnt(ctx);
#pragma unroll
	for (int i = 0; i < BPF_USDT_MAX_ARG_CNT; i++)
		h->ret[i] = bpf_usdt_arg(ctx, i, &h->val[i]);
	__u64 none = 0, *n = bpf_map_lookup_elem(&hits, h);
	if (!n) {
		// Threads may insert the key at once: one insert wins.
		bpf_map_update_elem(&hits, h, &none, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&hits, h);
		if (!n)
			return 0;
	}
	__sync_fetch_and_add(n, 1);
	return 0;
}

// by_args is BPF_USDT's form: the first three arguments of the probe it
// is attached to, summed per first argument.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, long);
	__type(value, long);
} by_args SEC(".maps");

SEC("usdt")
int BPF_USDT(three, long a, long b, long c)
{
	long zero = 0, *p = bpf_map_lookup_elem(&by_args, &a);
	if (!p) {
		bpf_map_update_elem(&by_args, &a, &zero, BPF_NOEXIST);
		p = bpf_map_lookup_elem(&by_args, &a);
		if (!p)
			return 0;
	}
	__sync_fetch_and_add(p, b + c);
	return 0;
}
