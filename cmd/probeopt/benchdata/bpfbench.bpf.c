// The program of "probeopt bench bpf": per hit, a per-CPU counter and a
// per-CPU log2 histogram of the first argument. Per-CPU, as a BPF
// aggregation that scales is written: a histogram in a shared array,
// added to with __sync_fetch_and_add, puts every thread's hits on the
// same cache line.
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
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} hist SEC(".maps");

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

SEC("uprobe")
int BPF_KPROBE(count, __u64 arg)
{
	__u32 zero = 0, slot = log2l(arg);
	__u64 *n = bpf_map_lookup_elem(&hits, &zero);
	if (n)
		(*n)++;
	__u64 *h = bpf_map_lookup_elem(&hist, &slot);
	if (h)
		(*h)++;
	return 0;
}
