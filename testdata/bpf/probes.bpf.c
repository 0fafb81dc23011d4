// Probe programs for package bpf's tests: every section form libbpf
// reads, the map types bpf/maps holds, and the helpers the JIT compiles.
// Built by the tests with the flags of the Makefile.
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u64);
} by_arg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

struct event {
	__u64 pid_tgid;
	__u64 arg;
	char str[16];
};

volatile __u64 calls;     // .bss
const volatile __u64 scale = 3; // .rodata

static __always_inline __u32 log2l(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

// count: a per-thread counter and a log2 histogram of the first argument.
SEC("uprobe/libc.so.6:malloc")
int BPF_KPROBE(count, __u64 size)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&hits, &zero);
	if (n)
		(*n)++;
	__u32 slot = log2l(size);
	__u64 *h = bpf_map_lookup_elem(&hist, &slot);
	if (h)
		__sync_fetch_and_add(h, 1);
	return 0;
}

// counter: the per-thread counter alone (the benchmarks' first program).
SEC("uprobe")
int counter(struct pt_regs *ctx)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&hits, &zero);
	if (n)
		(*n)++;
	return 0;
}

// keyed: counts by argument in a hash map, scaled by a .rodata constant.
SEC("uretprobe//bin/true:main")
int BPF_KRETPROBE(keyed, __u64 ret)
{
	__u64 one = scale, *v;
	calls++;
	v = bpf_map_lookup_elem(&by_arg, &ret);
	if (v) {
		__sync_fetch_and_add(v, scale);
		return 0;
	}
	bpf_map_update_elem(&by_arg, &ret, &one, BPF_NOEXIST);
	return 0;
}

// record: a ring buffer record with the pid, the argument and a string
// read from the first argument's pointer.
SEC("usdt/./a.out:prov:name")
int record(struct pt_regs *ctx)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->pid_tgid = bpf_get_current_pid_tgid();
	e->arg = PT_REGS_PARM2(ctx);
	bpf_probe_read_user_str(e->str, sizeof(e->str), (void *)PT_REGS_PARM1(ctx));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

// manual: attached by hand; the time and a random number.
SEC("uprobe")
int manual(struct pt_regs *ctx)
{
	__u64 t = bpf_ktime_get_ns() + bpf_get_prandom_u32();
	return t != 0;
}

// offset: a uprobe at an offset into a function.
SEC("uprobe/./a.out:work+0x4")
int offset(struct pt_regs *ctx)
{
	return 0;
}
